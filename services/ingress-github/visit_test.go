package ingressgithub

import (
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/envelope"
)

// TestRecordCarriesGateVisit: the gate visit of a button answer, signed into
// the record's envelope, reaches the dispatcher on the ledger.record read
// back, and only from a verified envelope: the same words with an edited
// visit are no record at all.
func TestRecordCarriesGateVisit(t *testing.T) {
	e := newEnv(t)
	const visit = "requirements-approval.3.1700000000000"
	at := envelope.Binding{Repo: "octo/repo", Number: 15}
	body, err := envelope.SealLedger([]byte(testKey), envelope.Ledger{ID: "slack:EvVisit", Type: "gate.feedback", Source: "slack",
		Actor:        envelope.LedgerActor{GitHub: "alice", Slack: "UALICE"},
		Conversation: envelope.LedgerConversation{Channel: "C1", ThreadTS: "1700000000.000100"}, Visit: visit}, nil, at,
		func(env string) string { return "Approved — LGTM\n\n" + env })
	if err != nil {
		t.Fatal(err)
	}
	moved := strings.Replace(body, ".3.1700000000000", ".5.1700000000000", 1)
	runCases(t, e, []caseT{
		{name: "a signed button answer", event: "issue_comment", body: issueCommentJSON("created", 701, botLogin, "NONE", body),
			status: 202, want: []wantEvent{{"ledger.record", ref15, "alice"}}},
	})
	if got := e.waitEvents("gh:issue-comment:701")[0].GetLedgerRecord().GetGateVisit(); got != visit {
		t.Errorf("record's gate visit = %q, want %q", got, visit)
	}
	if _, err := envelope.ParseLedger([]byte(testKey), at, moved); err == nil {
		t.Error("an envelope whose visit was edited still verifies")
	}
}
