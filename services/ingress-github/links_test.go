package ingressgithub

import (
	"context"
	"net/http"
	"testing"

	"github.com/the-loop/bus/pkg/links"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestLinkedPullRequestReachesItsWorkItem: a pull request an agent opened
// names no issue GitHub would link (no closing keyword, no issue-N branch);
// once its session linked it (package pkg/links), the pull request's review
// reaches the linked work item as well as the pull request, the work item
// first; an unlinked pull request's review reaches the pull request alone.
func TestLinkedPullRequestReachesItsWorkItem(t *testing.T) {
	e := newEnv(t)
	r := e.post("pull_request_review", "rev-unlinked", reviewJSON(401, "alice", "approved", "Looks right"), "")
	if r.Code != http.StatusAccepted {
		t.Fatalf("%d %q", r.Code, r.Status)
	}
	evs := e.waitEvents(r.Events...)
	if len(evs) != 1 || evs[0].GetSubject() != "github:octo/repo#21" {
		t.Fatalf("unlinked review reached %v", subjects(evs))
	}

	ls, err := links.Open(context.Background(), e.conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Add(context.Background(), "github:octo/repo#21", "github:octo/repo#15"); err != nil {
		t.Fatal(err)
	}
	r = e.post("pull_request_review", "rev-linked", reviewJSON(402, "alice", "approved", "Looks right"), "")
	if r.Code != http.StatusAccepted {
		t.Fatalf("%d %q", r.Code, r.Status)
	}
	evs = e.waitEvents(r.Events...)
	if got := subjects(evs); len(got) != 2 || got[0] != "github:octo/repo#15" || got[1] != "github:octo/repo#21" {
		t.Fatalf("linked review reached %v, want the work item then the pull request", got)
	}
	for _, ev := range evs {
		if ev.GetType() != "comment.human" || ev.GetComment().GetCommentId() != 402 {
			t.Errorf("%s: %s %v", ev.GetSubject(), ev.GetType(), ev.GetComment())
		}
	}
}

func subjects(evs []*loopv1.Event) []string {
	out := make([]string, len(evs))
	for i, ev := range evs {
		out[i] = ev.GetSubject()
	}
	return out
}
