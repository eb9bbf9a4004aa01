package dispatcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/sandbox"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// TestCriticArgv: a value fills the one element its placeholder stands in,
// whatever it holds — spaces, quotes, a shell's syntax, a flag, another
// placeholder — and the template's own elements stay as the operator wrote
// them.
func TestCriticArgv(t *testing.T) {
	t.Parallel()
	hostile := `--yolo "; rm -rf / #" $(id) {artifact} {cwd}`
	got := fillCriticArgv([]string{"review", "-p", "{prompt}", "--file={artifact}", "{model}", "--literal"}, map[string]string{
		config.PlaceholderPrompt: hostile, config.PlaceholderArtifact: "/w/docs/specs/issue-1/design.md", config.PlaceholderModel: "",
		config.PlaceholderCwd: "/w",
	})
	want := []string{"review", "-p", hostile, "--file=/w/docs/specs/issue-1/design.md", "", "--literal"}
	if !slices.Equal(got, want) {
		t.Errorf("argv = %q, want %q", got, want)
	}
}

// TestCriticText: a JSON critic's findings are its text key (a stream's
// last line included); anything else is kept as printed, never dropped.
func TestCriticText(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ out, format, want string }{
		{`{"type":"result","result":"1. a finding","usage":{}}`, config.CriticOutputJSON, "1. a finding"},
		{"{\"type\":\"system\"}\n{\"type\":\"result\",\"response\":\"2. another\"}\n", config.CriticOutputJSON, "2. another"},
		{"not json at all\n", config.CriticOutputJSON, "not json at all"},
		{`{"result":""}`, config.CriticOutputJSON, `{"result":""}`},
		{"  1. as printed\n", config.CriticOutputText, "1. as printed"},
		{`{"result":"kept whole"}`, config.CriticOutputText, `{"result":"kept whole"}`},
	} {
		if got := criticText([]byte(c.out), c.format); got != c.want {
			t.Errorf("criticText(%q, %s) = %q, want %q", c.out, c.format, got, c.want)
		}
	}
	var head, tail capped
	head.max, tail.max, tail.tail = 4, 4, true
	for _, p := range []string{"ab", "cd", "ef"} {
		_, _ = head.Write([]byte(p))
		_, _ = tail.Write([]byte(p))
	}
	if head.b.String() != "abcd" || tail.b.String() != "cdef" {
		t.Errorf("capped: head %q, tail %q", head.b.String(), tail.b.String())
	}
}

// TestCriticRunsSandboxed: with sessions under Landlock a critic runs as
// confined as the session that asked for it: it writes its own checkout and
// reads its prompt, and is refused the store and another work item's
// workspace.
func TestCriticRunsSandboxed(t *testing.T) {
	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v", sandbox.ABI(), err)
	}
	loopDir := t.TempDir()
	loop := filepath.Join(loopDir, "the-loop")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(loop, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, home, store := t.TempDir(), t.TempDir(), t.TempDir()
	seed := filepath.Join(store, "operator.nk")
	if err := os.WriteFile(seed, []byte("SUAMOPERATORSEED\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var root string
	e := newEnv(t, func(s *Settings) {
		root = s.Workdir
		// The stand-in, run as the-loop's copy, records what it is
		// given where the test reads it, which the session may write.
		h := s.Harness.(*agent.Command)
		h.Binary = loop
		s.SandboxWrite = []string{h.Environment[tmuxtest.EnvDir]}
		s.LoopBinaryDir = loopDir
		s.Sandbox = SandboxLandlock
		s.SandboxHidden = []string{store}
		s.SandboxRead = []string{repo}
		s.SessionEnv = map[string]string{"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp}
	})
	other := filepath.Join(root, "items", "github.com+octo+repo+999")
	if err := os.MkdirAll(other, 0o700); err != nil {
		t.Fatal(err)
	}
	critics := t.TempDir()
	script := filepath.Join(critics, "probe-critic")
	body := fmt.Sprintf(`#!/bin/sh
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name: ok"; else echo "$name: refused"; fi; }
try "write its checkout" sh -c 'echo x > critic-probe.txt'
try "read its prompt" grep -q "You are a critic" "$1"
try "read the store's seed" cat %s
try "list another work item's workspace" ls %s
`, seed, other)
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := *e.cfg.Load()
	cfg.Routing.Critics = []config.Critic{{Name: "probe", Command: script, Args: []string{"{promptFile}"}, Timeout: waitLong, Enabled: true}}
	e.cfg.Store(&cfg)
	box := e.inbox()

	const ref = "github:octo/repo#7"
	sess := e.start(ref, 7100)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	round, err := e.agent(sess.HarnessSessionID, 0).CriticRun(ctx, sessionapi.CriticRunRequest{Critic: "probe"})
	if err != nil {
		t.Fatal(err)
	}
	var findings string
	testkit.WaitWithin(t, waitLong, "the round's findings on the inbox", func() bool {
		ev := box.get(round.ID)
		findings = ev.GetNotification().GetText()
		return ev != nil
	})
	got := map[string]string{}
	for _, l := range strings.Split(findings, "\n") {
		name, result, _ := strings.Cut(l, ": ")
		got[name] = result
	}
	for name, want := range map[string]string{
		"write its checkout": "ok", "read its prompt": "ok",
		"read the store's seed": "refused", "list another work item's workspace": "refused",
	} {
		if got[name] != want {
			t.Errorf("%s: %q, want %s\n%s", name, got[name], want, findings)
		}
	}
	if _, err := os.Stat(filepath.Join(sess.Cwd, "critic-probe.txt")); err != nil {
		t.Errorf("the critic's write in its checkout: %v", err)
	}
}
