package dispatcher

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// TestControlEffects drives every command through the consumer and checks
// its effect on the registry and tmux and the record it leaves
// (docs/requirements.md K8), including the arming asymmetry: refused arming
// commands record nothing, disarming ones always record.
func TestControlEffects(t *testing.T) {
	e := newEnv(t, nil)
	// Steps, not subtests: the helpers fail the test that owns env.
	step := func(name string, f func()) { t.Log("step:", name); f() }

	step("disarming commands record even without a session", func() {
		const ref = "github:octo/repo#1"
		e.publish(comment(ref, 1001, alice, "please the-loop pause."))
		e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "pause", "effect": "noop"})
		if c := e.record(ref).Control; c == nil || c.Command != "pause" || c.Actor != alice {
			t.Errorf("control record = %+v, want pause by alice", c)
		}
	})
	step("arming commands refused record nothing", func() {
		const ref = "github:octo/repo#2"
		e.publish(comment(ref, 1011, alice, "the-loop resume"))
		e.waitRecord("control.rejected", map[string]any{"work_item": ref, "command": "resume", "reason": RejectNothingResume})
		e.publish(comment(ref, 1012, alice, "the-loop start"))
		e.waitRecord("control.rejected", map[string]any{"work_item": ref, "command": "start", "reason": DropSpawnPolicy})
		if r := e.record(ref); r.Control != nil || r.Session != nil {
			t.Errorf("refused arming commands left a record: %+v", r)
		}
	})
	step("a comment before start is refused, not replayed", func() {
		const ref = "github:octo/repo#3"
		early := comment(ref, 1020, alice, "do this early")
		e.publish(labeled(ref, "lab-3"), early)
		e.waitRecord("dispatch.dropped", map[string]any{"event_id": early.GetId(), "reason": DropAwaitingStart})
		sess := e.start(ref, 1021)
		e.publish(comment(ref, 1022, alice, "after start"))
		testkit.WaitFor(t, "one input", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) == 1 })
		if got := e.inputsOf(sess.HarnessSessionID)[0]; strings.Contains(got, "do this early") {
			t.Error("an event refused before start was replayed")
		}
	})

	const ref = "github:octo/repo#4"
	sess := e.start(ref, 1030)
	step("start on a live session is a noop", func() {
		e.publish(comment(ref, 1031, alice, "The-Loop START"))
		e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "start", "effect": "noop"})
	})
	step("pause then start resumes", func() {
		e.publish(comment(ref, 1032, alice, "the-loop pause"))
		e.waitRecord("session.paused", map[string]any{"work_item": ref})
		e.publish(comment(ref, 1033, alice, "the-loop start"))
		e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "start", "effect": "resumed"})
		if st := e.record(ref).Session.Status; st != sessions.Active {
			t.Errorf("status %q, want active", st)
		}
	})
	step("ambiguous executes nothing", func() {
		e.publish(comment(ref, 1034, alice, "the-loop pause or the-loop stop?"))
		e.waitRecord("control.ambiguous", map[string]any{"work_item": ref})
		if st := e.record(ref).Session.Status; st != sessions.Active {
			t.Errorf("status %q after an ambiguous comment, want active", st)
		}
	})
	step("an actor-less comment cannot command", func() {
		e.publish(comment(ref, 1035, "", "the-loop stop"))
		e.waitRecord("control.rejected", map[string]any{"event_id": "gh:issue-comment:1035", "reason": RejectUnauthorized})
	})
	step("a relayed command whose person is not authorized is rejected (abuse 5)", func() {
		e.publish(relayed(ref, 1036, &loopv1.Actor{Github: mallory, Slack: "U0MAL"}, "the-loop stop"))
		e.waitRecord("control.rejected", map[string]any{"event_id": "gh:issue-comment:1036", "reason": RejectUnauthorized, "relayed": true})
		e.publish(relayed(ref, 1037, nil, "the-loop stop"))
		e.waitRecord("control.rejected", map[string]any{"event_id": "gh:issue-comment:1037", "reason": RejectUnauthorized})
		if st := e.record(ref).Session.Status; st != sessions.Active {
			t.Errorf("status %q after unauthorized relayed stops, want active", st)
		}
		if st := e.tmuxState(ref); st != tmux.Live {
			t.Errorf("tmux %v after unauthorized relayed stops, want live", st)
		}
	})
	step("a relayed command by an authorized person executes", func() {
		e.publish(relayed(ref, 1038, &loopv1.Actor{Github: alice, Slack: "U0ALICE"}, "the-loop pause"))
		e.waitRecord("control.command", map[string]any{"event_id": "gh:issue-comment:1038", "effect": "paused", "relayed": true})
		e.publish(relayed(ref, 1039, &loopv1.Actor{Github: alice}, "the-loop resume"))
		e.waitRecord("control.command", map[string]any{"event_id": "gh:issue-comment:1039", "effect": "resumed"})
	})
	step("execute is handed to the graph and delivered", func() {
		ev := comment(ref, 1040, alice, "the-loop execute phases 1-2")
		e.publish(ev)
		e.waitRecord("control.command", map[string]any{"event_id": ev.GetId(), "command": "execute", "effect": "handed-to-graph"})
		e.waitRecord("dispatch.succeeded", map[string]any{"event_id": ev.GetId()})
		testkit.WaitFor(t, "the execute comment typed", func() bool {
			in := e.inputsOf(sess.HarnessSessionID)
			// execute answered the phase-selection gate before the
			// comment was typed: the prompt says so and shows the next node.
			return len(in) > 0 && in[len(in)-1] == e.expectedWith(ev, graph.OutcomeExecute)
		})
	})
	step("stop closes the session", func() {
		e.publish(comment(ref, 1041, alice, "the-loop stop"))
		e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "stop", "effect": "stopped"})
		if st := e.tmuxState(ref); st != tmux.Absent {
			t.Errorf("tmux %v after stop", st)
		}
		r := e.record(ref)
		if r.Session.Status != sessions.Closed || r.Control.Command != "stop" {
			t.Errorf("after stop: session %q, control %+v", r.Session.Status, r.Control)
		}
		late := comment(ref, 1042, alice, "after stop")
		e.publish(late)
		e.waitRecord("dispatch.dropped", map[string]any{"event_id": late.GetId(), "reason": DropAwaitingStart})
	})
	step("cleanup forgets the session, then has nothing to clean", func() {
		e.publish(comment(ref, 1043, alice, "the-loop cleanup"))
		e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "cleanup", "effect": "cleaned"})
		if r := e.record(ref); r.Session != nil || r.Control == nil || r.Control.Command != "cleanup" {
			t.Errorf("after cleanup: %+v", r)
		}
		e.publish(comment(ref, 1044, alice, "the-loop cleanup"))
		e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "cleanup", "effect": "nothing-to-clean"})
	})
	step("a collaborator's comment is mirrored, never delivered", func() {
		const ref = "github:octo/repo#5"
		s5 := e.start(ref, 1050)
		ev := comment(ref, 1051, "", "just a thought")
		e.publish(ev, comment(ref, 1052, alice, "marker"))
		e.waitRecord("dispatch.dropped", map[string]any{"event_id": ev.GetId(), "reason": DropUnauthorized})
		testkit.WaitFor(t, "the marker comment", func() bool { return len(e.inputsOf(s5.HarnessSessionID)) == 1 })
	})
}

// TestCloseClosesSession: the work item's own close closes its session and
// clears its control record; a linked pull request's close keeps it open.
func TestCloseClosesSession(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#7"
	e.start(ref, 2000)
	e.publish(closed(ref, "close-pr", 8))
	e.waitRecord("dispatch.dropped", map[string]any{"work_item": ref, "reason": DropKeptOpen})
	if st := e.tmuxState(ref); st != tmux.Live {
		t.Fatalf("a linked PR's close touched the session: %v", st)
	}
	e.publish(closed(ref, "close-7", 7))
	e.waitRecord("session.closed", map[string]any{"work_item": ref, "reason": "issue-closed"})
	if st := e.tmuxState(ref); st != tmux.Absent {
		t.Errorf("tmux %v after close", st)
	}
	if r := e.record(ref); r.Session.Status != sessions.Closed || r.Control != nil {
		t.Errorf("after close: status %q, control %+v", r.Session.Status, r.Control)
	}
}

// TestNeverSpawnOverLive: a live tmux session holding the work item's name
// is never replaced; the start is dropped as session-occupied.
func TestNeverSpawnOverLive(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#9"
	tmuxNewSession(t, e.tmuxDir, tmux.Target(ref))
	e.publish(labeled(ref, "lab-9"), comment(ref, 3000, alice, "the-loop start"))
	e.waitRecord("dispatch.dropped", map[string]any{"work_item": ref, "reason": DropSessionOccupied})
	if st := e.tmuxState(ref); st != tmux.Live {
		t.Errorf("the occupant is %v, want still live", st)
	}
	if r := e.record(ref); r.Session.Live() {
		t.Errorf("a refused spawn left a live registry session: %+v", r.Session)
	}
	if len(tmuxtestBoots(e)) != 0 {
		t.Error("a harness was started")
	}
}

// TestRespawnWithResume: a session whose terminal disappeared is respawned
// on the next event with --resume and the same conversation id, booted with
// that event's prompt.
func TestRespawnWithResume(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#11"
	sess := e.start(ref, 4000)
	if err := e.server(ref).Kill(context.Background(), sess.TmuxTarget); err != nil {
		t.Fatal(err)
	}
	ev := comment(ref, 4001, alice, "are you still there?")
	e.publish(ev)
	e.waitRecord("session.respawned", map[string]any{"work_item": ref, "resumed": true})
	boots := e.bootsOf(sess.HarnessSessionID)
	testkit.WaitFor(t, "the resumed boot", func() bool { boots = e.bootsOf(sess.HarnessSessionID); return len(boots) == 2 })
	if boots[1].Mode != "resume" || boots[1].Prompt != e.expected(ev, false) {
		t.Errorf("respawn boot = %+v, want resume with the event prompt", boots[1])
	}
	if got := e.record(ref).Session; got.HarnessSessionID != sess.HarnessSessionID || got.Status != sessions.Active {
		t.Errorf("after respawn: %+v", got)
	}
}

// TestRedeliveryTypesOnce: a delivered event redelivered is dropped as
// already-processed. One whose paste may have happened before a crash
// (Pending set) is judged by the session's pane: shown there, it is recorded
// and not typed again; absent from a live pane, it is typed now; when the
// pane is gone and cannot tell, it is dropped as delivery-uncertain.
func TestRedeliveryTypesOnce(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#13"
	sess := e.start(ref, 5000)
	ev := comment(ref, 5001, alice, "once")
	e.publish(ev)
	testkit.WaitFor(t, "one input", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) == 1 })
	ctx := context.Background()
	if err := e.svc.handle(ctx, ev, &bus.Delivery{}); err != nil {
		t.Fatal(err)
	}
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": ev.GetId(), "reason": DropAlreadyProcessed})
	pending := func(id string) {
		t.Helper()
		if _, err := e.store.Mutate(ctx, ref, func(r *sessions.Record) error {
			r.Session.Pending = id
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	// Pasted, then the crash: the stand-in shows what it received.
	pasted := comment(ref, 5002, alice, "typed before a crash")
	if err := e.svc.tmux.Deliver(ctx, sess.TmuxTarget, e.expected(pasted, false)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the pasted input", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) == 2 })
	testkit.WaitFor(t, "the paste on screen", func() bool {
		ok, err := e.svc.tmux.Shows(ctx, sess.TmuxTarget, deliveryMarker(&input{deliveryID: pasted.GetId()}))
		return err == nil && ok
	})
	pending(pasted.GetId())
	if err := e.svc.handle(ctx, pasted, &bus.Delivery{}); err != nil {
		t.Fatal(err)
	}
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": pasted.GetId(), "reason": DropAlreadyProcessed})

	// The crash came before the paste: the pane lacks it, so it is typed.
	lost := comment(ref, 5003, alice, "claimed, then a crash")
	pending(lost.GetId())
	if err := e.svc.handle(ctx, lost, &bus.Delivery{}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the claimed input", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) >= 3 })
	got := e.inputsOf(sess.HarnessSessionID)
	if len(got) != 3 || got[1] != e.expected(pasted, false) || got[2] != e.expected(lost, false) {
		t.Errorf("inputs = %d, want once, the pasted one and the claimed one, each once", len(got))
	}

	// The pane is gone: nothing can tell, and the event is not typed twice.
	gone := comment(ref, 5004, alice, "the pane died with it")
	if err := e.svc.tmux.Kill(ctx, sess.TmuxTarget); err != nil {
		t.Fatal(err)
	}
	pending(gone.GetId())
	if err := e.svc.handle(ctx, gone, &bus.Delivery{}); err != nil {
		t.Fatal(err)
	}
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": gone.GetId(), "reason": DropDeliveryUncertain})
}

// TestHostedElsewhere: an event reaches this replica only when its partition
// is pinned here, so a session registered on another replica — with a fresh
// lease or none — is taken over and resumed here; it is never left to stall
// the partition.
func TestHostedElsewhere(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	put := func(ref, host string) {
		if _, err := e.store.Mutate(ctx, ref, func(r *sessions.Record) error {
			r.Session = &sessions.Session{Harness: "claude", HarnessSessionID: "11111111-2222-4333-8444-555555555555",
				Host: host, TmuxTarget: tmux.Target(ref), Status: sessions.Active, Cwd: t.TempDir()}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	const live = "github:octo/repo#21"
	put(live, "host-b")
	if err := e.store.Heartbeat(ctx, "host-b", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.handle(ctx, comment(live, 6000, alice, "hello"), &bus.Delivery{}); err != nil {
		t.Fatalf("handle = %v, want a takeover while host-b's lease is fresh", err)
	}
	if r := e.record(live); r.Session.Host != hostA {
		t.Errorf("session of a live host was not taken over: %+v", r.Session)
	}

	const gone = "github:octo/repo#22"
	put(gone, "host-c")
	ev := comment(gone, 6001, alice, "hello again")
	if err := e.svc.handle(ctx, ev, &bus.Delivery{}); err != nil {
		t.Fatal(err)
	}
	r := e.record(gone)
	if r.Session.Host != hostA || !slices.Contains(r.Session.Delivered, ev.GetId()) {
		t.Errorf("after takeover: %+v", r.Session)
	}
	testkit.WaitFor(t, "the resumed boot", func() bool {
		// Both work items' sessions (which share the harness id here) were
		// resumed on this host.
		b := e.bootsOf("11111111-2222-4333-8444-555555555555")
		return len(b) == 2 && b[0].Mode == "resume" && b[1].Mode == "resume"
	})
}

// TestUnavailableKeepsRunning: without tmux the service keeps running, says
// why on /readyz, and stops cleanly.
func TestUnavailableKeepsRunning(t *testing.T) {
	e := newEnv(t, func(s *Settings) { s.TmuxBinary = "/nonexistent/tmux" })
	testkit.WaitFor(t, "readiness to say why", func() bool {
		return strings.Contains(e.ready.Check()[Name], "tmux not found")
	})
	ev := comment("github:octo/repo#30", 7000, alice, "the-loop pause")
	e.publish(ev)
	// Nothing is consumed: the event waits in the stream for a replica
	// that can run sessions (checked after the service has had its turn).
	time.Sleep(200 * time.Millisecond)
	if n := len(e.recs.Find("control.command", nil)); n != 0 {
		t.Errorf("an unavailable dispatcher consumed %d events", n)
	}
}

func tmuxtestBoots(e *env) []string {
	var out []string
	for _, b := range tmuxtest.Boots(e.t, e.dir) {
		out = append(out, b.SessionID)
	}
	return out
}
