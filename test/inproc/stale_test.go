package inproc

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/slackmsg"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher"
)

// toDesignGate approves the requirements gate with alice's typed comment on
// GitHub and drives the work item to its design-approval gate. It returns
// the requirements gate's approval message as Slack showed it while that
// gate was current (buttons and all) and the design gate's.
func (w *world) toDesignGate(number int, r, root string) (requirements, design slackfake.Message) {
	w.t.Helper()
	w.toRequirementsGate(number, r, requirementsDoc)
	requirements = w.waitSlack(root, string(catalog.PhaseApprovalPending), slackmsg.ApproveActionID, "The widget SHALL frobnicate")
	w.comment(number, alice, "LGTM")
	w.waitNode(r, "design")
	w.writeArtifact(r, "design.md", "# Design\n\nA frobnicator with a queue.")
	w.complete(r)
	w.waitNode(r, "design-approval")
	design = w.waitSlack(root, string(catalog.PhaseApprovalPending), slackmsg.ApproveActionID, "A frobnicator with a queue")
	return requirements, design
}

// liveButtons reports whether the channel's message ts shows gate buttons
// now.
func (w *world) liveButtons(ts string) bool {
	for _, m := range w.slack.Messages(channel) {
		if m.TS == ts {
			_, ok := slackmsg.ButtonValue(m.Blocks, slackmsg.ApproveActionID)
			return ok
		}
	}
	w.t.Fatalf("no message %s", ts)
	return false
}

// TestAttack5StaleApproveRefused is attack 5 through the whole system: alice
// presses Approve on the requirements gate's message after the work item
// has moved on to the design gate. The design gate does not move, approvedBy
// is unchanged, nothing is recorded on GitHub, alice is told — only she sees
// it — that the gate has moved on, and channel.dropped says stale-gate. The
// old message has lost its buttons by then (gate.moved edited it), and the
// design gate's own button still answers the design gate.
func TestAttack5StaleApproveRefused(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("Attack 5")
	root := w.thread(r)
	requirements, design := w.toDesignGate(number, r, root)

	// The requirements gate was left: its message no longer has buttons.
	testkit.WaitWithin(w.t, wait, "the requirements message loses its buttons", func() bool { return !w.liveButtons(requirements.TS) })
	if !w.liveButtons(design.TS) {
		t.Fatalf("the design gate's message has no buttons:\n%s", design.Blocks)
	}
	for _, m := range w.slack.Messages(channel) {
		if m.TS == requirements.TS && (!strings.Contains(m.Text, "requirements-approval was approved by Alice") || m.Edits == 0) {
			t.Errorf("the retired requirements message says:\n%s", m.Text)
		}
	}

	before := w.state(r)
	comments := len(w.gh.Comments(repo, number))
	// Pressed as a Slack client still showing the old message would send it.
	w.pressButton(aliceSlack, requirements, root, slackmsg.ApproveActionID)
	w.waitLog("channel.dropped", map[string]any{"actor": aliceSlack, "reason": "stale-gate", "message_ts": requirements.TS, "work_item": r})
	told := w.slack.Ephemerals(channel)
	if len(told) != 1 || told[0].User != aliceSlack || told[0].ThreadTS != root || !strings.Contains(told[0].Text, "moved on") ||
		!strings.Contains(told[0].Text, "`design-approval`") {
		t.Errorf("alice was told %+v", told)
	}
	for _, m := range w.slack.Messages(channel) {
		if strings.Contains(m.Text, "moved on") && m.TS != requirements.TS && m.Edits == 0 {
			t.Errorf("the refusal was posted for everyone to see: %s", m.Text)
		}
	}

	// A sentinel through the same thread shows the pipeline moved past the
	// press; then the state is as it was.
	inputs := len(w.inputs())
	w.say(aliceSlack, root, "sentinel: is the queue bounded?")
	testkit.WaitWithin(w.t, wait, "the sentinel typed", func() bool { return len(w.inputs()) > inputs })
	st := w.state(r)
	if st.Current != "design-approval" || len(st.ApprovedBy) != len(before.ApprovedBy) || len(st.Decisions) != len(before.Decisions) {
		t.Fatalf("the stale press moved the design gate: %+v (before %+v)", st, before)
	}
	for _, c := range w.gh.Comments(repo, number)[comments:] {
		if strings.Contains(c.Body, graph.ApproveText) {
			t.Errorf("the stale press was recorded on GitHub:\n%s", c.Body)
		}
	}

	// The design gate's own button answers the design gate.
	w.pressButton(aliceSlack, design, root, slackmsg.ApproveActionID)
	st = w.waitNode(r, "implementation")
	if n := len(st.ApprovedBy); n != len(before.ApprovedBy)+1 || st.ApprovedBy[n-1].Node != "design-approval" || st.ApprovedBy[n-1].Provenance.Channel != "slack" {
		t.Errorf("approvedBy = %+v", st.ApprovedBy)
	}
	testkit.WaitWithin(w.t, wait, "the design message loses its buttons", func() bool { return !w.liveButtons(design.TS) })
}

// TestAttack5StaleVisitAtTheDispatcher: a button answer for the requirements
// gate's visit that gets past ingress-slack anyway — the race of a press
// read just before the gate moved, played here by publishing the relayed
// gate.feedback straight to the inbox — is recorded by the ledger-writer
// with its visit signed into the envelope, comes back from GitHub as a
// ledger.record, and the dispatcher refuses it: the design gate does not
// move and the session is not told. The same answer naming the current
// visit moves it.
func TestAttack5StaleVisitAtTheDispatcher(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("Attack 5, raced")
	root := w.thread(r)
	w.toRequirementsGate(number, r, requirementsDoc)
	g, _ := graph.Builtin(graph.WorkItemGraph)
	oldVisit := w.state(r).GateVisit(g)
	w.comment(number, alice, "LGTM")
	w.waitNode(r, "design")
	w.writeArtifact(r, "design.md", "# Design\n\nA frobnicator.")
	w.complete(r)
	before := w.waitNode(r, "design-approval")

	stale := w.relayedPress(r, root, oldVisit)
	record := w.waitRecord(number, stale.GetId())
	l, err := envelope.ParseLedger([]byte(envelopeKey), envelope.Binding{Repo: repo, Number: number}, record)
	if err != nil || l.Visit != oldVisit {
		t.Fatalf("the record's envelope: %+v, %v; want visit %s signed", l, err, oldVisit)
	}
	w.waitLog("dispatch.dropped", map[string]any{"work_item": r, "reason": dispatcher.DropStaleGate,
		"event_type": string(catalog.LedgerRecord), "gate_visit": oldVisit, "current_visit": before.GateVisit(g)})
	st := w.state(r)
	if st.Current != "design-approval" || len(st.ApprovedBy) != len(before.ApprovedBy) || len(st.Decisions) != len(before.Decisions) {
		t.Fatalf("a stale relayed approval moved the design gate: %+v", st)
	}
	for _, in := range w.inputs() {
		if strings.Contains(in, stale.GetId()) {
			t.Errorf("the stale answer reached the session:\n%s", in)
		}
	}

	// Contrast: the same path naming the current visit passes the gate.
	w.relayedPress(r, root, before.GateVisit(g))
	st = w.waitNode(r, "implementation")
	if len(st.ApprovedBy) != len(before.ApprovedBy)+1 {
		t.Errorf("approvedBy = %+v", st.ApprovedBy)
	}
}

// relayedPress publishes to the inbox what ingress-slack publishes for
// alice's Approve press naming visit, without ingress-slack's check.
func (w *world) relayedPress(r, root, visit string) *loopv1.Event {
	w.t.Helper()
	ts := w.nextTS()
	ev := &loopv1.Event{
		Id: envelope.SlackInteractionID(channel, ts, slackmsg.ApproveActionID+"."+aliceSlack), Source: "slack",
		Type: string(catalog.GateFeedback), Subject: r, Time: envelope.NewTime(time.Now()),
		Actor:        &loopv1.Actor{Github: alice, Slack: aliceSlack, Name: "Alice"},
		Conversation: &loopv1.Conversation{Channel: channel, ThreadTs: root, MessageTs: ts},
		Body: &loopv1.Event_GateFeedback{GateFeedback: &loopv1.GateFeedback{Text: graph.ApproveText,
			Action: slackmsg.GateValue{Ref: r, Visit: visit}.String(), GateVisit: visit}},
	}
	m, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		w.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := w.conn.Publish(ctx, bus.FromEnvelope(m)); err != nil {
		w.t.Fatal(err)
	}
	return ev
}

// waitRecord waits for the ledger's GitHub record of event id on issue
// number and returns its body.
func (w *world) waitRecord(number int, id string) string {
	w.t.Helper()
	var body string
	testkit.WaitWithin(w.t, wait, fmt.Sprintf("the record of %s on GitHub", id), func() bool {
		for _, c := range w.gh.Comments(repo, number) {
			if l, err := envelope.ParseLedger([]byte(envelopeKey), envelope.Binding{Repo: repo, Number: number}, c.Body); err == nil && l.ID == id {
				body = c.Body
				return true
			}
		}
		return false
	})
	return body
}
