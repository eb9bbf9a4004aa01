package dispatcher

import (
	"context"
	"fmt"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// inbox collects what reaches loop.in (the graph's notifications) through
// the ledger-writer's real partitioned consumers.
type inbox struct {
	mu  sync.Mutex
	evs map[string]*loopv1.Event
}

func (e *env) inbox() *inbox {
	box := &inbox{evs: map[string]*loopv1.Event{}}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := e.pub.NewRunner(bus.ConsumerSpec{Service: bus.ServiceLedgerWriter, Stream: bus.StreamInbox, Partitions: partitions},
		bus.HandlerFunc(func(_ context.Context, d *bus.Delivery) error {
			ev, err := envelope.FromMessage(envelope.Message{Subject: d.Subject, Header: d.Header, Data: d.Data})
			if err != nil {
				e.t.Errorf("inbox message %s: %v", d.Subject, err)
				return nil
			}
			box.mu.Lock()
			defer box.mu.Unlock()
			if _, dup := box.evs[ev.GetId()]; dup {
				e.t.Errorf("event %s reached the inbox twice", ev.GetId())
			}
			box.evs[ev.GetId()] = ev
			return nil
		}))
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	e.t.Cleanup(func() { cancel(); <-done })
	return box
}

func (b *inbox) get(id string) *loopv1.Event {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.evs[id]
}

func (e *env) waitNotification(box *inbox, ref, node string, attempt int, typ catalog.Type) *loopv1.Notification {
	e.t.Helper()
	id := graphstate.NotificationID(ref, node, attempt, typ)
	var ev *loopv1.Event
	testkit.WaitFor(e.t, fmt.Sprintf("%s of %s on the inbox", typ, node), func() bool { ev = box.get(id); return ev != nil })
	if ev.GetSource() != "loop" || ev.GetType() != string(typ) || ev.GetSubject() != ref {
		e.t.Errorf("notification %s: source %q type %q subject %q", id, ev.GetSource(), ev.GetType(), ev.GetSubject())
	}
	return ev.GetNotification()
}

func (e *env) waitNode(ref, node string) *graph.State {
	e.t.Helper()
	var st *graph.State
	testkit.WaitFor(e.t, ref+" at "+node, func() bool { st = e.graphState(ref); return st != nil && st.Current == node })
	return st
}

// gateRecord is the ledger's read-back of a gate.feedback a Slack member
// relayed: posted by the ledger's login, re-attributed to actor.
func gateRecord(ref string, id int64, actor *loopv1.Actor, text string) *loopv1.Event {
	ev := relayed(ref, id, actor, text)
	ev.GetLedgerRecord().EventType = string(catalog.GateFeedback)
	ev.Conversation = &loopv1.Conversation{Channel: "C0LOOP", ThreadTs: "1700000000.000100"}
	return ev
}

// TestGraphWiring walks the work-item graph through the dispatcher: the
// spawn starts it (decision-pending, with the work item's URL), execute
// passes phase selection, `graph complete` moves the agent on and the
// approval ping carries the artifact's excerpt, a relayed Slack approval
// passes the gate under the person's login with the envelope's provenance
// and writes approvedBy into the artifact, an objection and a collaborator
// move nothing, and reaching complete publishes work-item-complete.
func TestGraphWiring(t *testing.T) {
	e := newEnv(t, nil)
	box := e.inbox()
	const ref = "github:octo/repo#21"
	ctx := context.Background()
	sess := e.start(ref, 7000)
	// The artifacts live in the work item's own checkout, under
	// docs/specs/issue-21.
	work := sess.SpecDir
	if !strings.HasSuffix(filepath.ToSlash(work), "/docs/specs/issue-21") {
		t.Fatalf("the session's spec directory is %q", work)
	}

	st := e.waitNode(ref, "phase-selection")
	if st.Ref != ref || st.Graph != graph.WorkItemGraph || st.Status != graph.StatusWaiting {
		t.Fatalf("started state = %+v", st)
	}
	n := e.waitNotification(box, ref, "phase-selection", 1, catalog.DecisionPending)
	if n.GetUrl() != "https://github.com/octo/repo/issues/21" || n.GetNode() != "phase-selection" {
		t.Errorf("decision-pending = %v", n)
	}
	if b := e.bootsOf(sess.HarnessSessionID); len(b) != 1 || !strings.Contains(b[0].Prompt, "node: phase-selection") {
		t.Errorf("the spawn prompt does not show the graph: %+v", b)
	}

	e.publish(comment(ref, 7001, alice, "Looks good to me, go on."))
	testkit.WaitFor(t, "the first comment typed", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) == 1 })
	if st := e.graphState(ref); st.Current != "phase-selection" || st.Reason != graph.ReasonNoKeyword {
		t.Errorf("a comment without the execute keyword moved phase selection: %+v", st)
	}
	e.publish(comment(ref, 7002, alice, "the-loop execute"))
	st = e.waitNode(ref, "requirements")
	if len(st.Decisions) != 1 || st.Decisions[0].Outcome != graph.OutcomeExecute || st.Decisions[0].By[0] != alice {
		t.Errorf("decisions = %+v", st.Decisions)
	}
	testkit.WaitFor(t, "the execute comment typed", func() bool {
		in := e.inputsOf(sess.HarnessSessionID)
		return len(in) == 2 && strings.Contains(in[1], "classified by the gate first: execute") && strings.Contains(in[1], "node: requirements")
	})

	doc := "---\ntitle: Requirements\napprovedBy: []\n---\n\n# Requirements\n\n" + strings.Repeat("The system shall do the thing. ", 200)
	if err := os.WriteFile(filepath.Join(work, "requirements.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := graphstate.Open(ctx, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := flow.CompleteAndPublish(ctx, store, e.pub, graph.NewRegistry(), ref, 100); err != nil {
		t.Fatal(err)
	}
	if _, _, err := flow.CompleteAndPublish(ctx, store, e.pub, graph.NewRegistry(), ref, 100); err == nil {
		t.Error("graph complete passed a human gate")
	}
	n = e.waitNotification(box, ref, "requirements-approval", 1, catalog.PhaseApprovalPending)
	if n.GetArtifact() != "requirements.md" || !strings.HasPrefix(n.GetArtifactExcerpt(), "# Requirements") ||
		len([]rune(n.GetArtifactExcerpt())) != 100 || strings.Contains(n.GetArtifactExcerpt(), "approvedBy") {
		t.Errorf("approval ping artifact %q excerpt (%d chars) %q", n.GetArtifact(), len([]rune(n.GetArtifactExcerpt())), n.GetArtifactExcerpt())
	}

	// Neither an objection nor a collaborator passes the gate.
	e.publish(comment(ref, 7003, alice, "Not approved: what about errors?"))
	testkit.WaitFor(t, "the objection typed", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) == 3 })
	collab := comment(ref, 7004, "", "approved")
	e.publish(collab)
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": collab.GetId(), "reason": DropUnauthorized})
	if st := e.graphState(ref); st.Current != "requirements-approval" {
		t.Fatalf("an objection or a collaborator moved the gate to %s", st.Current)
	}

	rec := gateRecord(ref, 7005, &loopv1.Actor{Github: alice, Slack: "U0ALICE"}, graph.ApproveText)
	e.publish(rec)
	st = e.waitNode(ref, "design")
	if len(st.ApprovedBy) != 1 {
		t.Fatalf("approvedBy = %+v", st.ApprovedBy)
	}
	a := st.ApprovedBy[0]
	want := graph.Provenance{Channel: "slack", Member: "U0ALICE", RecordURL: "https://github.com/octo/repo/issues/21#issuecomment-7005", EventID: "slack:Ev7005"}
	if a.Login != alice || a.Node != "requirements-approval" || a.Provenance != want {
		t.Errorf("approval = %+v, want alice at requirements-approval with %+v", a, want)
	}
	testkit.WaitFor(t, "approvedBy in the artifact", func() bool {
		b, _ := os.ReadFile(filepath.Join(work, "requirements.md"))
		return strings.Contains(string(b), "@alice (requirements-approval, ") && strings.Contains(string(b), "via slack U0ALICE")
	})
	// The same record redelivered decides nothing again.
	if err := e.svc.handle(ctx, rec, &bus.Delivery{NumDelivered: 2}); err != nil {
		t.Fatal(err)
	}
	if st := e.graphState(ref); len(st.ApprovedBy) != 1 || st.Current != "design" {
		t.Errorf("a redelivered approval changed the state: %+v", st)
	}

	// design (no artifact in the workspace: the ping says so by carrying none),
	// then implementation and review, approved on GitHub.
	if _, _, err := flow.CompleteAndPublish(ctx, store, e.pub, graph.NewRegistry(), ref, 100); err != nil {
		t.Fatal(err)
	}
	if n := e.waitNotification(box, ref, "design-approval", 1, catalog.PhaseApprovalPending); n.GetArtifactExcerpt() != "" || n.GetArtifact() != "design.md" {
		t.Errorf("design ping without the file: artifact %q excerpt %q", n.GetArtifact(), n.GetArtifactExcerpt())
	}
	// One event passes a gate once: alice's relayed approval of the
	// requirements, copied onto another record, does not pass the design's.
	replay := gateRecord(ref, 7010, &loopv1.Actor{Github: alice, Slack: "U0ALICE"}, graph.ApproveText)
	replay.GetLedgerRecord().EventId = rec.GetLedgerRecord().GetEventId()
	if err := e.svc.handle(ctx, replay, &bus.Delivery{NumDelivered: 1}); err != nil {
		t.Fatal(err)
	}
	if st := e.graphState(ref); st.Current != "design-approval" || len(st.ApprovedBy) != 1 {
		t.Errorf("a second record of one event passed another gate: at %s, approvedBy %+v", st.Current, st.ApprovedBy)
	}
	e.publish(comment(ref, 7006, alice, "LGTM"))
	e.waitNode(ref, "implementation")
	if _, _, err := flow.CompleteAndPublish(ctx, store, e.pub, graph.NewRegistry(), ref, 100); err != nil {
		t.Fatal(err)
	}
	e.waitNotification(box, ref, "review", 1, catalog.PRReviewPending)
	e.publish(comment(ref, 7007, alice, "ship it"))
	st = e.waitNode(ref, "complete")
	if st.Status != graph.StatusComplete {
		t.Errorf("status at complete = %s", st.Status)
	}
	e.waitNotification(box, ref, "complete", 1, catalog.WorkItemComplete)
	e.waitRecord("graph.completed", map[string]any{"work_item": ref, "node": "complete"})
}
