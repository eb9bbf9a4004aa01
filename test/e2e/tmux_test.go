//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/sandbox"
)

// target is the tmux session of issue n's work item, as the dispatcher
// names it (loop-<provider>-<owner>-<repo>-<number>).
func (a *agentUp) target(n int) string {
	return fmt.Sprintf("loop-github-%s-%d", strings.ReplaceAll(agentRepo, "/", "-"), n)
}

// socketOf is the socket of issue n's session's own tmux server.
func (a *agentUp) socketOf(n int) string { return filepath.Join(a.tmuxDir, a.target(n)) }

// TestSessionsApartUnderUp (docs/decisions/100-a-tmux-server-per-session.md):
// under `the-loop up`, its sandbox on, each session runs on a tmux server
// of its own. From inside a real session, an obedient agent tries to read
// another session's pane, to type into it, to connect to that session's
// server's socket and to read that session's workspace: each is refused,
// and the test prints what refused it. Nothing it typed reaches the other
// pane.
func TestSessionsApartUnderUp(t *testing.T) {
	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v; up would refuse to start sessions", sandbox.ABI(), err)
	}
	a := startAgentUp(t)
	mine, _ := a.startItem("My work")
	theirs, theirBoot := a.startItem("Someone else's work")
	for _, n := range []int{mine.n, theirs.n} {
		if fi, err := os.Lstat(a.socketOf(n)); err != nil || fi.Mode()&os.ModeSocket == 0 {
			t.Fatalf("issue %d's session has no server of its own at %s: %v", n, a.socketOf(n), err)
		}
	}
	if fi, err := os.Stat(a.tmuxDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the socket directory: %v (%v), want mode 700", fi.Mode(), err)
	}
	sock, target := a.socketOf(theirs.n), a.target(theirs.n)
	const typed = "typed-by-another-session-4b7d"
	script := fmt.Sprintf(`try "read the other session's pane" tmux -S %[1]s capture-pane -p -t =%[2]s:
try "type into the other session" tmux -S %[1]s send-keys -t =%[2]s: "echo %[3]s" Enter
try "connect to the other session's socket" env %[4]s=unix %[5]s=%[1]s %[6]s
try "read the other session's workspace" ls %[7]s
`, sock, target, typed, envAttack, envAttackSocket, filepath.Join(a.harness, "e2e.test"), theirBoot.Dir)
	got, _ := a.probe(mine, "apart.sh", script)
	for name, want := range map[string]string{
		"read the other session's pane":         "refused: error connecting to " + sock,
		"type into the other session":           "refused: error connecting to " + sock,
		"connect to the other session's socket": "refused: dial unix " + sock,
		"read the other session's workspace":    "refused: ls: cannot open directory '" + theirBoot.Dir + "': Permission denied",
	} {
		if !strings.HasPrefix(got[name], want) {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	if sandbox.ABI() >= 9 {
		t.Logf("Landlock ABI %d: Landlock refuses the session a unix socket outside its sandbox, the other server's among them", sandbox.ABI())
	} else {
		t.Logf("Landlock ABI %d: the session's seccomp filter refuses it any unix socket", sandbox.ABI())
	}
	// From outside, as the operator: the other pane never got the keys.
	pane, err := exec.Command("tmux", "-S", sock, "capture-pane", "-p", "-J", "-S", "-", "-t", "="+target+":").CombinedOutput()
	if err != nil {
		t.Fatalf("the other session's pane, read by the operator: %v %s", err, pane)
	}
	if strings.Contains(string(pane), typed) {
		t.Errorf("another session typed into this one:\n%s", pane)
	}
}

// TestLeftoverSessionUnderUp: a tmux session the loop did not start holds
// a work item's place (its name, on its socket) under `the-loop up`. The
// start is not carried out; the work item is told (conflict-escalated on
// loop.ev, which the channels render), and after `the-loop end` the loop
// kills it and starts its own session there.
func TestLeftoverSessionUnderUp(t *testing.T) {
	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v; up would refuse to start sessions", sandbox.ABI(), err)
	}
	a := startAgentUp(t)
	is := a.gh.AddIssue(agentRepo, alice, "Leftover", "Please do the thing.")
	n := is.Number
	ref := fmt.Sprintf("github:%s#%d", agentRepo, n)
	if out, err := exec.Command("tmux", "-S", a.socketOf(n), "new-session", "-d", "-s", a.target(n), "--", "sleep", "600").CombinedOutput(); err != nil {
		t.Fatalf("the leftover: %v %s", err, out)
	}
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(a.store, "nats", "operator.nk"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect("nats://"+a.natsAddr, nats.Name("e2e-leftover-watch"), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	var mu sync.Mutex
	var report string
	if _, err := nc.Subscribe("loop.ev.>", func(m *nats.Msg) {
		if m.Header.Get(envelope.HeaderType) != string(catalog.ConflictEscalated) || m.Header.Get(envelope.HeaderSubject) != ref {
			return
		}
		text := "(undecodable)"
		if ev, err := envelope.FromMessage(envelope.Message{Subject: m.Subject, Header: m.Header, Data: m.Data}); err == nil {
			text = ev.GetNotification().GetText()
		}
		mu.Lock()
		report = text
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	a.post("issues", map[string]any{"action": "labeled", "label": map[string]any{"name": "the-loop: auto-execute"},
		"issue": a.issuePayload(n), "repository": a.repository(), "sender": map[string]any{"login": alice}})
	a.comment(n, "the-loop start")
	testkit.WaitFor(t, "the leftover reported on the work item", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return report != ""
	})
	t.Logf("reported on %s: %s", ref, report)
	if !strings.Contains(report, "`the-loop adopt`") || !strings.Contains(report, "`the-loop end`") {
		t.Errorf("the report does not say how to adopt or end it: %s", report)
	}
	if bs, _ := standin.ReadBoots(a.standIn); len(bs) != 0 {
		t.Fatalf("a session started over the leftover: %+v", bs)
	}

	a.comment(n, "the-loop end")
	testkit.WaitFor(t, "the loop's own session booting after end", func() bool {
		bs, _ := standin.ReadBoots(a.standIn)
		for _, b := range bs {
			if strings.Contains(b.Dir, fmt.Sprintf("+%d%c", n, filepath.Separator)) {
				return true
			}
		}
		return false
	})
	pane, err := exec.Command("tmux", "-S", a.socketOf(n), "list-panes", "-a", "-F", "#{pane_start_command}").CombinedOutput()
	if err != nil || strings.Contains(string(pane), "sleep 600") {
		t.Errorf("the pane after end: %s (%v), want the loop's harness", pane, err)
	}
}
