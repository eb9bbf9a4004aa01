package dispatcher

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/excerpt"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/prompt"
)

// commentOf is the comment.human ingress-github publishes for a comment
// delivery of event: the comment (or review) as the event carries it.
func commentOf(t *testing.T, event string, payload []byte) *loopv1.Event {
	t.Helper()
	var p struct {
		Comment, Review *struct {
			ID      int64                  `json:"id"`
			Body    string                 `json:"body"`
			HTMLURL string                 `json:"html_url"`
			Path    string                 `json:"path"`
			Line    *int64                 `json:"line"`
			State   string                 `json:"state"`
			User    struct{ Login string } `json:"user"`
		}
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		t.Fatal(err)
	}
	c, kind := p.Comment, "issue-comment"
	switch event {
	case "pull_request_review_comment":
		kind = "review-comment"
	case "pull_request_review":
		c, kind = p.Review, "review"
	}
	cm := &loopv1.Comment{CommentId: c.ID, Url: c.HTMLURL, Author: c.User.Login, Body: c.Body, Path: c.Path, Line: c.Line}
	if event == "pull_request_review" {
		cm.ReviewState = c.State
	}
	return &loopv1.Event{Id: fmt.Sprintf("gh:%s:%d", kind, c.ID), Source: "github", Type: string(catalog.CommentHuman),
		Subject: "github:octo/repo#2", Time: evTime, Actor: person(alice), Body: &loopv1.Event_Comment{Comment: cm}}
}

// TestCommentExcerptIsTheDeliverys: a comment reaches the dispatcher as an
// event body, not as its webhook payload, and the session is still shown
// exactly the excerpt of the delivery: an inline comment with its path and
// line before its body, a review with its state, for every comment delivery
// among GitHub's examples (a review without a body is given one: only then
// is it a comment).
func TestCommentExcerptIsTheDeliverys(t *testing.T) {
	root := testkit.SharedTestdata(t, "github-webhooks")
	s := &Service{tmpl: templates{have: true, t: prompt.Defaults()}}
	n := 0
	for _, event := range []string{"issue_comment", "pull_request_review_comment", "pull_request_review"} {
		files, err := filepath.Glob(filepath.Join(root, event, "*.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if event == "pull_request_review" {
				var p map[string]any
				if err := json.Unmarshal(raw, &p); err != nil {
					t.Fatal(err)
				}
				if r, _ := p["review"].(map[string]any); r != nil && r["body"] == nil {
					r["body"] = "Please split this in two."
					raw, _ = json.Marshal(p)
				}
			}
			in, ok := s.read(commentOf(t, event, raw))
			if !ok {
				t.Fatalf("%s: a comment is not for sessions", f)
			}
			want, _ := excerpt.Excerpt(event, raw)
			got, _ := excerpt.Excerpt(in.excerptEvent, in.payload)
			if got != want {
				t.Errorf("%s: the session's excerpt differs from the delivery's:\n got %s\nwant %s", filepath.Base(f), got, want)
			}
			if event == "pull_request_review_comment" && !strings.Contains(got, `"path"`) {
				t.Errorf("%s: no anchor in %s", filepath.Base(f), got)
			}
			n++
		}
	}
	if n < 10 {
		t.Fatalf("only %d comment deliveries checked", n)
	}
}

// TestRecordExcerptIsTheDeliverys: a relayed record is shown as GitHub
// delivered it — its poster, its whole body — like any other comment.
func TestRecordExcerptIsTheDeliverys(t *testing.T) {
	s := &Service{tmpl: templates{have: true, t: prompt.Defaults()}}
	ev := relayed("github:octo/repo#3", 41, person(alice), "the-loop pause")
	in, ok := s.read(ev)
	if !ok {
		t.Fatal("a relayed control record is not for sessions")
	}
	c := ev.GetLedgerRecord().GetComment()
	raw, _ := json.Marshal(map[string]any{"action": "created", "comment": map[string]any{
		"id": c.GetCommentId(), "html_url": c.GetUrl(), "body": c.GetBody(), "user": map[string]any{"login": c.GetAuthor()}}})
	want, _ := excerpt.Excerpt("issue_comment", raw)
	if got, _ := excerpt.Excerpt(in.excerptEvent, in.payload); got != want {
		t.Errorf("record excerpt:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(in.body, "the-loop pause") || strings.Contains(in.body, "the-loop:envelope") || !in.relayed {
		t.Errorf("the control seam reads %q (relayed %v), want the relayed text", in.body, in.relayed)
	}
}

// TestOversizedActivityShowsTheWholePayload: an activity too large for one
// message carries a summary and a reference to the whole payload in the
// object store; the session is shown the excerpt of the whole payload, and
// of the summary only once the object is gone.
func TestOversizedActivityShowsTheWholePayload(t *testing.T) {
	e := newEnv(t, nil)
	ref := "github:octo/repo#31"
	sess := e.start(ref, 310)

	run := map[string]any{"id": 7, "name": "lint", "status": "completed", "conclusion": "failure",
		"html_url": "https://github.com/octo/repo/runs/7", "details_url": "https://ci.example/7",
		"output":      map[string]any{"title": "Lint", "summary": "2 findings", "text": strings.Repeat("x", 1000)},
		"check_suite": map[string]any{"pull_requests": []any{map[string]any{"number": 31}}}}
	whole, _ := json.Marshal(map[string]any{"action": "completed", "check_run": run,
		"repository": map[string]any{"full_name": "octo/repo"}, "sender": map[string]any{"login": alice}})
	sum := sha256.Sum256(whole)
	name := "github-" + hex.EncodeToString(sum[:])
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kept, err := e.pub.PutObject(ctx, bus.ObjectPayloads, name, whole)
	if err != nil {
		t.Fatal(err)
	}
	summary := func(delivery, payloadRef string) *loopv1.Event {
		ev := activity(ref, delivery, "check_run", "completed", map[string]any{
			"payload_truncated": true, "check_run": map[string]any{"id": 7, "name": "lint", "status": "completed"}})
		ev.GetGithubActivity().PayloadRef = payloadRef
		return ev
	}
	e.publish(summary("big-1", kept))
	want, _ := excerpt.Excerpt("check_run", whole)
	testkit.WaitFor(t, "the whole payload's excerpt typed", func() bool {
		for _, in := range e.inputsOf(sess.HarnessSessionID) {
			if strings.Contains(in, want) {
				return true
			}
		}
		return false
	})

	// Gone (older than the bucket's TTL): the summary is what is left.
	gone := summary("big-2", bus.ObjectPayloads+"/github-"+strings.Repeat("0", 64))
	e.publish(gone)
	in, _ := e.svc.read(gone)
	left, _ := excerpt.Excerpt("check_run", in.payload)
	testkit.WaitFor(t, "the summary's excerpt typed", func() bool {
		for _, in := range e.inputsOf(sess.HarnessSessionID) {
			if strings.Contains(in, left) && strings.Contains(in, "big-2") {
				return true
			}
		}
		return false
	})
}
