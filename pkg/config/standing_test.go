package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestStandingSessions: the section is read into Config.Standing, each entry
// checked, and the original's keys without behaviour here warned about.
func TestStandingSessions(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "brief.md"), []byte("Watch the queue."), 0o644); err != nil {
		t.Fatal(err)
	}
	src := `version: 0.7.0
standingSessions:
  enabled: true
  sessions:
    - name: triage
      description: keeps an eye on things
      ledger: octo/repo#7
      prompt: Tell me what is stuck.
      slack: {enabled: true}
    - name: filer
      ledger: github:octo/other#12
      promptFile: brief.md
      autoStart: false
    - name: nowhere
`
	cfg, ws, err := ParseAt([]byte(src), dir)
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, w := range ws {
		warned = append(warned, w.Path)
	}
	if !slices.Equal(warned, []string{"standingSessions.sessions[2]"}) {
		t.Errorf("warnings %v: want only the session without a ledger", ws)
	}
	st := cfg.Standing
	if !st.Enabled || len(st.Sessions) != 3 {
		t.Fatalf("standing = %+v", st)
	}
	tr, _ := st.Session("triage")
	if tr.Ledger != "github:octo/repo#7" || tr.Brief != "Tell me what is stuck." || !tr.Slack || !tr.AutoStart || tr.Description == "" {
		t.Errorf("triage = %+v", tr)
	}
	fl, _ := st.Session("filer")
	if fl.Ledger != "github:octo/other#12" || fl.Brief != "Watch the queue." || fl.AutoStart || fl.Slack {
		t.Errorf("filer = %+v", fl)
	}
	if got, ok := st.ForLedger("github:octo/repo#7"); !ok || got.Name != "triage" {
		t.Errorf("ForLedger(#7) = %+v, %t", got, ok)
	}
	if _, ok := st.ForLedger(""); ok {
		t.Error("the empty ref is some session's ledger")
	}
	st.Enabled = false
	if _, ok := st.ForLedger("github:octo/repo#7"); ok {
		t.Error("a ledger issue is a standing session's while standing sessions are off")
	}
}

// TestStandingSessionsRefused: what an entry cannot mean refuses the config,
// naming the key.
func TestStandingSessionsRefused(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, entries, want string }{
		{"bad name", "- {name: Triage, ledger: a/b#1}", "sessions[0].name"},
		{"name too long", "- {name: " + strings.Repeat("a", 41) + ", ledger: a/b#1}", "not a standing session name"},
		{"duplicate name", "- {name: x, ledger: a/b#1}\n    - {name: x, ledger: a/b#2}", "declared twice"},
		{"shared ledger", "- {name: x, ledger: a/b#1}\n    - {name: y, ledger: github:a/b#1}", "each session needs an issue of its own"},
		{"bad ledger", "- {name: x, ledger: 'a/b#0'}", "not a GitHub issue"},
		{"ledger with a path", "- {name: x, ledger: '../b#1'}", "not a GitHub issue"},
		{"both briefs", "- {name: x, ledger: a/b#1, prompt: p, promptFile: f}", "no precedence"},
		{"missing brief file", "- {name: x, ledger: a/b#1, promptFile: nowhere.md}", "sessions[0].promptFile"},
		{"unknown key", "- {name: x, ledger: a/b#1, model: opus}", "sessions[0].model"},
		{"not a list", "{name: x}", "want a list of sessions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src := "version: 0.7.0\nstandingSessions:\n  enabled: true\n  sessions:\n    " + tt.entries + "\n"
			if strings.HasPrefix(tt.entries, "{") {
				src = "version: 0.7.0\nstandingSessions:\n  sessions: " + tt.entries + "\n"
			}
			_, _, err := ParseAt([]byte(src), t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

// TestStandingOriginalKeys: the original's keys without behaviour here are
// warned about, each naming why; what they ask for anyway is silent.
func TestStandingOriginalKeys(t *testing.T) {
	t.Parallel()
	src := `version: 0.7.0
channels:
  slack: {channel: C1}
standingSessions:
  enabled: true
  sessions:
    - name: x
      ledger: a/b#1
      harness: claude
      harnessArgs: []
      slack: {enabled: true, channel: C1}
    - name: y
      ledger: a/b#2
      harness: cursor
      harnessArgs: [--model, opus]
      cwd: /srv
      slack: {channel: C2}
`
	_, ws, err := Parse([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, w := range ws {
		warned = append(warned, w.Path)
	}
	want := []string{"standingSessions.sessions[1].harness", "standingSessions.sessions[1].harnessArgs",
		"standingSessions.sessions[1].cwd", "standingSessions.sessions[1].slack.channel"}
	if !slices.Equal(warned, want) {
		t.Errorf("warned %v, want %v", warned, want)
	}
}
