package dispatcher

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// TestTmuxDeliversThreeEventsInOrder is the acceptance test: real
// tmux, the stand-in harness, a session spawned by a start command, three
// events delivered in order, a pause (an event then is refused), a resume and
// a stop. The stand-in's input file holds exactly the three rendered event
// prompts, in order, and its boot prompt is the rendered spawn prompt.
func TestTmuxDeliversThreeEventsInOrder(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#15"
	start := comment(ref, 100, alice, "the-loop start")
	e.publish(labeled(ref, "d-label"))
	e.waitRecord("dispatch.dropped", map[string]any{"work_item": ref, "reason": DropAwaitingStart})
	if e.record(ref).Session != nil {
		t.Fatal("the label alone spawned a session; with requireStartCommand it must only arm")
	}
	e.publish(start)
	e.waitRecord("session.spawned", map[string]any{"work_item": ref})
	sess := e.record(ref).Session
	testkit.WaitFor(t, "boot", func() bool { return len(e.bootsOf(sess.HarnessSessionID)) == 1 })

	events := []*loopv1.Event{
		comment(ref, 101, alice, "First: please look at the parser."),
		comment(ref, 102, alice, "Second: and add a test\nwith two lines."),
		comment(ref, 103, alice, "Third: `code` <b>&amp;</b> ünïcode."),
	}
	e.publish(events...)
	testkit.WaitFor(t, "three inputs", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) >= 3 })

	whilePaused := comment(ref, 105, alice, "this arrives while paused")
	e.publish(comment(ref, 104, alice, "the-loop pause"), whilePaused)
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": whilePaused.GetId(), "reason": DropSessionPaused})
	e.publish(comment(ref, 106, alice, "the-loop resume"))
	e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "resume", "effect": "resumed"})
	e.publish(comment(ref, 107, alice, "the-loop stop"))
	e.waitRecord("control.command", map[string]any{"work_item": ref, "command": "stop", "effect": "stopped"})

	if st := e.tmuxState(ref); st != tmux.Absent {
		t.Errorf("tmux session after stop: %v, want absent", st)
	}
	if got := e.record(ref).Session.Status; got != sessions.Closed {
		t.Errorf("registry status after stop: %q", got)
	}
	want := []string{e.expected(events[0], false), e.expected(events[1], false), e.expected(events[2], false)}
	if diff := cmp.Diff(want, e.inputsOf(sess.HarnessSessionID)); diff != "" {
		t.Errorf("the stand-in received (-want +got):\n%s", diff)
	}
	boots := e.bootsOf(sess.HarnessSessionID)
	if len(boots) != 1 || boots[0].Mode != "spawn" || boots[0].Prompt != e.expected(start, true) {
		t.Errorf("boot = %+v, want one spawn with the rendered spawn prompt", boots)
	}
	if n := len(e.recs.Find("control.command", map[string]any{"command": "start"})); n != 0 {
		t.Errorf("a spawning start emitted %d control.command records; the original emits none", n)
	}
}
