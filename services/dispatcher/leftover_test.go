package dispatcher

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// TestATmuxServerPerSession: two sessions run on two tmux servers, each
// socket named after its session in one directory only this user may
// enter; each server holds its own session alone; the dispatcher lists
// sessions by their sockets and removes one whose server is gone; ending
// one session leaves the other's server alone.
func TestATmuxServerPerSession(t *testing.T) {
	e := newEnv(t, nil)
	const a, b = "github:octo/repo#81", "github:octo/repo#82"
	e.start(a, 8100)
	e.start(b, 8110)

	fi, err := os.Stat(e.tmuxDir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o700 {
		t.Errorf("the socket directory's mode is %o, want 700", perm)
	}
	var sockets []string
	entries, err := os.ReadDir(e.tmuxDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range entries {
		if en.Type()&os.ModeSocket == 0 {
			t.Errorf("%s in the socket directory is not a socket", en.Name())
		}
		sockets = append(sockets, en.Name())
	}
	if want := []string{tmux.Target(a), tmux.Target(b)}; !slices.Equal(sockets, want) {
		t.Fatalf("sockets %v, want %v", sockets, want)
	}
	ctx := context.Background()
	for _, ref := range []string{a, b} {
		names, err := e.server(ref).Sessions(ctx)
		if err != nil || !slices.Equal(names, []string{tmux.Target(ref)}) {
			t.Errorf("the server of %s holds %v (%v), want its own session alone", ref, names, err)
		}
	}

	// A socket whose server is gone is stale: listing removes it.
	stale := filepath.Join(e.tmuxDir, "loop-github-octo-repo-83")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	_ = l.Close()
	names, err := e.svc.tmux.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if want := []string{tmux.Target(a), tmux.Target(b)}; !slices.Equal(names, want) {
		t.Errorf("the dispatcher lists %v, want %v", names, want)
	}
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Errorf("the stale socket is still there (%v)", err)
	}

	e.publish(comment(a, 8101, alice, "the-loop stop"))
	e.waitRecord("control.command", map[string]any{"work_item": a, "command": "stop", "effect": "stopped"})
	if st := e.tmuxState(a); st != tmux.Absent {
		t.Errorf("%s after stop: %v, want absent", a, st)
	}
	if _, err := os.Lstat(e.socketOf(a)); !os.IsNotExist(err) {
		t.Errorf("the stopped session's socket is still there (%v)", err)
	}
	if st := e.tmuxState(b); st != tmux.Live {
		t.Errorf("%s after %s stopped: %v, want live", b, a, st)
	}
}

// leftover starts a tmux session in ref's place that the loop did not
// start, running argv, and has a start command find it: the start is
// dropped, and the work item is told (conflict-escalated on the inbox),
// with how to adopt or end it.
func (e *env) leftover(box *inbox, ref string, id int64, argv ...string) {
	e.t.Helper()
	target := tmux.Target(ref)
	args := append([]string{"-S", e.socketOf(ref), "new-session", "-d", "-s", target, "--"}, argv...)
	if out, err := exec.Command("tmux", args...).CombinedOutput(); err != nil {
		e.t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	e.publish(labeled(ref, "lab-leftover"), comment(ref, id, alice, "the-loop start"))
	e.waitRecord("dispatch.dropped", map[string]any{"work_item": ref, "reason": DropSessionOccupied, "will_retry": false})
	ev := e.inboxFind(box, "the leftover's report on the inbox", func(ev *loopv1.Event) bool {
		return ev.GetSubject() == ref && ev.GetType() == string(catalog.ConflictEscalated)
	})
	n := ev.GetNotification()
	if n.GetDetail()["reason"] != ReasonLeftover || n.GetDetail()["tmux_target"] != target ||
		!strings.Contains(n.GetText(), "`the-loop adopt`") || !strings.Contains(n.GetText(), "`the-loop end`") {
		e.t.Errorf("the report: %v", n)
	}
	e.t.Logf("reported on %s: %s", ref, n.GetText())
	if e.record(ref).Session.Live() {
		e.t.Fatal("a refused spawn left a live registry session")
	}
}

// TestLeftoverSessionAdopted: a leftover in a work item's place is
// reported; adopt takes it as the work item's session, and the next event
// is typed into it.
func TestLeftoverSessionAdopted(t *testing.T) {
	e := newEnv(t, nil)
	box := e.inbox()
	const ref = "github:octo/repo#84"
	e.leftover(box, ref, 8400, "cat")

	e.publish(comment(ref, 8401, alice, "the-loop adopt"))
	e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "adopt", "effect": "adopted"})
	sess := e.record(ref).Session
	if sess.Status != sessions.Active || sess.TmuxTarget != tmux.Target(ref) || sess.Host != hostA {
		t.Fatalf("the adopted session: %+v", sess)
	}
	ev := comment(ref, 8402, alice, "typed into the adopted session 5c1e")
	e.publish(ev)
	e.waitRecord("dispatch.succeeded", map[string]any{"event_id": ev.GetId()})
	testkit.WaitFor(t, "the event in the adopted pane", func() bool {
		out, _ := exec.Command("tmux", "-S", e.socketOf(ref), "capture-pane", "-p", "-J", "-S", "-", "-t", "="+tmux.Target(ref)+":").Output()
		return strings.Contains(string(out), "typed into the adopted session 5c1e")
	})
	if len(tmuxtestBoots(e)) != 0 {
		t.Error("a harness was started")
	}
	// Nothing left to adopt now.
	e.publish(comment(ref, 8403, alice, "the-loop adopt"))
	e.waitRecord("control.rejected", map[string]any{"work_item": ref, "command": "adopt", "reason": RejectNothingToAdopt})
}

// TestLeftoverSessionEnded: a leftover in a work item's place is
// reported; end kills it, and the loop spawns its own session there.
func TestLeftoverSessionEnded(t *testing.T) {
	e := newEnv(t, nil)
	box := e.inbox()
	const ref = "github:octo/repo#85"
	e.leftover(box, ref, 8500, "sleep", "600")

	e.publish(comment(ref, 8501, alice, "the-loop end"))
	e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "end", "effect": "ended"})
	e.waitRecord("session.spawned", map[string]any{"work_item": ref})
	sess := e.record(ref).Session
	testkit.WaitFor(t, "the loop's own session's boot", func() bool { return len(e.bootsOf(sess.HarnessSessionID)) > 0 })
	pane, err := exec.Command("tmux", "-S", e.socketOf(ref), "list-panes", "-a", "-F", "#{pane_start_command}").Output()
	if err != nil || strings.Contains(string(pane), "sleep") {
		t.Errorf("the pane after end: %s (%v), want the loop's harness, not the leftover", pane, err)
	}
	// end is for leftovers: the work item's own session is stopped.
	e.publish(comment(ref, 8502, alice, "the-loop end"))
	e.waitRecord("control.rejected", map[string]any{"work_item": ref, "command": "end", "reason": RejectSessionLive})
}
