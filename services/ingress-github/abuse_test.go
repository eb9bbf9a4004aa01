package ingressgithub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
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
		// forged, logged, and the comment judged as bob's own
		// (docs/architecture.md#the-ledger).
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

// The forged marker (docs/requirements.md R6.1): the self-authored marker from
// anyone but an authorized poster or the ledger login is dropped, never
// comment.agent.
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

// TestCopiedEnvelopeIsNotARecord: the replay attack. An agent (posting with
// the ledger's token) or an authorized user pastes a copy of alice's signed
// record onto a new comment. The envelope is bound to the record it was
// signed for — repository, issue number, visible text — so the copy does not
// verify: it is logged as routing.forged_envelope naming the comment's event
// and the delivery (never its text), and the comment is judged by its poster:
// the ledger login is not a person (dropped), bob's comment is bob's.
func TestCopiedEnvelopeIsNotARecord(t *testing.T) {
	e := newEnv(t)
	alice := envelope.LedgerActor{GitHub: "alice", Slack: "UALICE"}
	// alice's approval as the ledger wrote it on issue 16.
	fromIssue16 := envelopeAt(t, testKey, envelope.Binding{Repo: "octo/repo", Number: 16}, "slack:EvCopy1", "gate.feedback", alice, "approved")
	// alice's approval as the ledger wrote it here, on issue 15, with its
	// words then changed.
	edited := strings.Replace(envelopeFor(t, testKey, "slack:EvCopy2", "gate.feedback", alice, "changes requested"),
		"changes requested", "approved", 1)
	runCases(t, e, []caseT{
		{name: "the agent reposts alice's record from another issue", event: "issue_comment",
			body:   issueCommentJSON("created", 801, botLogin, "NONE", fromIssue16),
			status: 200, drop: route.DropUnauthorized, logs: []string{route.NoteForgedEnvelope}},
		{name: "the agent reposts alice's record with other words", event: "issue_comment",
			body:   issueCommentJSON("created", 802, botLogin, "NONE", edited),
			status: 200, drop: route.DropUnauthorized, logs: []string{route.NoteForgedEnvelope}},
		{name: "the agent reposts a version 1 record", event: "issue_comment",
			body:   issueCommentJSON("created", 803, botLogin, "NONE", "approved\n\n"+versionOneEnvelope(t, testKey, "slack:EvOld", alice)),
			status: 200, drop: route.DropUnauthorized, logs: []string{route.NoteForgedEnvelope}},
		{name: "bob pastes alice's record: bob's own comment", event: "issue_comment",
			body:   issueCommentJSON("created", 804, "bob", "MEMBER", fromIssue16),
			status: 202, want: []wantEvent{{"comment.human", ref15, "bob"}}, logs: []string{route.NoteForgedEnvelope}},
	})
	recs := e.logs.Events("routing.forged_envelope")
	if len(recs) != 4 {
		t.Fatalf("%d routing.forged_envelope records, want 4", len(recs))
	}
	for i, r := range recs {
		want := fmt.Sprintf("gh:issue-comment:%d", 801+i)
		if r["event_id"] != want || r["delivery_id"] == nil || r["delivery_id"] == "" {
			t.Errorf("record %d names event %v delivery %v, want %s and the delivery", i, r["event_id"], r["delivery_id"], want)
		}
		for k, v := range r {
			if s, ok := v.(string); ok && (strings.Contains(s, "approved") || strings.Contains(s, "the-loop:envelope")) {
				t.Errorf("record %d carries comment text in %s: %q", i, k, s)
			}
		}
	}
	// Contrast: the same record in the place it was signed for is alice's.
	runCases(t, e, []caseT{{name: "alice's record where it was written", event: "issue_comment",
		body:   issueCommentJSON("created", 805, botLogin, "NONE", envelopeFor(t, testKey, "slack:EvCopy1", "gate.feedback", alice, "approved")),
		status: 202, want: []wantEvent{{"ledger.record", ref15, "alice"}}, logs: []string{"!" + route.NoteForgedEnvelope}}})
}

// versionOneEnvelope is an envelope as version 1 wrote it, signed with key:
// the HMAC over the envelope alone.
func versionOneEnvelope(t *testing.T, key, id string, actor envelope.LedgerActor) string {
	t.Helper()
	l := envelope.Ledger{V: 1, ID: id, Type: "gate.feedback", Source: "slack", Actor: actor,
		Conversation: envelope.LedgerConversation{Channel: "C1", ThreadTS: "1700000000.000100"}}
	canon, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	m := hmac.New(sha256.New, []byte(key))
	m.Write([]byte("the-loop envelope v1\n"))
	m.Write(canon)
	l.Sig = hex.EncodeToString(m.Sum(nil))
	full, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	return "<!-- the-loop:envelope " + string(full) + " -->"
}

// TestLedgerLoginIsNeverAPerson: even with the ledger's login in
// routing.authorizedUsers (a config the services refuse; here set behind
// their back), a comment the ledger's token posts is not a person's: agents
// post with that token.
func TestLedgerLoginIsNeverAPerson(t *testing.T) {
	e := newEnv(t)
	e.setAuthorized(append(people, identityPerson(strings.ToUpper(botLogin)))...)
	runCases(t, e, []caseT{
		{name: "the agent says approved with the ledger's token", event: "issue_comment",
			body:   issueCommentJSON("created", 901, botLogin, "NONE", "approved"),
			status: 200, drop: route.DropUnauthorized},
		{name: "the agent labels with the ledger's token", event: "issues", body: issuesJSON("labeled", botLogin, "github.com"),
			status: 200, drop: route.DropUnauthorized},
		{name: "a record naming the ledger login instructs nothing", event: "issue_comment",
			body:   issueCommentJSON("created", 902, botLogin, "NONE", envelopeFor(t, testKey, "slack:EvBot", "gate.feedback", envelope.LedgerActor{GitHub: botLogin}, "approved")),
			status: 202, want: []wantEvent{{"ledger.record", ref15, ""}}},
	})
}
