package ingressslack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// advance moves ref's graph state in KV by outcomes, a minute apart each, as
// the dispatcher does when a gate decides or an agent completes.
func (e *env) advance(ref string, outcomes ...graph.Outcome) {
	e.t.Helper()
	kv := e.kv(bus.BucketGraph)
	ent, err := kv.Get(context.Background(), catalog.SubjectKey(ref))
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := graph.Decode(ent.Value)
	if err != nil {
		e.t.Fatal(err)
	}
	g, _ := graph.Builtin(graph.WorkItemGraph)
	at := st.History[len(st.History)-1].EnteredAt
	for _, o := range outcomes {
		at = at.Add(time.Minute)
		if _, err := st.Advance(g, o, at); err != nil {
			e.t.Fatal(err)
		}
	}
	b, _ := st.Encode()
	if _, err := kv.Put(context.Background(), catalog.SubjectKey(ref), b); err != nil {
		e.t.Fatal(err)
	}
}

// told is what the presser was shown, ephemerally, in the gate's thread.
func (e *env) told(user string) []string {
	var out []string
	for _, m := range e.slack.Ephemerals(testChannel) {
		if m.User == user && m.ThreadTS == gate {
			out = append(out, m.Text)
		}
	}
	return out
}

// TestStaleGatePressRefused is attack 5: pressing Approve on the message of
// a gate visit the work item has left — here the same gate, entered again
// after changes were requested, which is the case a constant button value
// cannot tell apart — publishes nothing; the presser is told, only they
// see it, and channel.dropped says stale-gate. The button of the current
// visit still answers, and a typed answer answers whatever gate is current.
func TestStaleGatePressRefused(t *testing.T) {
	e, s := started(t)
	old := e.gateValue(refGate)
	oldVisit := e.visit(refGate)
	e.advance(refGate, graph.OutcomeChangesRequested, graph.OutcomeDone)
	current := e.gateValue(refGate)
	if current == old {
		t.Fatalf("the gate entered again kept its visit %q", oldVisit)
	}
	before := e.stored()

	got, rec := e.press(s, pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, old))
	if got.reason != reasonStaleGate || rec["detail"] != "moved" || rec["gate_visit"] != oldVisit || rec["work_item"] != refGate {
		t.Errorf("stale approve: %v %v", got, rec)
	}
	if n := e.stored(); n != before {
		t.Fatalf("a stale press put %d event(s) on the inbox", n-before)
	}
	if said := e.told("UALICE"); len(said) != 1 || !strings.Contains(said[0], "moved on") || !strings.Contains(said[0], "`requirements-approval`") {
		t.Errorf("the presser was told %q", said)
	}
	if v := metric(t, s.m.dropped.WithLabelValues(reasonStaleGate, viaEvents)); v != 1 {
		t.Errorf("dropped{stale-gate} = %v", v)
	}

	// Request changes on the stale message, and a button drawn before
	// buttons named visits (the fixed text): refused the same way.
	if got, _ := e.press(s, pressBody("UALICE", testChannel, gate, "", slackmsg.RequestChangesActionID, old)); got.reason != reasonStaleGate {
		t.Errorf("stale request changes: %v", got)
	}
	got, rec = e.press(s, pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, slackmsg.ApproveValue))
	if got.reason != reasonStaleGate || rec["detail"] != "no-visit" {
		t.Errorf("legacy value: %v %v", got, rec)
	}
	if n := e.stored(); n != before {
		t.Fatalf("stale presses put %d event(s) on the inbox", n-before)
	}
	if said := e.told("UALICE"); len(said) != 3 {
		t.Errorf("the presser was told %d times, want 3: %q", len(said), said)
	}

	// The current visit's button answers the gate, carrying its visit.
	got, rec = e.press(s, pressBody("W111", testChannel, gate, "", slackmsg.ApproveActionID, current))
	if got.typ != catalog.GateFeedback {
		t.Fatalf("current approve: %v %v", got, rec)
	}
	if gf := e.waitEvent(rec["event_id"].(string)).GetGateFeedback(); gf.GetGateVisit() != e.visit(refGate) || gf.GetText() != graph.ApproveText {
		t.Errorf("current approve = %v", gf)
	}
	// A typed answer names no visit and answers the gate that is current.
	got, rec = e.send(s, reply("UALICE", gate, "Approved, ship it"))
	if gf := e.waitEvent(rec["event_id"].(string)).GetGateFeedback(); got.typ != catalog.GateFeedback || gf.GetGateVisit() != "" {
		t.Errorf("typed answer: %v %v", got, gf)
	}

	// Once the work item has left every gate, its current button is stale
	// too.
	e.advance(refGate, graph.OutcomeApproved)
	if got, rec := e.press(s, pressBody("W111", testChannel, gate, "", slackmsg.ApproveActionID, current)); got.reason != reasonStaleGate || rec["detail"] != "moved" {
		t.Errorf("press after the gate was passed: %v %v", got, rec)
	}
	if said := e.told("W111"); len(said) != 1 || strings.Contains(said[0], "now waits at") {
		t.Errorf("W111 was told %q", said)
	}
}

// TestGateValueRefusals: a gate button's value is untrusted text from the
// press. One naming another work item than the thread's, or claiming to be
// a gate value and malformed (or oversized), is refused — never read as
// free text, which would answer the current gate — and nothing reaches the
// inbox; no press panics the service.
func TestGateValueRefusals(t *testing.T) {
	e, s := started(t)
	e.setGraph(refOne, true)
	visit := e.visit(refGate)
	before := e.stored()
	for _, c := range []struct {
		name, value, reason, detail string
	}{
		{"another work item's button in this thread", e.gateValue(refOne), reasonInvalid, "gate-button-of-another-work-item"},
		{"a visit that never was", slackmsg.GateValue{Ref: refGate, Visit: "requirements-approval.99.1"}.String(), reasonStaleGate, "moved"},
		{"prefix only", "the-loop.gate/1 ", reasonInvalid, "malformed-gate-value"},
		{"no visit", "the-loop.gate/1 " + refGate, reasonInvalid, "malformed-gate-value"},
		{"a visit with a leading zero", "the-loop.gate/1 " + refGate + " requirements-approval.03.1700000000000", reasonInvalid, "malformed-gate-value"},
		{"a trailing field", "the-loop.gate/1 " + refGate + " " + visit + " approve", reasonInvalid, "malformed-gate-value"},
		{"oversized", "the-loop.gate/1 " + refGate + " " + visit + strings.Repeat("7", 3000), reasonInvalid, "malformed-gate-value"},
		{"markup in the ref", "the-loop.gate/1 github:<!channel>#2 " + visit, reasonInvalid, "malformed-gate-value"},
		{"not UTF-8", "the-loop.gate/1 " + refGate + " " + visit + "\xff", reasonInvalid, "malformed-gate-value"},
	} {
		got, rec := e.press(s, pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, c.value))
		if got.reason != c.reason || rec["detail"] != c.detail {
			t.Errorf("%s: %v %v, want dropped:%s (%s)", c.name, got, rec["detail"], c.reason, c.detail)
		}
	}
	if n := e.stored(); n != before {
		t.Errorf("refused presses put %d event(s) on the inbox", n-before)
	}
	// A stranger's press of the current button is unauthorized, as before:
	// authorization comes first.
	if got, _ := e.press(s, pressBody("UMALLORY", testChannel, gate, "", slackmsg.ApproveActionID, e.gateValue(refGate))); got.reason != reasonUnauthorized {
		t.Errorf("a stranger's press: %v", got)
	}
}
