package dispatcher

import (
	"context"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// buttonRecord is the read-back of a relayed button answer whose signed
// envelope names the gate visit the button was drawn for.
func buttonRecord(ref string, id int64, visit, text string) *loopv1.Event {
	ev := gateRecord(ref, id, &loopv1.Actor{Github: alice, Slack: "U0ALICE", Name: "Alice"}, text)
	ev.GetLedgerRecord().GateVisit = visit
	return ev
}

// TestStaleGateAnswerRefused: a relayed button answer applies only to the
// gate visit its envelope names. One for a visit the work item has left —
// the race ingress-slack cannot close, a press read just before the gate
// moved — neither moves the gate nor reaches the session, and
// dispatch.dropped says stale-gate; the current visit's answer moves it,
// gate.moved says which visit ended, and a redelivery of that answer is
// not mistaken for a stale one.
func TestStaleGateAnswerRefused(t *testing.T) {
	e := newEnv(t, func(*Settings) {})
	box := e.inbox()
	const ref = "github:octo/repo#31"
	ctx := context.Background()
	sess := e.start(ref, 8000)
	e.waitNode(ref, "phase-selection")
	if n := e.waitNotification(box, ref, "phase-selection", 1, catalog.DecisionPending); n.GetGateVisit() == "" {
		t.Errorf("the gate's notification names no visit: %v", n)
	}
	e.publish(comment(ref, 8001, alice, "the-loop execute"))
	e.waitNode(ref, "requirements")
	store, err := graphstate.Open(ctx, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := flow.CompleteAndPublish(ctx, store, e.pub, graph.NewRegistry(), ref, 100); err != nil {
		t.Fatal(err)
	}
	st := e.waitNode(ref, "requirements-approval")
	g, _ := graph.Builtin(graph.WorkItemGraph)
	first := st.GateVisit(g)
	if n := e.waitNotification(box, ref, "requirements-approval", 1, catalog.PhaseApprovalPending); n.GetGateVisit() != first {
		t.Fatalf("approval ping visit %q, state %q", n.GetGateVisit(), first)
	}
	typed := len(e.inputsOf(sess.HarnessSessionID))

	// An approval for a visit that is not the current one.
	old := buttonRecord(ref, 8002, "requirements-approval.1.1", graph.ApproveText)
	e.publish(old)
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": old.GetId(), "reason": DropStaleGate,
		"gate_visit": "requirements-approval.1.1", "current_visit": first})
	if st := e.graphState(ref); st.Current != "requirements-approval" || len(st.ApprovedBy) != 0 || len(st.Decisions) != 1 {
		t.Fatalf("a stale approval moved the gate: %+v", st)
	}

	// The current visit's approval moves it, and gate.moved names the visit.
	cur := buttonRecord(ref, 8003, first, graph.ApproveText)
	e.publish(cur)
	st = e.waitNode(ref, "design")
	if len(st.ApprovedBy) != 1 || st.ApprovedBy[0].Login != alice {
		t.Fatalf("approvedBy = %+v", st.ApprovedBy)
	}
	var moved *loopv1.Event
	testkit.WaitFor(t, "gate.moved on the inbox", func() bool {
		moved = box.get(envelope.LoopID("gate-moved", ref, first))
		return moved != nil
	})
	n := moved.GetNotification()
	if moved.GetType() != string(catalog.GateMoved) || n.GetGateVisit() != first || n.GetNode() != "requirements-approval" ||
		n.GetDetail()["outcome"] != string(graph.OutcomeApproved) || n.GetDetail()["to"] != "design" ||
		moved.GetActor().GetGithub() != alice || moved.GetCausationId() != cur.GetId() || !strings.Contains(n.GetText(), "approved by Alice") {
		t.Errorf("gate.moved = %v", moved)
	}
	// Only the current answer was typed into the session.
	testkit.WaitFor(t, "the approval typed", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) == typed+1 })
	// Its redelivery finds the gate moved by itself: not stale.
	if err := e.svc.handle(ctx, cur, &bus.Delivery{NumDelivered: 2}); err != nil {
		t.Fatal(err)
	}
	if got := e.recs.Find("dispatch.dropped", map[string]any{"event_id": cur.GetId(), "reason": DropStaleGate}); len(got) != 0 {
		t.Errorf("the redelivered answer that moved the gate was taken for a stale one: %v", got)
	}

	// At the next gate, the requirements button pressed again (a new
	// press, a new event) moves nothing.
	if _, _, err := flow.CompleteAndPublish(ctx, store, e.pub, graph.NewRegistry(), ref, 100); err != nil {
		t.Fatal(err)
	}
	st = e.waitNode(ref, "design-approval")
	again := buttonRecord(ref, 8004, first, graph.ApproveText)
	e.publish(again)
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": again.GetId(), "reason": DropStaleGate, "current_visit": st.GateVisit(g)})
	if st := e.graphState(ref); st.Current != "design-approval" || len(st.ApprovedBy) != 1 {
		t.Errorf("the requirements button moved the design gate: %+v", st)
	}
	// A typed answer names no visit and answers the gate that is current.
	e.publish(gateRecord(ref, 8005, &loopv1.Actor{Github: alice, Slack: "U0ALICE"}, "Request changes: split the module"))
	e.waitNode(ref, "design")
	for _, in := range e.inputsOf(sess.HarnessSessionID) {
		if strings.Contains(in, "issuecomment-8002") || strings.Contains(in, "issuecomment-8004") {
			t.Errorf("a stale answer reached the session:\n%s", in)
		}
	}
}
