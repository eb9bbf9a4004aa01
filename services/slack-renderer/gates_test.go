package slackrenderer

import (
	"context"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/slackmsg"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// movedEv is the dispatcher's gate.moved for visit: alice's approval (or
// outcome) moved the work item to to.
func movedEv(id, subject, visit, outcome, to string) *loopv1.Event {
	node := strings.SplitN(visit, ".", 2)[0]
	return &loopv1.Event{Id: id, Source: "loop", Type: string(catalog.GateMoved), Subject: subject, Time: evTime,
		Actor: &loopv1.Actor{Github: "alice", Slack: "UALICE", Name: "Alice"}, CausationId: "gh:issue-comment:9",
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{
			Text: subject + ": " + node + " was " + outcome + " by Alice; the work item moved on to " + to + ".",
			Url:  "https://github.com/octo/repo/issues/15", Node: node, GateVisit: visit,
			Artifact: "requirements.md", ArtifactExcerpt: "# Requirements\n\nThe widget SHALL frobnicate.",
			Detail: map[string]string{"outcome": outcome, "to": to},
		}}}
}

// message returns the channel's message ts as the fake holds it now.
func (e *env) message(ts string) slackfake.Message {
	e.t.Helper()
	for _, m := range e.fake.Messages(testChannel) {
		if m.TS == ts {
			return m
		}
	}
	e.t.Fatalf("no message %s", ts)
	return slackfake.Message{}
}

func hasGateButtons(m slackfake.Message) bool {
	_, a := slackmsg.ButtonValue(m.Blocks, slackmsg.ApproveActionID)
	_, r := slackmsg.ButtonValue(m.Blocks, slackmsg.RequestChangesActionID)
	return a || r
}

// TestOldGateMessageLosesItsButtons: a gate's message keeps its answer
// buttons only while the work item waits at the visit they were drawn for.
// gate.moved edits it into what became of the gate (once, whatever the
// redeliveries); when gate.moved never came, the next gate's message retires
// it; and a replayed notification of a retired visit never gets its
// buttons back. Nothing new is posted for any of it.
func TestOldGateMessageLosesItsButtons(t *testing.T) {
	e := newEnv(t)
	e.setSlack(func(s *config.SlackChannel) {
		s.Subscribe = []catalog.Type{catalog.PhaseApprovalPending, catalog.SessionAwaitingInput}
		s.Read.Mode = config.ReadSocket
		s.Publish = append(s.Publish, catalog.GateFeedback)
	})
	in := e.start(startOpts{})
	ctx := context.Background()
	count := func(n int) func() bool { return func() bool { return len(e.fake.Messages(testChannel)) == n } }

	const v1 = "requirements-approval.3.1772357400000"
	e.publish(gateNote("loop:notify:v1", workItem, v1))
	e.fake.Wait(t, waitLong, "the first gate's message", count(1))
	m1 := e.fake.Messages(testChannel)[0]
	if v, ok := slackmsg.ButtonValue(m1.Blocks, slackmsg.ApproveActionID); !ok || v != (slackmsg.GateValue{Ref: workItem, Visit: v1}).String() {
		t.Fatalf("the gate's Approve button = %q %v", v, ok)
	}

	moved := movedEv("loop:gate-moved:v1", workItem, v1, "approved", "design")
	e.publish(moved)
	e.fake.Wait(t, waitLong, "the first gate's message edited", func() bool { return e.message(m1.TS).Edits == 1 })
	got := e.message(m1.TS)
	if hasGateButtons(got) || !strings.Contains(got.Text, "approved by Alice") || !strings.Contains(string(got.Blocks), "The widget SHALL frobnicate") {
		t.Errorf("the retired message:\n%s\n%s", got.Text, got.Blocks)
	}
	if eventIDOf(got) != "loop:notify:v1" {
		t.Errorf("the retired message's metadata names %q, want the notification's id", eventIDOf(got))
	}
	// gate.moved redelivered once the retirement is recorded: nothing to
	// edit any more. (Redelivered before that, it edits again, to the same
	// text.)
	testkit.WaitFor(t, "the retirement recorded", func() bool {
		return len(e.recs.Find("channel.posted", map[string]any{"op": "retired", "event_id": "loop:notify:v1"})) == 1
	})
	if err := in.svc.handle(ctx, moved, &bus.Delivery{NumDelivered: 2}); err != nil {
		t.Fatal(err)
	}
	if n := e.message(m1.TS).Edits; n != 1 {
		t.Errorf("a redelivered gate.moved edited the message again: %d edits", n)
	}

	// The next gate: its own buttons; then a gate.moved that never comes,
	// and the gate after it retires the message it left live.
	const v2, v3 = "design-approval.5.1772357500000", "design-approval.7.1772357600000"
	e.publish(gateNote("loop:notify:v2", workItem, v2))
	e.fake.Wait(t, waitLong, "the second gate's message", count(2))
	m2 := e.fake.Messages(testChannel)[1]
	if !hasGateButtons(m2) {
		t.Fatalf("the second gate has no buttons: %s", m2.Blocks)
	}
	e.publish(gateNote("loop:notify:v3", workItem, v3))
	e.fake.Wait(t, waitLong, "the third gate's message", count(3))
	m3 := e.fake.Messages(testChannel)[2]
	if got := e.message(m2.TS); hasGateButtons(got) || got.Edits != 1 || !strings.Contains(got.Text, "moved on") {
		t.Errorf("the second gate's message after the third was posted (%d edits):\n%s\n%s", got.Edits, got.Text, got.Blocks)
	}
	if v, _ := slackmsg.ButtonValue(m3.Blocks, slackmsg.ApproveActionID); !strings.HasSuffix(v, v3) {
		t.Errorf("the third gate's Approve button = %q", v)
	}

	// The second gate's notification again (a replay: an edit of its
	// message) does not bring its buttons back, and leaves the third live.
	if err := in.svc.handle(ctx, gateNote("loop:notify:v2", workItem, v2), &bus.Delivery{NumDelivered: 2}); err != nil {
		t.Fatal(err)
	}
	if got := e.message(m2.TS); hasGateButtons(got) {
		t.Errorf("a replayed notification brought the buttons back:\n%s", got.Blocks)
	}
	if got := e.message(m3.TS); !hasGateButtons(got) || got.Edits != 0 {
		t.Errorf("the live gate's message was touched by a replay of an older one (%d edits)", got.Edits)
	}

	// A gate.moved for a visit this channel drew no buttons for edits
	// nothing; a question after it shows the partition moved on.
	e.publish(movedEv("loop:gate-moved:other", workItem, "review.9.1772357700000", "approved", "complete"))
	e.publish(ask("loop:ask:after", workItem, "sentinel"))
	e.fake.Wait(t, waitLong, "the sentinel", count(4))
	if got := e.message(m3.TS); !hasGateButtons(got) || got.Edits != 0 {
		t.Errorf("gate.moved of another visit touched the live gate (%d edits)", got.Edits)
	}
	e.checkAllValid()
}
