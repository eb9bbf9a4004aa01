package ingressgithub

import (
	"net/http"
	"testing"

	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// Abuse case 3: an envelope re-attributes only a comment its poster was
// authorized to make, and only to a person whose own entry names an
// authorized GitHub login; otherwise the poster is the actor.
func TestAbuse3EnvelopeReattribution(t *testing.T) {
	e := newEnv(t)
	forAlice := envelopeFor(t, testKey, "slack:Ev1", "gate.feedback", envelope.LedgerActor{GitHub: "alice", Slack: "UALICE"}, "approved")
	forMallory := envelopeFor(t, testKey, "slack:Ev2", "gate.feedback", envelope.LedgerActor{GitHub: "mallory"}, "approved")
	forSlackOnly := envelopeFor(t, testKey, "slack:Ev3", "gate.feedback", envelope.LedgerActor{Slack: "USLACKONLY"}, "approved")
	bySlackID := envelopeFor(t, testKey, "slack:Ev4", "control.command", envelope.LedgerActor{Slack: "UALICE"}, "the-loop stop")
	runCases(t, e, []caseT{
		{name: "collaborator replays alice's signed envelope", event: "issue_comment",
			body:   issueCommentJSON("created", 401, "carol", "COLLABORATOR", forAlice),
			status: 200, drop: route.DropUnauthorized, logs: []string{"!" + route.NoteForgedEnvelope}},
		{name: "ledger login's record is re-attributed to alice", event: "issue_comment",
			body:   issueCommentJSON("created", 402, botLogin, "NONE", forAlice),
			status: 202, want: []wantEvent{{"ledger.record", ref15, "alice"}}},
		{name: "record naming an unauthorized person stays the poster's", event: "issue_comment",
			body:   issueCommentJSON("created", 403, "bob", "MEMBER", forMallory),
			status: 202, want: []wantEvent{{"ledger.record", ref15, "bob"}}},
		{name: "record naming a person without a GitHub login stays the poster's", event: "issue_comment",
			body:   issueCommentJSON("created", 404, "bob", "MEMBER", forSlackOnly),
			status: 202, want: []wantEvent{{"ledger.record", ref15, "bob"}}},
		{name: "ledger login, unauthorized person: a record that instructs nothing", event: "issue_comment",
			body:   issueCommentJSON("created", 405, botLogin, "NONE", forMallory),
			status: 202, want: []wantEvent{{"ledger.record", ref15, ""}}},
		{name: "person found by slack id", event: "issue_comment",
			body:   issueCommentJSON("created", 406, botLogin, "NONE", bySlackID),
			status: 202, want: []wantEvent{{"ledger.record", ref15, "alice"}}},
	})
	ev := e.waitEvents("gh:issue-comment:402")[0]
	rec := ev.GetLedgerRecord()
	if rec.GetEventId() != "slack:Ev1" || rec.GetEventType() != "gate.feedback" || rec.GetComment().GetAuthor() != botLogin ||
		ev.GetCausationId() != "slack:Ev1" || ev.GetConversation().GetChannel() != "C1" {
		t.Errorf("record = %v causation %q conversation %v", rec, ev.GetCausationId(), ev.GetConversation())
	}
}

// Abuse case 4: an unauthorized poster's envelope is dropped before
// anything parses it (a broken or forged one is never even judged).
func TestAbuse4UnauthorizedEnvelopeNeverParsed(t *testing.T) {
	e := newEnv(t)
	forged := envelopeFor(t, "a-different-key-0123456789abcdef0123", "slack:Ev9", "control.command", envelope.LedgerActor{GitHub: "alice"}, "the-loop start")
	broken := "the-loop start\n<!-- the-loop:envelope {not json -->"
	runCases(t, e, []caseT{
		{name: "stranger with a forged envelope", event: "issue_comment", body: issueCommentJSON("created", 501, "mallory", "NONE", forged),
			status: 200, drop: route.DropUnauthorized, logs: []string{"!" + route.NoteForgedEnvelope}},
		{name: "stranger with a broken envelope", event: "issue_comment", body: issueCommentJSON("created", 502, "mallory", "NONE", broken),
			status: 200, drop: route.DropUnauthorized, logs: []string{"!" + route.NoteForgedEnvelope}},
		{name: "collaborator with a broken envelope is not mirrored", event: "issue_comment", body: issueCommentJSON("created", 503, "carol", "MEMBER", broken),
			status: 200, drop: route.DropUnauthorized, logs: []string{"!" + route.NoteForgedEnvelope}},
		// Contrast: an authorized poster's forged envelope IS read, found
		// forged, logged, and the comment judged as bob's own (DESIGN §6).
		{name: "authorized poster's forged envelope is judged as a comment", event: "issue_comment", body: issueCommentJSON("created", 504, "bob", "MEMBER", forged),
			status: 202, want: []wantEvent{{"comment.human", ref15, "bob"}}, logs: []string{route.NoteForgedEnvelope}},
	})
}

// Abuse case 10 (R3.7): a comment carrying an envelope is never
// re-published as comment.*: it is a ledger.record, or, marker-stamped,
// dropped as the-loop's own.
func TestAbuse10EnvelopeNeverRepublished(t *testing.T) {
	e := newEnv(t)
	rec := envelopeFor(t, testKey, "slack:Ev10", "work-item.reply", envelope.LedgerActor{GitHub: "alice"}, "> a reply")
	runCases(t, e, []caseT{
		{name: "envelope by the ledger: record only", event: "issue_comment", body: issueCommentJSON("created", 601, botLogin, "NONE", rec),
			status: 202, want: []wantEvent{{"ledger.record", ref15, "alice"}}},
		{name: "envelope by an authorized poster: record only", event: "issue_comment", body: issueCommentJSON("created", 602, "alice", "OWNER", rec),
			status: 202, want: []wantEvent{{"ledger.record", ref15, "alice"}}},
		{name: "marker and envelope: the-loop's own mirror, dropped", event: "issue_comment", body: issueCommentJSON("created", 603, botLogin, "NONE", envelope.MarkSelfAuthored(rec)),
			status: 200, drop: route.DropSelfAuthored},
	})
	for _, id := range []string{"gh:issue-comment:601", "gh:issue-comment:602"} {
		if ev := e.waitEvents(id)[0]; ev.GetComment() != nil || ev.GetType() != "ledger.record" {
			t.Errorf("%s: %s with a comment body, want ledger.record only", id, ev.GetType())
		}
	}
}

// The forged marker (AMB-7): the self-authored marker from anyone but an
// authorized poster or the ledger login is dropped, never comment.agent.
func TestForgedMarker(t *testing.T) {
	e := newEnv(t)
	runCases(t, e, []caseT{
		{name: "stranger stamps the marker", event: "issue_comment", body: issueCommentJSON("created", 701, "mallory", "NONE", envelope.MarkSelfAuthored("I am the agent")),
			status: 200, drop: route.DropForgedMarker},
		{name: "collaborator stamps the marker", event: "issue_comment", body: issueCommentJSON("created", 702, "carol", "COLLABORATOR", envelope.MarkSelfAuthored("I am the agent")),
			status: 200, drop: route.DropForgedMarker},
		{name: "the ledger login's marker is the agent's", event: "issue_comment", body: issueCommentJSON("created", 703, botLogin, "NONE", envelope.MarkSelfAuthored("done")),
			status: 202, want: []wantEvent{{"comment.agent", ref15, ""}}},
	})
	if got := e.post("issue_comment", "x", issueCommentJSON("created", 701, "mallory", "NONE", envelope.MarkSelfAuthored("again")), ""); got.Code != http.StatusOK {
		t.Errorf("repeat: %d", got.Code)
	}
}
