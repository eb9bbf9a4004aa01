package config

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestMigrateOldConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := writeFile(t, dir, "cli-config.yaml", readTestdata(t, "old-0.6.0.yaml"))

	// The old file is refused, naming each removed key, its replacement and
	// the verb.
	_, _, err := LoadFile(path)
	if !errors.Is(err, ErrRemovedKey) {
		t.Fatalf("LoadFile(old) = %v, want ErrRemovedKey", err)
	}
	for _, want := range []string{
		"channels.slack.events", "channels.slack.subscribe",
		"channels.slack.authorizedUsers", "routing.authorizedUsers", "{slack: <member id>}",
		"the-loop migrate-config",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal does not name %q:\n%v", want, err)
		}
	}
	golden(t, "old-0.6.0.refusal.txt", []byte(strings.ReplaceAll(err.Error(), dir, "<dir>")+"\n"))

	out, rep, err := Migrate(readTestdata(t, "old-0.6.0.yaml"))
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if !rep.Changed() {
		t.Fatal("Migrate reported no change")
	}
	golden(t, "old-0.6.0.migrated.yaml", out)
	var r bytes.Buffer
	if err := rep.Render(&r); err != nil {
		t.Fatal(err)
	}
	golden(t, "old-0.6.0.report.txt", r.Bytes())

	// Comments survive, including those on moved ids.
	for _, c := range []string{"# the-loop CLI config for octo/repo.", "# the maintainer", "# #the-loop",
		"# What the channel hears.", "# Slack members who may reply.", "# Carol's phone", "# needs LOOP_SLACK_APP_TOKEN"} {
		if !bytes.Contains(out, []byte(c)) {
			t.Errorf("comment %q lost:\n%s", c, out)
		}
	}

	// The result loads, with U111 a Slack-only person and U222 still Bob.
	migrated := writeFile(t, dir, "migrated.yaml", out)
	cfg, _, err := LoadFile(migrated)
	if err != nil {
		t.Fatalf("LoadFile(migrated): %v", err)
	}
	users := cfg.Routing.AuthorizedUsers
	if got := strings.Join(users.SlackIDs(), ","); got != "U222,U111" {
		t.Errorf("SlackIDs = %s, want U222,U111", got)
	}
	if got := strings.Join(users.GitHubLogins(), ","); got != "alice,bob" {
		t.Errorf("GitHubLogins = %s, want alice,bob (nothing widened)", got)
	}
	if got := cfg.Channels.Slack.Subscribe; len(got) != 2 || got[1] != "phase-approval-pending" {
		t.Errorf("Subscribe = %v", got)
	}

	// A second run changes nothing, byte for byte.
	again, rep2, err := Migrate(out)
	if err != nil {
		t.Fatalf("second Migrate: %v", err)
	}
	if rep2.Changed() || !bytes.Equal(again, out) {
		t.Errorf("second Migrate changed something: %+v\n%s", rep2, again)
	}
	r.Reset()
	_ = rep2.Render(&r)
	golden(t, "current.report.txt", r.Bytes())
}

func TestMigrateCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		wantOut   []string // substrings of the output
		notOut    []string
		wantMoves []string // substrings, one per expected move
		wantNotes int
		wantErr   string
	}{
		{
			name:      "both events and subscribe: subscribe wins",
			in:        "version: 0.6.0\nchannels:\n  slack:\n    events: [comment.human]\n    subscribe: [session.awaiting_input]\n",
			wantOut:   []string{"subscribe: [session.awaiting_input]", `version: "0.7.0"`},
			notOut:    []string{"events", "comment.human"},
			wantMoves: []string{"dropped channels.slack.events [comment.human]: channels.slack.subscribe is already set", "graphs.workItem: pdlc-work-item-loop", "version 0.6.0 → 0.7.0"},
		},
		{
			name:      "events: [] keeps the old default by dropping the key",
			in:        "version: \"0.6.0\"\nchannels:\n  slack:\n    events: []\n",
			notOut:    []string{"events", "subscribe"},
			wantMoves: []string{"dropped channels.slack.events []", "graphs.workItem", "version"},
			wantNotes: 1,
		},
		{
			name:      "slack id already in an entry is not added again",
			in:        "routing:\n  authorizedUsers:\n    - {github: bob, slack: U1}\nchannels:\n  slack:\n    authorizedUsers: [U1, U1, U2]\n",
			wantOut:   []string{"- slack: U2", "{github: bob, slack: U1}"},
			wantMoves: []string{"kept Slack member U1", "moved Slack member U2", "removed channels.slack.authorizedUsers", "set version to 0.7.0"},
			wantNotes: 1,
		},
		{
			name:      "routing created when absent",
			in:        "version: 0.6.0\nchannels:\n  slack:\n    authorizedUsers:\n      - U9\n",
			wantOut:   []string{"routing:\n  authorizedUsers:\n    - slack: U9"},
			wantMoves: []string{"moved Slack member U9", "removed channels.slack.authorizedUsers", "graphs.workItem", "version"},
			wantNotes: 1,
		},
		{
			name:      "only the version is old",
			in:        "version: 0.5.0 # old\nrouting:\n  authorizedUsers: [alice]\n",
			wantOut:   []string{`version: "0.7.0" # old`},
			wantMoves: []string{"graphs.workItem: pdlc-work-item-loop", "version 0.5.0 → 0.7.0"},
		},
		{
			name:    "newer version refused",
			in:      "version: 0.8.0\n",
			wantErr: "newer",
		},
		{
			name:    "routing not a mapping",
			in:      "routing: [a]\nchannels:\n  slack:\n    authorizedUsers: [U1]\n",
			wantErr: "routing is not a mapping",
		},
		{
			name:    "not a mapping",
			in:      "- a\n",
			wantErr: "must be a mapping",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, rep, err := Migrate([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Migrate err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Migrate: %v", err)
			}
			for _, s := range tt.wantOut {
				if !strings.Contains(string(out), s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
			for _, s := range tt.notOut {
				if strings.Contains(string(out), s) {
					t.Errorf("output has %q:\n%s", s, out)
				}
			}
			if len(rep.Moves) != len(tt.wantMoves) {
				t.Errorf("moves = %q, want %d", rep.Moves, len(tt.wantMoves))
			}
			for i, m := range tt.wantMoves {
				if i < len(rep.Moves) && !strings.Contains(rep.Moves[i], m) {
					t.Errorf("move %d = %q, want it to contain %q", i, rep.Moves[i], m)
				}
			}
			if len(rep.Notes) != tt.wantNotes {
				t.Errorf("notes = %q, want %d", rep.Notes, tt.wantNotes)
			}
			again, rep2, err := Migrate(out)
			if err != nil || rep2.Changed() || !bytes.Equal(again, out) {
				t.Errorf("not idempotent: err=%v report=%+v", err, rep2)
			}
			if _, _, err := Parse(out); errors.Is(err, ErrRemovedKey) {
				t.Errorf("migrated output still refused: %v", err)
			}
		})
	}
}

func TestMigrateCurrentIsUntouched(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"current-0.7.0.yaml"} {
		src := readTestdata(t, name)
		out, rep, err := Migrate(src)
		if err != nil || rep.Changed() || !bytes.Equal(out, src) {
			t.Errorf("Migrate(%s): err=%v changed=%v identical=%v", name, err, rep.Changed(), bytes.Equal(out, src))
		}
	}
	for _, src := range []string{"", "# only a comment\n"} {
		out, rep, err := Migrate([]byte(src))
		if err != nil || rep.Changed() || string(out) != src {
			t.Errorf("Migrate(%q) = %q, %+v, %v", src, out, rep, err)
		}
	}
}
