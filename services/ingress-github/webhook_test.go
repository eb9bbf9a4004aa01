package ingressgithub

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// TestWebhookRejections: every refused request gets its exact status, and
// nothing reaches the bus for any of them.
func TestWebhookRejections(t *testing.T) {
	e := newEnv(t, withOptions(func(o *Options) { o.MaxBodyBytes = 64 << 10 }))
	good := issueCommentJSON("created", 1, "alice", "OWNER", "hello")
	before := e.stored()
	tests := []struct {
		name            string
		event, delivery string
		body            []byte
		sig, ctype      string
		want            int
	}{
		{"no signature", "issue_comment", "d-1", good, "-", "application/json", http.StatusUnauthorized},
		{"wrong secret", "issue_comment", "d-2", good, sign("not-the-secret", good), "application/json", http.StatusUnauthorized},
		{"sha1 only is not accepted", "issue_comment", "d-3", good, "sha1=" + strings.Repeat("0", 40), "application/json", http.StatusUnauthorized},
		{"sha512 prefix", "issue_comment", "d-3b", good, "sha512=" + strings.Repeat("0", 128), "application/json", http.StatusUnauthorized},
		{"garbage signature", "issue_comment", "d-4", good, "sha256=zz", "application/json", http.StatusUnauthorized},
		{"signature of another body", "issue_comment", "d-5", good, sign(testSecret, []byte("{}")), "application/json", http.StatusUnauthorized},
		{"too large", "issue_comment", "d-6", []byte(`{"a":"` + pad0(70<<10) + `"}`), "", "application/json", http.StatusRequestEntityTooLarge},
		{"not JSON", "issue_comment", "d-7", []byte("not json"), "", "application/json", http.StatusBadRequest},
		{"JSON array", "issue_comment", "d-8", []byte(`[1,2]`), "", "application/json", http.StatusBadRequest},
		{"JSON string", "issue_comment", "d-9", []byte(`"x"`), "", "application/json", http.StatusBadRequest},
		{"JSON null", "issue_comment", "d-9b", []byte(`null`), "", "application/json", http.StatusBadRequest},
		{"trailing data", "issue_comment", "d-10", []byte(`{} {}`), "", "application/json", http.StatusBadRequest},
		{"empty body", "issue_comment", "d-11", nil, "", "application/json", http.StatusBadRequest},
		{"no event header", "", "d-12", good, "", "application/json", http.StatusBadRequest},
		{"bad event header", "Issue Comment", "d-13", good, "", "application/json", http.StatusBadRequest},
		{"no delivery header", "issue_comment", "", good, "", "application/json", http.StatusBadRequest},
		{"bad delivery header", "issue_comment", "a/b#c", good, "", "application/json", http.StatusBadRequest},
		{"unsupported content type", "issue_comment", "d-14", good, "", "text/plain", http.StatusUnsupportedMediaType},
		{"bad form body", "issue_comment", "d-15", []byte("payload=%zz"), "", "application/x-www-form-urlencoded", http.StatusBadRequest},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sig := tc.sig
			r := e.postTo(e.http.URL+WebhookPath, tc.event, tc.delivery, tc.body, sig, tc.ctype)
			if r.Code != tc.want {
				t.Errorf("status %d (%q), want %d", r.Code, r.Status, tc.want)
			}
		})
	}
	// Method and path.
	resp, err := http.Get(e.http.URL + WebhookPath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s = %d, want 405", WebhookPath, resp.StatusCode)
	}
	if r := e.postTo(e.http.URL+"/other", "issue_comment", "d-16", good, "", "application/json"); r.Code != http.StatusNotFound {
		t.Errorf("POST /other = %d, want 404", r.Code)
	}
	if got := e.stored(); got != before {
		t.Errorf("the inbox stored %d messages for rejected requests, want 0", got-before)
	}
	// And the same body, signed, is accepted: the rejections were about the
	// request, not the payload.
	if r := e.post("issue_comment", "d-ok", good, ""); r.Code != http.StatusAccepted {
		t.Errorf("signed request = %d %q, want 202", r.Code, r.Status)
	}
	// A form-encoded delivery (GitHub's other content type) is verified over
	// the raw body and accepted.
	form := []byte("payload=" + strings.ReplaceAll(string(issueCommentJSON("created", 2, "alice", "OWNER", "hi")), "&", "%26"))
	if r := e.postTo(e.http.URL+WebhookPath, "issue_comment", "d-form", form, "", "application/x-www-form-urlencoded"); r.Code != http.StatusAccepted {
		t.Errorf("form-encoded delivery = %d %q, want 202", r.Code, r.Status)
	}
	if strings.Contains(e.logs.String(), testSecret) {
		t.Error("the webhook secret appears in the logs")
	}
}

// TestWebhookPing: a ping is answered and publishes nothing.
func TestWebhookPing(t *testing.T) {
	e := newEnv(t)
	before := e.stored()
	r := e.post("ping", "ping-1", []byte(`{"zen":"Keep it logically awesome.","hook_id":1}`), "")
	if r.Code != http.StatusOK || r.Status != "pong" {
		t.Errorf("ping = %d %q, want 200 pong", r.Code, r.Status)
	}
	if e.stored() != before {
		t.Error("a ping was published")
	}
}

// TestWebhookBusDown: with the bus unreachable the webhook answers 503 (so
// GitHub's redelivery can succeed later) and remembers nothing; once the bus
// is back, the same delivery is accepted, once.
func TestWebhookBusDown(t *testing.T) {
	e := newEnv(t)
	body := issueCommentJSON("created", 3, "alice", "OWNER", "while down")
	before := e.stored()
	e.srv.Shutdown()
	testkit.WaitWithin(t, 30*time.Second, "the connection to drop", func() bool { return !e.conn.Connected() })
	r := e.post("issue_comment", "down-1", body, "")
	if r.Code != http.StatusServiceUnavailable || r.Header.Get("Retry-After") == "" {
		t.Fatalf("bus down: %d %q (Retry-After %q), want 503 with Retry-After", r.Code, r.Status, r.Header.Get("Retry-After"))
	}
	if err := e.svc.ready(); err == nil || !strings.Contains(err.Error(), "NATS") {
		t.Errorf("readiness with the bus down = %v, want an error naming NATS", err)
	}
	e.srv.Restart(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.conn.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.stored(); got != before {
		t.Fatalf("the inbox stored %d messages while the bus was down", got-before)
	}
	r = e.post("issue_comment", "down-1", body, "")
	if r.Code != http.StatusAccepted {
		t.Fatalf("after the bus came back: %d %q, want 202", r.Code, r.Status)
	}
	if got := e.stored(); got != before+1 {
		t.Errorf("stored %d events, want 1", got-before)
	}
}

// TestWebhookBusDownMidRequest: the connection is up but the stream does
// not answer in time (server gone between check and publish) → 503.
func TestWebhookPublishTimeout(t *testing.T) {
	e := newEnv(t, withOptions(func(o *Options) { o.PublishTimeout = 300 * time.Millisecond }))
	// The inbox is full: Discard New refuses every publish.
	ctx := context.Background()
	topo := bus.DefaultTopology()
	topo.Partitions = parts
	topo.InboxMaxBytes = 1
	if err := e.conn.Provision(ctx, topo); err != nil {
		t.Fatal(err)
	}
	before := e.stored()
	r := e.post("issue_comment", "full-1", issueCommentJSON("created", 4, "alice", "OWNER", "x"), "")
	if r.Code != http.StatusServiceUnavailable {
		t.Errorf("inbox full: %d %q, want 503", r.Code, r.Status)
	}
	if e.stored() != before {
		t.Error("stored despite 503")
	}
	if seen, _ := e.svc.intake.isSeen(ctx, deliveryKey("full-1")); seen {
		t.Error("a delivery answered 503 was remembered as seen: GitHub's redelivery would be dropped")
	}
}

// TestDuplicateDeliveryAcrossRestart: one delivery sent three times — before
// and after a restart of the service and of the JetStream server — is one
// event. After the seen bucket forgets it, Nats-Msg-Id still holds.
func TestDuplicateDeliveryAcrossRestart(t *testing.T) {
	e := newEnv(t)
	body := issueCommentJSON("created", 5, "alice", "OWNER", "same delivery")
	before := e.stored()
	if r := e.post("issue_comment", "dup-1", body, ""); r.Code != http.StatusAccepted {
		t.Fatalf("first: %d %q", r.Code, r.Status)
	}
	if r := e.post("issue_comment", "dup-1", body, ""); r.Code != http.StatusOK || r.Reason != route.DropDuplicate {
		t.Errorf("second: %d %q %q, want 200 duplicate-delivery", r.Code, r.Status, r.Reason)
	}
	// Forget the seen keys (as if the service had crashed between PubAck
	// and remembering): the stream's duplicate window still drops it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := e.svc.intake.marks.flush(ctx); err != nil {
		t.Fatal(err)
	}
	kv, err := e.conn.KV(ctx, bus.BucketSeen)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{deliveryKey("dup-1"), "gh:issue-comment:5"} {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.post("issue_comment", "dup-1", body, ""); r.Code != http.StatusAccepted {
		t.Errorf("third, seen bucket forgotten: %d %q", r.Code, r.Status)
	}
	// Restart: a new service instance, and the server restarted on its
	// store. The seen bucket (72h TTL) is what survives; the marks are
	// written just after the answer (a crash in between is decision 050's
	// gap).
	if err := e.svc.intake.marks.flush(ctx); err != nil {
		t.Fatal(err)
	}
	e.srv.Restart(t)
	if err := e.conn.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	e.svc = e.newService()
	e.http.Config.Handler = e.svc.Handler()
	if r := e.post("issue_comment", "dup-1", body, ""); r.Code != http.StatusOK || r.Reason != route.DropDuplicate {
		t.Errorf("fourth, after restart: %d %q %q, want 200 duplicate-delivery", r.Code, r.Status, r.Reason)
	}
	if got := e.stored(); got != before+1 {
		t.Errorf("one delivery sent four times stored %d events, want 1", got-before)
	}
	e.waitEvents("gh:issue-comment:5")
}

// TestRedeliveryOutsideTheDuplicateWindow: once the stream's Nats-Msg-Id
// window has passed, the seen marks written after the answer are what keep
// a redelivery — GitHub's manual redelivery, up to three days later — from
// becoming a second event: for an activity (keyed by its delivery) and a
// comment (keyed by the comment). The control shows the window is over: a
// delivery whose marks are gone is published again.
func TestRedeliveryOutsideTheDuplicateWindow(t *testing.T) {
	e := newEnvBare(t) // no consumer: the inbox keeps what it stored
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topo := bustest.FastTopology(parts)
	topo.DuplicateWindow = 500 * time.Millisecond
	if err := e.conn.Provision(ctx, topo); err != nil {
		t.Fatal(err)
	}
	activity := issuesJSON("labeled", "alice", "github.com")
	comment := issueCommentJSON("created", 41, "alice", "OWNER", "once")
	control := issueCommentJSON("created", 42, "alice", "OWNER", "control")
	before := e.stored()
	for _, d := range []struct {
		event, id string
		body      []byte
	}{{"issues", "late-activity", activity}, {"issue_comment", "late-comment", comment}, {"issue_comment", "late-control", control}} {
		if r := e.post(d.event, d.id, d.body, ""); r.Code != http.StatusAccepted {
			t.Fatalf("%s: %d %q %q", d.id, r.Code, r.Status, r.Reason)
		}
	}
	if err := e.svc.intake.marks.flush(ctx); err != nil {
		t.Fatal(err)
	}
	kv, err := e.conn.KV(ctx, bus.BucketSeen)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{deliveryKey("late-control"), "gh:issue-comment:42"} {
		if err := kv.Delete(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(1500 * time.Millisecond) // past the duplicate window
	// A new instance: nothing of the first one's memory, only the bucket.
	e.svc = e.newService()
	e.http.Config.Handler = e.svc.Handler()
	if r := e.post("issues", "late-activity", activity, ""); r.Code != http.StatusOK || r.Reason != route.DropDuplicate {
		t.Errorf("activity redelivered after the window: %d %q %q, want 200 duplicate-delivery", r.Code, r.Status, r.Reason)
	}
	if r := e.post("issue_comment", "late-comment", comment, ""); r.Code != http.StatusOK || r.Reason != route.DropDuplicate {
		t.Errorf("comment redelivered after the window: %d %q %q, want 200 duplicate-delivery", r.Code, r.Status, r.Reason)
	}
	// The same comment under another delivery id (the poller's, or a
	// second hook): its own mark drops it.
	if r := e.post("issue_comment", "late-comment-again", comment, ""); r.Code != http.StatusOK || r.Reason != route.DropDuplicateEvent {
		t.Errorf("comment under a new delivery id: %d %q %q, want 200 duplicate-event", r.Code, r.Status, r.Reason)
	}
	if got := e.stored(); got != before+3 {
		t.Errorf("stored %d events, want 3 (each once)", got-before)
	}
	if r := e.post("issue_comment", "late-control", control, ""); r.Code != http.StatusAccepted {
		t.Fatalf("control, its marks deleted: %d %q %q, want 202 (the window is over)", r.Code, r.Status, r.Reason)
	}
	if got := e.stored(); got != before+4 {
		t.Errorf("control: stored %d events in all, want 4: the duplicate window did not pass", got-before)
	}
}

// TestDropsAreNotRemembered: a dropped delivery is not marked seen, so an
// operator who fixes authorizedUsers can redeliver it (config is read per
// request, live).
func TestDropsAreNotRemembered(t *testing.T) {
	e := newEnv(t)
	body := issueCommentJSON("created", 6, "dave", "NONE", "let me in")
	if r := e.post("issue_comment", "redo-1", body, ""); r.Code != http.StatusOK || r.Reason != route.DropUnauthorized {
		t.Fatalf("unauthorized: %d %q %q", r.Code, r.Status, r.Reason)
	}
	e.setAuthorized(append(people, identityPerson("dave"))...)
	r := e.post("issue_comment", "redo-1", body, "")
	if r.Code != http.StatusAccepted {
		t.Fatalf("after authorizing: %d %q %q", r.Code, r.Status, r.Reason)
	}
	ev := e.waitEvents("gh:issue-comment:6")[0]
	if ev.GetType() != "comment.human" || ev.GetActor().GetGithub() != "dave" {
		t.Errorf("got %s by %v", ev.GetType(), ev.GetActor())
	}
}

// caseT is one routing case through the running handler.
type caseT struct {
	name   string
	event  string
	body   []byte
	status int
	drop   string
	// want lists the events: type, subject, actor login ("" none).
	want []wantEvent
	// notes that must (or, with "!", must not) appear as routing.dropped
	// reasons in the event log.
	logs []string
}

type wantEvent struct {
	typ, subject, actor string
}

func runCases(t *testing.T, e *env, cases []caseT) {
	t.Helper()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nLogs := len(e.drops())
			delivery := fmt.Sprintf("case-%s-%d", strings.ReplaceAll(tc.name, " ", "_"), i)
			before := e.stored()
			r := e.post(tc.event, delivery, tc.body, "")
			if r.Code != tc.status {
				t.Fatalf("status %d %q %q, want %d", r.Code, r.Status, r.Reason, tc.status)
			}
			if tc.drop != "" && r.Reason != tc.drop {
				t.Errorf("drop reason %q, want %q", r.Reason, tc.drop)
			}
			if got := e.stored() - before; int(got) != len(tc.want) {
				t.Errorf("stored %d events, want %d", got, len(tc.want))
			}
			if len(r.Events) != len(tc.want) && tc.status == http.StatusAccepted {
				t.Fatalf("response lists %v, want %d events", r.Events, len(tc.want))
			}
			if tc.status == http.StatusAccepted {
				evs := e.waitEvents(r.Events...)
				for j, w := range tc.want {
					ev := evs[j]
					if ev.GetType() != w.typ || ev.GetSubject() != w.subject || ev.GetActor().GetGithub() != w.actor {
						t.Errorf("event %d = %s %s actor %q, want %s %s actor %q", j, ev.GetType(), ev.GetSubject(),
							ev.GetActor().GetGithub(), w.typ, w.subject, w.actor)
					}
					if ev.GetSource() != "github" {
						t.Errorf("source %q", ev.GetSource())
					}
					if j > 0 && ev.GetCausationId() != evs[0].GetId() {
						t.Errorf("secondary event %s: causation %q, want the first event's id %q", ev.GetId(), ev.GetCausationId(), evs[0].GetId())
					}
				}
			}
			logged := e.drops()[nLogs:]
			for _, l := range tc.logs {
				if neg, ok := strings.CutPrefix(l, "!"); ok {
					if slices.Contains(logged, neg) {
						t.Errorf("log has routing.dropped %q, must not", neg)
					}
				} else if !slices.Contains(logged, l) {
					t.Errorf("log lacks routing.dropped %q (has %v)", l, logged)
				}
			}
			if tc.drop != "" && !slices.Contains(logged, tc.drop) {
				t.Errorf("drop %q not logged as routing.dropped (have %v)", tc.drop, logged)
			}
		})
	}
}

const ref15 = "github:octo/repo#15"

// TestClassification: each kind of delivery becomes exactly one catalog
// type (per work item), or a drop with its reason.
func TestClassification(t *testing.T) {
	e := newEnv(t)
	runCases(t, e, []caseT{
		{name: "authorized comment", event: "issue_comment", body: issueCommentJSON("created", 101, "alice", "OWNER", "lgtm"),
			status: 202, want: []wantEvent{{"comment.human", ref15, "alice"}}},
		{name: "authorized comment, login in other case", event: "issue_comment", body: issueCommentJSON("created", 102, "ALICE", "OWNER", "ok"),
			status: 202, want: []wantEvent{{"comment.human", ref15, "alice"}}},
		{name: "collaborator comment is mirrored without actor", event: "issue_comment", body: issueCommentJSON("created", 103, "carol", "COLLABORATOR", "fyi"),
			status: 202, want: []wantEvent{{"comment.human", ref15, ""}}},
		{name: "stranger comment", event: "issue_comment", body: issueCommentJSON("created", 104, "mallory", "NONE", "the-loop start"),
			status: 200, drop: route.DropUnauthorized},
		{name: "contributor comment", event: "issue_comment", body: issueCommentJSON("created", 105, "mallory", "CONTRIBUTOR", "hi"),
			status: 200, drop: route.DropUnauthorized},
		{name: "agent comment by the ledger login", event: "issue_comment", body: issueCommentJSON("created", 106, botLogin, "NONE", envelope.MarkSelfAuthored("progress")),
			status: 202, want: []wantEvent{{"comment.agent", ref15, ""}}},
		{name: "agent comment by an authorized poster", event: "issue_comment", body: issueCommentJSON("created", 107, "bob", "MEMBER", envelope.MarkSelfAuthored("announcement")),
			status: 202, want: []wantEvent{{"comment.agent", ref15, "bob"}}},
		{name: "edited comment", event: "issue_comment", body: issueCommentJSON("edited", 108, "alice", "OWNER", "edited"),
			status: 200, drop: route.DropCommentChanged},
		{name: "deleted comment", event: "issue_comment", body: issueCommentJSON("deleted", 109, "alice", "OWNER", "x"),
			status: 200, drop: route.DropCommentChanged},
		{name: "labeled by authorized", event: "issues", body: issuesJSON("labeled", "alice", "github.com"),
			status: 202, want: []wantEvent{{"work-item.activity", ref15, "alice"}}},
		{name: "labeled by stranger", event: "issues", body: issuesJSON("labeled", "mallory", "github.com"),
			status: 200, drop: route.DropUnauthorized},
		{name: "closed by stranger still closes", event: "issues", body: issuesJSON("closed", "mallory", "github.com"),
			status: 202, want: []wantEvent{{"work-item.activity", ref15, ""}}},
		{name: "GitHub Enterprise host in the ref", event: "issues", body: issuesJSON("opened", "alice", "ghe.corp.example"),
			status: 202, want: []wantEvent{{"work-item.activity", "github:ghe.corp.example/octo/repo#15", "alice"}}},
		{name: "PR: linked issues first, then the PR", event: "pull_request",
			body:   pullRequestJSON("opened", "alice", "Fixes #15 and closes other/lib#3", "feature/issue-20"),
			status: 202, want: []wantEvent{
				{"work-item.activity", "github:octo/repo#20", "alice"},
				{"work-item.activity", ref15, "alice"},
				{"work-item.activity", "github:other/lib#3", "alice"},
				{"work-item.activity", "github:octo/repo#21", "alice"},
			}},
		{name: "PR self reference skipped", event: "pull_request", body: pullRequestJSON("synchronize", "alice", "Fixes #21", "main"),
			status: 202, want: []wantEvent{{"work-item.activity", "github:octo/repo#21", "alice"}}},
		{name: "CI carries no actor", event: "workflow_run", body: workflowRunJSON(0),
			status: 202, want: []wantEvent{{"work-item.activity", "github:octo/repo#21", ""}, {"work-item.activity", ref15, ""}}},
		{name: "review with a body is a comment", event: "pull_request_review", body: reviewJSON(301, "alice", "approved", "Approved, nice"),
			status: 202, want: []wantEvent{{"comment.human", "github:octo/repo#21", "alice"}}},
		{name: "review without a body is activity", event: "pull_request_review", body: reviewJSON(302, "alice", "approved", ""),
			status: 202, want: []wantEvent{{"work-item.activity", "github:octo/repo#21", "alice"}}},
		{name: "disabled event", event: "push", body: []byte(`{"ref":"refs/heads/main","repository":{"full_name":"octo/repo"}}`),
			status: 200, drop: route.DropDisabledEvent},
		{name: "no repository, no work item", event: "issue_comment", body: []byte(`{"action":"created","comment":{"id":1,"body":"x","user":{"login":"alice"}}}`),
			status: 200, drop: route.DropNoWorkItem},
		{name: "wrong-typed fields", event: "issue_comment", body: []byte(`{"action":7,"issue":"x","comment":[1],"repository":{"full_name":5}}`),
			status: 200, drop: route.DropNoWorkItem},
	})
	ev := e.waitEvents("gh:issue-comment:101")[0]
	c := ev.GetComment()
	if c.GetCommentId() != 101 || c.GetAuthor() != "alice" || c.GetAuthorAssociation() != "OWNER" || c.GetBody() != "lgtm" ||
		!strings.HasSuffix(c.GetUrl(), "#issuecomment-101") {
		t.Errorf("comment body = %v", c)
	}
	if l := ev.GetLedger(); l.GetRepo() != "octo/repo" || l.GetIssueNumber() != 15 || l.GetCommentId() != 101 {
		t.Errorf("ledger ref = %v", l)
	}
	if ev.GetActor().GetSlack() != "UALICE" || ev.GetActor().GetName() != "Alice" {
		t.Errorf("actor %v: want every id of alice's entry", ev.GetActor())
	}
	if !ev.GetTime().AsTime().Equal(time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)) {
		t.Errorf("time %v, want the comment's created_at", ev.GetTime().AsTime())
	}
}

// TestActivityCarriesPayload: work-item.activity carries event name,
// action, delivery id and the payload verbatim; a payload too large for one
// bus message is replaced by a summary marked payload_truncated, and kept
// whole in the payloads object store under payload_ref.
func TestActivityCarriesPayload(t *testing.T) {
	e := newEnv(t)
	body := issuesJSON("labeled", "alice", "github.com")
	r := e.post("issues", "act-1", body, "")
	if r.Code != http.StatusAccepted {
		t.Fatalf("%d %q", r.Code, r.Status)
	}
	ev := e.waitEvents(r.Events...)[0]
	a := ev.GetGithubActivity()
	if ev.GetId() != "gh:act-1" || a.GetEvent() != "issues" || a.GetAction() != "labeled" || a.GetDeliveryId() != "act-1" || string(a.GetPayload()) != string(body) {
		t.Errorf("activity = %s %s %s %s, payload verbatim: %v", ev.GetId(), a.GetEvent(), a.GetAction(), a.GetDeliveryId(), string(a.GetPayload()) == string(body))
	}

	big := workflowRunJSON(2 << 20) // 2 MiB: over the 1 MiB NATS message limit
	r = e.post("workflow_run", "act-big", big, "")
	if r.Code != http.StatusAccepted {
		t.Fatalf("large payload: %d %q", r.Code, r.Status)
	}
	ev = e.waitEvents(r.Events...)[0]
	p, err := route.Decode(ev.GetGithubActivity().GetPayload())
	if err != nil {
		t.Fatal(err)
	}
	got := string(ev.GetGithubActivity().GetPayload())
	for _, want := range []string{`"payload_truncated":true`, fmt.Sprintf(`"payload_bytes":%d`, len(big)), `"conclusion":"failure"`, `"full_name":"octo/repo"`} {
		if !strings.Contains(got, want) {
			t.Errorf("truncated payload lacks %s: %s", want, got)
		}
	}
	if p.Action() != "completed" {
		t.Errorf("truncated payload action %q", p.Action())
	}
	// The whole payload is kept in the object store, and the event names it.
	ref := ev.GetGithubActivity().GetPayloadRef()
	whole, err := e.conn.GetObject(context.Background(), ref)
	if err != nil || !bytes.Equal(whole, big) {
		t.Errorf("payload_ref %q holds %d bytes (%v), want the %d-byte delivery", ref, len(whole), err, len(big))
	}
}

func identityPerson(login string) identity.Person { return identity.Person{GitHub: login} }

// TestIntakeLatencyMetric: every webhook request is timed from its arrival
// to its answer, by result, in loop_ingress_github_intake_seconds; pings are
// not deliveries and are not counted.
func TestIntakeLatencyMetric(t *testing.T) {
	e := newEnv(t)
	body := issueCommentJSON("created", 51, "alice", "OWNER", "timed")
	e.post("issue_comment", "timed-1", body, "")          // accepted
	e.post("issue_comment", "timed-1", body, "")          // dropped: duplicate
	e.post("issue_comment", "timed-2", body, "sha256=00") // refused: bad signature
	e.post("ping", "timed-3", []byte(`{"zen":"x"}`), "")  // not counted
	counts := map[string]uint64{}
	mfs, err := e.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "loop_ingress_github_intake_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" {
					counts[l.GetValue()] += m.GetHistogram().GetSampleCount()
				}
			}
		}
	}
	want := map[string]uint64{"accepted": 1, "dropped": 1, "refused": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) {
		t.Errorf("intake latency samples by result = %v, want %v", counts, want)
	}
}
