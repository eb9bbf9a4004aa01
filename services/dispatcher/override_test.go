package dispatcher

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// recordedOverride is an operator's override as the ledger-writer fans it
// out: recorded on the work item (its ledger reference set).
func recordedOverride(ref string, action graph.Action, from, to, reason string, at time.Time) *loopv1.Event {
	ev := OverrideEvent(ref, graph.WorkItemGraph, action, from, to, reason, &loopv1.Actor{Github: alice}, at)
	ev.Ledger = &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: numberOf(ref), CommentId: at.UnixNano(),
		Url: graphstate.WorkItemURL(ref) + "#issuecomment-" + ev.GetId()[len(ev.GetId())-6:]}
	return ev
}

// TestOperatorOverride applies the operator's recorded moves without a
// session: a skip moves the agent node on once however often it is
// delivered, a stale one and one that is not the operator's move nothing,
// and an escalation from a gate ends at escalated with conflict-escalated
// carrying the reason.
func TestOperatorOverride(t *testing.T) {
	e := newEnv(t, nil)
	box := e.inbox()
	ctx := context.Background()
	const ref = "github:octo/repo#31"
	store, err := graphstate.Open(ctx, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := graph.Builtin(graph.WorkItemGraph)
	if _, err := store.Mutate(ctx, ref, func(*graph.State) (*graph.State, error) {
		st, _, err := graph.New(g, ref, time.Now().UTC())
		if err != nil {
			return nil, err
		}
		_, err = st.Advance(g, graph.OutcomeExecute, time.Now().UTC())
		return st, err
	}); err != nil {
		t.Fatal(err)
	}
	handle := func(ev *loopv1.Event, n uint64) {
		t.Helper()
		if err := e.svc.handle(ctx, ev, &bus.Delivery{NumDelivered: n}); err != nil {
			t.Fatalf("handle %s: %v", ev.GetId(), err)
		}
	}

	// skip: requirements → requirements-approval, once.
	skip := recordedOverride(ref, graph.ActionSkip, "requirements", "", "the requirements are in the issue", time.Now())
	handle(skip, 1)
	st := e.graphState(ref)
	if st.Current != "requirements-approval" || len(st.Overrides) != 1 {
		t.Fatalf("after skip: at %s, overrides %+v", st.Current, st.Overrides)
	}
	if o := st.Overrides[0]; o.EventID != skip.GetId() || o.By != alice || o.Reason != "the requirements are in the issue" ||
		o.RecordURL != skip.GetLedger().GetUrl() || o.Outcome != graph.OutcomeDone {
		t.Errorf("override kept = %+v", o)
	}
	e.waitNotification(box, ref, "requirements-approval", 1, catalog.PhaseApprovalPending)
	e.waitRecord("graph.advanced", map[string]any{"event_id": skip.GetId(), "source": "operator", "override": "skip",
		"from": "requirements", "to": "requirements-approval", "actor": alice})
	version := st.Version
	handle(skip, 2)
	if st := e.graphState(ref); st.Version != version || len(st.Overrides) != 1 {
		t.Errorf("a second delivery of the skip moved the graph again: %+v", st)
	}
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": skip.GetId(), "reason": DropAlreadyProcessed})

	// Refused, for good: a skip decided at a node the work item left, a
	// skip of a human gate, and an override that is not the operator's.
	stale := recordedOverride(ref, graph.ActionSkip, "requirements", "", "again", time.Now().Add(time.Second))
	gate := recordedOverride(ref, graph.ActionSkip, "requirements-approval", "", "no one answers", time.Now().Add(2*time.Second))
	session := recordedOverride(ref, graph.ActionForce, "requirements-approval", "complete", "I am done", time.Now().Add(3*time.Second))
	session.Source, session.Actor = catalog.SourceSession, nil
	unrecorded := recordedOverride(ref, graph.ActionForce, "requirements-approval", "complete", "quick", time.Now().Add(4*time.Second))
	unrecorded.Ledger = nil
	for ev, kind := range map[*loopv1.Event]string{stale: "stale", gate: "human-gate", session: "other", unrecorded: "other"} {
		handle(ev, 1)
		rec := e.waitRecord("dispatch.dropped", map[string]any{"event_id": ev.GetId(), "reason": DropOverrideRefused})
		if kind != "other" && rec.Fields["refusal"] != kind {
			t.Errorf("%s refused as %v, want %s", ev.GetId(), rec.Fields["refusal"], kind)
		}
	}
	if st := e.graphState(ref); st.Version != version || st.Current != "requirements-approval" {
		t.Fatalf("a refused override moved the graph: %+v", st)
	}

	// escalate from the gate: the escalated end, conflict-escalated with
	// the operator's reason, and gate.moved for the visit it left.
	esc := recordedOverride(ref, graph.ActionEscalate, "requirements-approval", "", "the customer changed their mind", time.Now().Add(5*time.Second))
	handle(esc, 1)
	st = e.graphState(ref)
	if st.Current != "escalated" || st.Status != graph.StatusEscalated {
		t.Fatalf("after escalate: %+v", st)
	}
	n := e.waitNotification(box, ref, "escalated", 1, catalog.ConflictEscalated)
	if !strings.Contains(n.GetText(), "the customer changed their mind") || !strings.Contains(n.GetText(), "@alice") {
		t.Errorf("conflict-escalated text = %q", n.GetText())
	}
	e.inboxFind(box, "gate.moved of requirements-approval", func(ev *loopv1.Event) bool {
		return ev.GetType() == string(catalog.GateMoved) && ev.GetNotification().GetNode() == "requirements-approval"
	})
	e.waitRecord("graph.completed", map[string]any{"event_id": esc.GetId(), "node": "escalated"})

	// force revives it.
	force := recordedOverride(ref, graph.ActionForce, "escalated", "design", "agreed with the customer", time.Now().Add(6*time.Second))
	handle(force, 1)
	if st := e.graphState(ref); st.Current != "design" || st.Status != graph.StatusActive || len(st.Overrides) != 3 {
		t.Fatalf("after force: %+v", st)
	}
	// advance along the agent node's edge.
	adv := recordedOverride(ref, graph.ActionAdvance, "design", "design-approval", "design.md is attached", time.Now().Add(7*time.Second))
	handle(adv, 1)
	if st := e.graphState(ref); st.Current != "design-approval" || len(st.Overrides) != 4 {
		t.Fatalf("after advance: %+v", st)
	}
	e.waitNotification(box, ref, "design-approval", 1, catalog.PhaseApprovalPending)
}
