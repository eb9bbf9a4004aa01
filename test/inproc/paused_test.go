package inproc

import (
	"testing"
)

// decision 023: an authorized member's Slack approval reaching a work item
// whose session is paused is recorded on GitHub but settled without moving the
// gate, and the member is told so in the thread; once the session is resumed
// the same answer passes the gate.
func TestGateAnswerWhileSessionPaused(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("paused gate")
	w.toRequirementsGate(number, r, requirementsDoc)
	root := w.thread(r)
	w.comment(number, alice, "the-loop pause")
	w.waitLog("session.paused", map[string]any{"work_item": r})

	w.say(aliceSlack, root, "Approved, ship it")
	w.waitSlack(root, "Gate not moved: session paused", "requirements-approval", "did not move", "the-loop resume", "answer again")
	w.waitLog("dispatch.dropped", map[string]any{"work_item": r, "reason": "session-paused", "event_type": "ledger.record"})
	if st := w.state(r); st.Current != "requirements-approval" || len(st.ApprovedBy) != 0 {
		t.Fatalf("an answer to a paused session moved the gate: %+v", st)
	}

	w.comment(number, alice, "the-loop resume")
	w.waitLog("session.resumed", map[string]any{"work_item": r})
	w.say(aliceSlack, root, "Approved, ship it")
	if st := w.waitNode(r, "design"); len(st.ApprovedBy) != 1 || st.ApprovedBy[0].Login != alice {
		t.Errorf("approvedBy after the resumed answer = %+v", st.ApprovedBy)
	}
}
