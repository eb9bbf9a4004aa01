package inproc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher"
)

// override publishes an operator's graph.override as `the-loop graph`
// does: to the inbox, as the operator (the test's own identity).
func (w *world) override(conn *bus.Conn, ev *loopv1.Event) error {
	w.t.Helper()
	m, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	_, err = conn.Publish(ctx, bus.FromEnvelope(m))
	return err
}

// overrideRecord waits for the ledger's record of the override id on issue
// number and returns it.
func (w *world) overrideRecord(number int, id string) ghfake.Comment {
	w.t.Helper()
	var rec ghfake.Comment
	testkit.WaitWithin(w.t, wait, "the record of "+id, func() bool {
		for _, c := range w.gh.Comments(repo, number) {
			l, err := envelope.ParseLedger([]byte(envelopeKey), envelope.Binding{Repo: repo, Number: number}, c.Body)
			if err == nil && l.ID == id {
				rec = c
				return true
			}
		}
		return false
	})
	return rec
}

// TestOperatorEscapeHatch: the operator skips the agent's requirements
// node — recorded on GitHub naming the person and the reason, then the
// graph moves, once, however often the event is published — the
// dispatcher's identity (the one that serves agent sessions) may not raise
// an override, and the operator's escalation of the gate reaches Slack as
// conflict-escalated with the reason.
func TestOperatorEscapeHatch(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("escape hatch")
	root := w.thread(r)
	w.comment(number, alice, "the-loop execute")
	w.waitNode(r, "requirements")

	person := &loopv1.Actor{Github: alice, Slack: aliceSlack, Name: "Alice"}
	skip := dispatcher.OverrideEvent(r, graph.WorkItemGraph, graph.ActionSkip, "requirements", "",
		"The requirements are the issue's own text.", person, time.Now())
	if err := w.override(w.conn, skip); err != nil {
		t.Fatal(err)
	}
	st := w.waitNode(r, "requirements-approval")
	rec := w.overrideRecord(number, skip.GetId())
	record := rec.Body
	for _, want := range []string{"graph **skip** by the operator, as `alice`", "`requirements`", "The requirements are the issue's own text."} {
		if !strings.Contains(record, want) {
			t.Errorf("the record on GitHub does not say %q:\n%s", want, record)
		}
	}
	if !envelope.HasSelfMarker(record) {
		t.Error("the override's record is not marker-stamped: an ingress would judge it")
	}
	// The move the dispatcher applied is the recorded one: it names the
	// record on GitHub.
	if len(st.Overrides) != 1 || st.Overrides[0].By != alice || st.Overrides[0].RecordURL != rec.HTMLURL {
		t.Errorf("overrides = %+v, want one by alice naming the record %s", st.Overrides, rec.HTMLURL)
	}
	w.waitLog("graph.advanced", map[string]any{"event_id": skip.GetId(), "source": "operator", "to": "requirements-approval"})
	// The session is told, so that it does not complete a node it no
	// longer stands at.
	testkit.WaitWithin(t, wait, "the skip typed into the session", func() bool {
		for _, in := range w.inputs() {
			if strings.Contains(in, "moved this work item's graph by hand (skip") && strings.Contains(in, "The requirements are the issue's own text.") &&
				strings.Contains(in, "requirements-approval") {
				return true
			}
		}
		return false
	})

	// The same event again (a retried publish): one record, one move.
	if err := w.override(w.conn, skip); err != nil {
		t.Fatal(err)
	}
	// A session reaches the bus only through the dispatcher, whose
	// identity may not raise an override.
	as := w.srv.ConnectAs(t, dispatcher.Name, "session-attempt")
	forged := dispatcher.OverrideEvent(r, graph.WorkItemGraph, graph.ActionForce, "requirements-approval", "complete", "done", nil, time.Now())
	if err := w.override(as, forged); !errors.Is(err, bus.ErrDenied) {
		t.Errorf("the dispatcher's identity publishing an override: %v, want bus.ErrDenied", err)
	}

	esc := dispatcher.OverrideEvent(r, graph.WorkItemGraph, graph.ActionEscalate, "requirements-approval", "",
		"The customer wants a call first.", person, time.Now().Add(time.Millisecond))
	if err := w.override(w.conn, esc); err != nil {
		t.Fatal(err)
	}
	st = w.waitNode(r, "escalated")
	w.waitSlack(root, "Conflict escalated", "The customer wants a call first.", "Alice")
	if st.Status != graph.StatusEscalated || len(st.Overrides) != 2 {
		t.Errorf("after the escalation: %+v", st)
	}
	records := 0
	for _, c := range w.gh.Comments(repo, number) {
		if strings.Contains(c.Body, "graph **skip**") {
			records++
		}
	}
	if records != 1 {
		t.Errorf("%d records of the skip on GitHub, want 1", records)
	}
}
