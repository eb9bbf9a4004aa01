package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/identity"
)

func TestLoadCurrentFile(t *testing.T) {
	t.Parallel()
	path := writeFile(t, t.TempDir(), "cli-config.yaml", readTestdata(t, "current-0.7.0.yaml"))
	cfg, ws, err := LoadFile(path)
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	if len(ws) != 0 {
		t.Errorf("warnings: %v", ws)
	}
	want := SlackChannel{
		Enabled:   true,
		Channel:   "C0123456789",
		Subscribe: []catalog.Type{catalog.SessionAwaitingInput, catalog.CommentHuman, catalog.WorkItemComplete},
		Publish:   []catalog.Type{catalog.WorkItemReply, catalog.GateFeedback, catalog.WorkItemCreate},
		Verbosity: VerbosityVerbose,
		Read:      SlackRead{Mode: ReadEvents, IntervalSeconds: 10},
		MaxChars:  1500,
		Kickoff:   Kickoff{Repo: "octo/repo", Labels: []string{"the-loop", "triage"}},
	}
	if diff := cmp.Diff(want, cfg.Channels.Slack); diff != "" {
		t.Errorf("channels.slack (-want +got):\n%s", diff)
	}
	wantControl := Control{Enabled: true, RequireStartCommand: false, Keywords: map[string]string{"start": "loop go", "cleanup": ""}}
	if diff := cmp.Diff(wantControl, cfg.Routing.Control); diff != "" {
		t.Errorf("routing.control (-want +got):\n%s", diff)
	}
	wantPeople := []identity.Person{{GitHub: "alice"}, {GitHub: "Bob", Slack: "U222", Name: "Bob"}, {Slack: "U333"}}
	if diff := cmp.Diff(wantPeople, cfg.Routing.AuthorizedUsers.People()); diff != "" {
		t.Errorf("authorizedUsers (-want +got):\n%s", diff)
	}
	if cfg.Channels.Ledger != LedgerGitHub || cfg.Version != Version {
		t.Errorf("ledger %q version %q", cfg.Channels.Ledger, cfg.Version)
	}
	if !cfg.Channels.Slack.CanPublish(catalog.GateFeedback) || cfg.Channels.Slack.CanPublish(catalog.ControlCommand) {
		t.Error("CanPublish disagrees with the publish list")
	}
	if cfg.Routing.AuthorizedUsers.Authorized(identity.ChannelGitHub, "U333") {
		t.Error("a Slack-only entry passed a GitHub check")
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	for _, src := range []string{"", "# nothing\n", "version: \"0.7.0\"\n", "version: 0.7.0\nchannels:\n  slack:\n", "version: 0.7.0\nchannels: {slack: {subscribe: ~, publish: null}}\n"} {
		cfg, _, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		cfg.Version = ""
		if diff := cmp.Diff(Default(), cfg, cmpopts.IgnoreUnexported(identity.Directory{}, Graphs{})); diff != "" {
			t.Errorf("Parse(%q) is not Default (-want +got):\n%s", src, diff)
		}
		if cfg.Routing.AuthorizedUsers.Len() != 0 || cfg.Routing.AuthorizedUsers.Authorized(identity.ChannelGitHub, "anyone") {
			t.Errorf("Parse(%q): an empty list authorized someone", src)
		}
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		src  string
		kind error
		want []string // substrings of the error
	}{
		{"unknown top-level key", "version: 0.7.0\ngraph: {}\n", ErrUnknownKey, []string{"graph (line 2): unknown key", "channels, collaborators, eventLog, graphs, integrations, notifications, polling, routing, selfDiagnosis, service, standingSessions, state, version, webhooks"}},
		{"unknown nested key names its path", "version: 0.7.0\nchannels:\n  slack:\n    read:\n      mod: poll\n", ErrUnknownKey, []string{"channels.slack.read.mod (line 5): unknown key", "intervalSeconds, mode"}},
		{"typo in kickoff", "channels:\n  slack:\n    kickoff:\n      label: [x]\n", ErrUnknownKey, []string{"channels.slack.kickoff.label"}},
		{"unknown control command", "routing:\n  control:\n    keywords:\n      halt: x\n", ErrUnknownKey, []string{"routing.control.keywords.halt"}},
		{"removed events", "channels:\n  slack:\n    events: [session.awaiting_input]\n", ErrRemovedKey, []string{"channels.slack.events", "channels.slack.subscribe", "the-loop migrate-config"}},
		{"removed authorizedUsers", "channels:\n  slack:\n    authorizedUsers: [U1]\n", ErrRemovedKey, []string{"channels.slack.authorizedUsers", "routing.authorizedUsers", "{slack: <member id>}", "the-loop migrate-config"}},
		{"removed key under an older version too", "version: 0.5.0\nchannels:\n  slack:\n    events: []\n", ErrRemovedKey, []string{"channels.slack.events"}},
		{"ledger other than github", "channels:\n  ledger: jira\n", ErrInvalid, []string{"channels.ledger", `"jira"`, "accepted values are: github"}},
		{"ledger not a string", "channels:\n  ledger: [github]\n", ErrInvalid, []string{"channels.ledger", "accepted values are: github"}},
		{"newer version", "version: 0.8.0\n", ErrInvalid, []string{"version", "newer"}},
		{"version not a version", "version: banana\n", ErrInvalid, []string{"version", "not a version"}},
		{"interval below minimum", "channels:\n  slack:\n    read:\n      intervalSeconds: 2\n", ErrInvalid, []string{"channels.slack.read.intervalSeconds", "between 5"}},
		{"interval not a number", "channels:\n  slack:\n    read:\n      intervalSeconds: soon\n", ErrInvalid, []string{"whole number"}},
		{"maxChars too big", "channels:\n  slack:\n    maxChars: 5000\n", ErrInvalid, []string{"channels.slack.maxChars", "3000"}},
		{"enabled not a bool", "channels:\n  slack:\n    enabled: sometimes\n", ErrInvalid, []string{"channels.slack.enabled", "true or false"}},
		{"channel not a string", "channels:\n  slack:\n    channel: [C1]\n", ErrInvalid, []string{"channels.slack.channel", "string"}},
		{"bad kickoff repo", "channels:\n  slack:\n    kickoff:\n      repo: not a repo\n", ErrInvalid, []string{"owner/repo"}},
		{"bad kickoff labels", "channels:\n  slack:\n    kickoff:\n      labels: the-loop\n", ErrInvalid, []string{"channels.slack.kickoff.labels"}},
		{"authorizedUsers not a list", "routing:\n  authorizedUsers: alice\n", ErrInvalid, []string{"routing.authorizedUsers", "list of entries"}},
		{"read not a mapping", "channels:\n  slack:\n    read: poll\n", ErrInvalid, []string{"channels.slack.read", "mapping"}},
		{"duplicate key", "channels:\n  ledger: github\n  ledger: github\n", ErrInvalid, []string{"channels.ledger", "twice"}},
		{"root not a mapping", "- a\n", ErrInvalid, []string{"must be a mapping"}},
		{"two documents", "version: 0.7.0\n---\nversion: 0.7.0\n", ErrInvalid, []string{"more than one YAML document"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, _, err := Parse([]byte(tt.src))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", cfg)
			}
			if !errors.Is(err, tt.kind) {
				t.Errorf("error %v is not %v", err, tt.kind)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
		})
	}
	if _, _, err := Parse([]byte("a: [\n")); err == nil || !strings.Contains(err.Error(), "parse YAML") {
		t.Errorf("syntax error = %v", err)
	}
	// All problems at once, not the first only.
	_, _, err := Parse([]byte("bogus: 1\nchannels:\n  ledger: x\n  slack:\n    events: []\n"))
	for _, w := range []string{"bogus", "channels.ledger", "channels.slack.events"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("joined error lacks %q: %v", w, err)
		}
	}
}

func TestParseWarnings(t *testing.T) {
	t.Parallel()
	const head = "version: \"0.7.0\"\n"
	tests := []struct {
		name      string
		src       string
		check     func(*Config) string
		warnPaths []string
		warnText  []string
	}{
		{
			name:      "unknown subscribe name kept, unsubscribable ignored",
			src:       "channels:\n  slack:\n    subscribe: [my-custom-event, ledger.record, comment.agent]\n",
			check:     subscribe("my-custom-event", "comment.agent"),
			warnPaths: []string{"channels.slack.subscribe", "channels.slack.subscribe"},
			warnText:  []string{"kept", "ignored"},
		},
		{
			name:      "publish: unknown kept, unpublishable ignored",
			src:       "channels:\n  slack:\n    publish: [work-item.reply, comment.human, my-thing, session.awaiting_input]\n",
			check:     publish("work-item.reply", "my-thing"),
			warnPaths: []string{"channels.slack.publish", "channels.slack.publish", "channels.slack.publish"},
			warnText:  []string{"ignored", "kept", "ignored"},
		},
		{
			name:  "publish: [] is no grant at all",
			src:   "channels:\n  slack:\n    publish: []\n",
			check: publish(),
		},
		{
			name:  "subscribe: [] hears nothing",
			src:   "channels:\n  slack:\n    subscribe: []\n",
			check: subscribe(),
		},
		{
			name:      "publish as a string is malformed: default, loudly",
			src:       "channels:\n  slack:\n    publish: gate.feedback\n",
			check:     publish("work-item.reply"),
			warnPaths: []string{"channels.slack.publish"},
			warnText:  []string{"malformed"},
		},
		{
			name:      "subscribe as a mapping is malformed: default, loudly",
			src:       "channels:\n  slack:\n    subscribe: {comment.human: true}\n",
			check:     subscribe("session.awaiting_input"),
			warnPaths: []string{"channels.slack.subscribe"},
			warnText:  []string{"malformed"},
		},
		{
			name:      "a list with a non-string item is malformed",
			src:       "channels:\n  slack:\n    publish: [gate.feedback, [x]]\n",
			check:     publish("work-item.reply"),
			warnPaths: []string{"channels.slack.publish"},
			warnText:  []string{"malformed"},
		},
		{
			name: "unknown verbosity is normal",
			src:  "channels:\n  slack:\n    verbosity: loud\n",
			check: func(c *Config) string {
				return eq(c.Channels.Slack.Verbosity, VerbosityNormal)
			},
			warnPaths: []string{"channels.slack.verbosity"},
			warnText:  []string{"using normal"},
		},
		{
			name: "unknown read mode is off, never a reading mode",
			src:  "channels:\n  slack:\n    read:\n      mode: websocket\n",
			check: func(c *Config) string {
				return eq(c.Channels.Slack.Read.Mode, ReadOff)
			},
			warnPaths: []string{"channels.slack.read.mode"},
			warnText:  []string{"using off"},
		},
		{
			name: "bad entries dropped, good kept",
			src: "routing:\n  authorizedUsers:\n    - alice\n    - [nested]\n    - {jira: J1}\n    - {github: [x]}\n    - {name: Nobody}\n    - ''\n    - true\n" +
				"    - {github: bob, slack: U1}\n    - {slack: U1, name: Dup}\n    - ALICE\n    - 12345\n",
			check: func(c *Config) string {
				return eq(strings.Join(c.Routing.AuthorizedUsers.GitHubLogins(), ","), "alice,bob,12345")
			},
			warnPaths: []string{
				"routing.authorizedUsers[1]", "routing.authorizedUsers[2]", "routing.authorizedUsers[3]", "routing.authorizedUsers[4]",
				"routing.authorizedUsers[5]", "routing.authorizedUsers[6]", "routing.authorizedUsers[8]", "routing.authorizedUsers[9]",
			},
			warnText: []string{"dropped", "jira", "github must be a string", "names no github or slack id", "empty login", "GitHub login", "(routing.authorizedUsers[7])", "(routing.authorizedUsers[0])"},
		},
		{
			name: "YAML 1.1 booleans keep their meaning",
			src:  "channels:\n  slack:\n    enabled: yes\n    channel: C1\n",
			check: func(c *Config) string {
				return eq(c.Channels.Slack.Enabled, true)
			},
		},
		{
			name:      "enabled without a channel warns",
			src:       "channels:\n  slack:\n    enabled: true\n",
			warnPaths: []string{"channels.slack.channel"},
			warnText:  []string{"every post will fail"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, ws, err := Parse([]byte(head + tt.src))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tt.check != nil {
				if msg := tt.check(cfg); msg != "" {
					t.Error(msg)
				}
			}
			var paths []string
			for _, w := range ws {
				paths = append(paths, w.Path)
			}
			if diff := cmp.Diff(tt.warnPaths, paths, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("warning paths (-want +got):\n%s\n%v", diff, ws)
			}
			for i, text := range tt.warnText {
				if i < len(ws) && !strings.Contains(ws[i].Message, text) {
					t.Errorf("warning %d = %q, want it to contain %q", i, ws[i].Message, text)
				}
			}
		})
	}
}

func TestParseVersionGate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		src  string
		warn bool
	}{
		{"version: \"0.7.0\"\n", false},
		{"version: 0.7.0\n", false},
		{"version: \"0.6.0\"\n", true}, // decision 001: older is read, with a warning
		{"version: 0.5\n", true},
		{"routing: {}\n", true}, // unset
	}
	for _, tt := range tests {
		_, ws, err := Parse([]byte(tt.src))
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.src, err)
			continue
		}
		if got := len(ws) == 1 && ws[0].Path == "version"; got != tt.warn {
			t.Errorf("Parse(%q) warnings = %v, want a version warning: %v", tt.src, ws, tt.warn)
		}
	}
}

func subscribe(want ...catalog.Type) func(*Config) string {
	return func(c *Config) string {
		return diff("subscribe", want, c.Channels.Slack.Subscribe)
	}
}

func publish(want ...catalog.Type) func(*Config) string {
	return func(c *Config) string {
		return diff("publish", want, c.Channels.Slack.Publish)
	}
}

func diff(what string, want, got []catalog.Type) string {
	if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
		return what + " (-want +got):\n" + d
	}
	return ""
}

func eq[T comparable](got, want T) string {
	if got != want {
		return "got " + strings.TrimSpace(strings.ReplaceAll(cmp.Diff(want, got), "\n", " "))
	}
	return ""
}
