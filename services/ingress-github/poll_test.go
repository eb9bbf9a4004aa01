package ingressgithub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

const pollToken = "poll-token"

// fakeGet reads a REST object from the fake as GitHub would send it.
func fakeGet(t *testing.T, gh *ghfake.Server, path string) map[string]any {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, gh.URL()+path, nil)
	req.Header.Set("Authorization", "Bearer "+pollToken)
	resp, err := gh.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// webhookFor is the issue_comment delivery GitHub sends for comment c: the
// REST issue and comment objects plus the repository and sender.
func webhookFor(t *testing.T, gh *ghfake.Server, c ghfake.Comment) []byte {
	t.Helper()
	issue := fakeGet(t, gh, fmt.Sprintf("repos/%s/issues/%d", c.Repo, c.IssueNumber))
	comment := fakeGet(t, gh, fmt.Sprintf("repos/%s/issues/comments/%d", c.Repo, c.ID))
	return mustJSON(map[string]any{
		"action":     "created",
		"issue":      issue,
		"comment":    comment,
		"repository": map[string]any{"full_name": c.Repo, "html_url": "https://github.com/" + c.Repo},
		"sender":     comment["user"],
	})
}

// pollLabelledIssue is GitHub holding octo/repo with one labelled issue
// (#1, by alice), and an env polling it.
func pollLabelledIssue(t *testing.T) (*ghfake.Server, *env) {
	gh := ghfake.New(t)
	gh.AddRepo("octo/repo")
	gh.AddToken(pollToken, botLogin)
	gh.AddIssue("octo/repo", "alice", "Work", "", DefaultConfig().Label)
	return gh, pollEnv(t, gh, time.Now)
}

func pollEnv(t *testing.T, gh *ghfake.Server, now func() time.Time) *env {
	return newEnv(t,
		withConfig(func(c *Config) {
			c.Token = config.NewSecret(pollToken)
			c.APIURL = gh.URL()
			c.Mode, c.PollRepos = string(ModeBoth), "octo/repo"
		}),
		withOptions(func(o *Options) { o.Now = now }))
}

// TestPollAndWebhookSameEventsOnce: the poller and the webhook see the same
// comments; each comment is one event on the bus, whichever saw it first,
// and the poller's event equals the one the webhook's payload routes to.
func TestPollAndWebhookSameEventsOnce(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddRepo("octo/repo")
	gh.AddToken(pollToken, botLogin)
	gh.SetAuthorAssociation("octo/repo", "carol", "COLLABORATOR")
	gh.AddIssue("octo/repo", "alice", "Work", "please", DefaultConfig().Label)
	gh.AddIssue("octo/repo", "alice", "Not labelled", "")
	// Polling "began" an hour from now, so what exists at the first look
	// is history: the first cycle must not replay it.
	old := gh.AddComment("octo/repo", 1, "alice", "the-loop stop (old)")
	e := pollEnv(t, gh, func() time.Time { return time.Now().Add(time.Hour) })
	p, err := e.svc.newPoller()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cycle := func() {
		t.Helper()
		if err := p.Cycle(ctx); err != nil {
			t.Fatalf("cycle: %v", err)
		}
	}

	before := e.stored()
	cycle()
	if got := e.stored() - before; got != 1 {
		t.Fatalf("first cycle stored %d events, want 1 (the label's first sight)", got)
	}
	if slices.ContainsFunc(e.logs.Events("bus.published"), func(r map[string]any) bool {
		return r["event_id"] == fmt.Sprintf("gh:issue-comment:%d", old.ID)
	}) {
		t.Error("the first cycle replayed a comment made before polling began")
	}

	c1 := gh.AddComment("octo/repo", 1, "alice", "the-loop start")
	c2 := gh.AddComment("octo/repo", 1, "carol", "looks fine")
	c3 := gh.AddComment("octo/repo", 1, "mallory", "the-loop cleanup")
	c4 := gh.AddComment("octo/repo", 1, botLogin, envelope.MarkSelfAuthored("working on it"))
	id := func(c ghfake.Comment) string { return fmt.Sprintf("gh:issue-comment:%d", c.ID) }

	// The webhook sees c1 first.
	if r := e.post("issue_comment", "wh-1", webhookFor(t, gh, c1), ""); r.Code != http.StatusAccepted || !slices.Equal(r.Events, []string{id(c1)}) {
		t.Fatalf("webhook c1: %d %q %v", r.Code, r.Reason, r.Events)
	}
	cycle() // the poller sees c1 (already on the bus), c2, c3 (dropped), c4
	// Then the webhook delivers c2, c3 and c4 late.
	for i, c := range []ghfake.Comment{c2, c3, c4} {
		r := e.post("issue_comment", fmt.Sprintf("wh-%d", i+2), webhookFor(t, gh, c), "")
		want := route.DropDuplicateEvent
		if c.ID == c3.ID {
			want = route.DropUnauthorized
		}
		if r.Code != http.StatusOK || r.Reason != want {
			t.Errorf("late webhook for comment %d: %d %q, want 200 %s", c.ID, r.Code, r.Reason, want)
		}
	}
	cycle() // nothing new
	if got := e.stored() - before; got != 4 {
		t.Errorf("stored %d events, want 4: presence, c1 (webhook), c2 and c4 (poll), each once", got)
	}
	evs := e.waitEvents(id(c1), id(c2), id(c4))
	if evs[0].GetType() != "comment.human" || evs[0].GetActor().GetGithub() != "alice" ||
		evs[1].GetType() != "comment.human" || evs[1].GetActor() != nil ||
		evs[2].GetType() != "comment.agent" {
		t.Errorf("types/actors: %s %v, %s %v, %s", evs[0].GetType(), evs[0].GetActor(), evs[1].GetType(), evs[1].GetActor(), evs[2].GetType())
	}
	// The poller's events equal what the webhook's payloads route to.
	for i, c := range []ghfake.Comment{c2, c4} {
		body := webhookFor(t, gh, c)
		pl, err := route.Decode(body)
		if err != nil {
			t.Fatal(err)
		}
		dec := route.Route(route.Delivery{Event: "issue_comment", DeliveryID: "x", Payload: body, Received: time.Now()}, pl, e.svc.policy())
		if len(dec.Events) != 1 || !proto.Equal(dec.Events[0], evs[i+1]) {
			t.Errorf("comment %d: poll event\n  %v\nwebhook event\n  %v", c.ID, evs[i+1], dec.Events)
		}
	}
	// The last cycle cost no rate limit: the listing was a 304.
	reqs := gh.Requests()
	var last ghfake.Request
	for _, r := range reqs {
		if r.Path == "/repos/octo/repo/issues" {
			last = r
		}
	}
	if last.Status != http.StatusNotModified {
		t.Errorf("last listing = %d, want 304", last.Status)
	}

	// A close is noticed and raised once.
	gh.CloseIssue("octo/repo", 1)
	cycle()
	cycle()
	if got := e.stored() - before; got != 5 {
		t.Fatalf("after the close: %d events, want 5", got)
	}
	var closeID string
	for _, r := range e.logs.Events("bus.published") {
		if s, _ := r["event_id"].(string); strings.HasPrefix(s, "gh:poll-close-") {
			closeID = s
		}
	}
	ev := e.waitEvents(closeID)[0]
	a := ev.GetGithubActivity()
	if ev.GetSubject() != "github:octo/repo#1" || a.GetEvent() != "issues" || a.GetAction() != "closed" || ev.GetActor() != nil {
		t.Errorf("close event: %s %s %s actor %v", ev.GetSubject(), a.GetEvent(), a.GetAction(), ev.GetActor())
	}
}

// TestPollCursorSurvivesRestart: a new poller (after a restart) resumes
// from the cursor in KV and republishes nothing.
func TestPollCursorSurvivesRestart(t *testing.T) {
	gh, e := pollLabelledIssue(t)
	ctx := context.Background()
	p1, _ := e.svc.newPoller()
	if err := p1.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	gh.AddComment("octo/repo", 1, "alice", "one")
	if err := p1.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	n := e.stored()
	e.svc = e.newService(withConfig(func(c *Config) {
		c.Token = config.NewSecret(pollToken)
		c.APIURL = gh.URL()
		c.Mode, c.PollRepos = string(ModePoll), "octo/repo"
	}))
	p2, _ := e.svc.newPoller()
	if err := p2.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if e.stored() != n {
		t.Errorf("a restarted poller stored %d events again", e.stored()-n)
	}
	gh.AddComment("octo/repo", 1, "bob", "two")
	if err := p2.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if e.stored() != n+1 {
		t.Errorf("a new comment after the restart: %d events, want 1", e.stored()-n)
	}
}

// TestPollPagesAndFailures: a comment listing longer than a page is read
// page by page, and a refused answer (a primary rate limit on the listing,
// a 502 on the comments) fails the cycle without moving the cursor, so the
// next cycle delivers what was missed, each comment once.
func TestPollPagesAndFailures(t *testing.T) {
	gh, e := pollLabelledIssue(t)
	p, err := e.svc.newPoller()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	before := e.stored()
	const comments = 130 // two pages of 100
	for i := range comments {
		gh.AddComment("octo/repo", 1, "alice", fmt.Sprintf("comment %d", i))
	}

	gh.Inject(ghfake.Rule{Method: http.MethodGet, Path: "/repos/*/*/issues", Status: http.StatusForbidden, Times: 1,
		Header: http.Header{"X-Ratelimit-Remaining": {"0"}, "X-Ratelimit-Reset": {fmt.Sprint(time.Now().Add(-time.Second).Unix())}}})
	if err := p.Cycle(ctx); err == nil {
		t.Fatal("a cycle whose listing was rate limited succeeded")
	}
	gh.Inject(ghfake.Rule{Method: http.MethodGet, Path: "/repos/*/*/issues/*/comments", Status: http.StatusBadGateway, Times: 1})
	if err := p.Cycle(ctx); err == nil {
		t.Fatal("a cycle whose comment listing failed succeeded")
	}
	if got := e.stored() - before; got != 0 {
		t.Fatalf("failed cycles stored %d events", got)
	}

	if err := p.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	if got := e.stored() - before; got != comments {
		t.Errorf("stored %d events, want %d: each comment once", got, comments)
	}
	var second bool
	for _, r := range gh.Requests() {
		if r.Path == "/repos/octo/repo/issues/1/comments" && r.Status == http.StatusOK && strings.Contains(r.Query, "page=2") {
			second = true
		}
	}
	if !second {
		t.Error("the comments' second page was never read")
	}
}
