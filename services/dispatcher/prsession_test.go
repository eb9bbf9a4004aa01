package dispatcher

import (
	"fmt"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// prCopies is one pull request delivery as ingress-github fans it out: a
// copy for each work item it is about, the linked issue first, each naming
// every work item of the delivery.
func prCopies(issue, pr, delivery, event, action string, payload map[string]any) []*loopv1.Event {
	refs := []string{issue, pr}
	var out []*loopv1.Event
	for i, ref := range refs {
		p := map[string]any{}
		for k, v := range payload {
			p[k] = v
		}
		ev := activity(ref, delivery, event, action, p)
		if i > 0 {
			ev.Id += "/" + ref
		}
		ev.GetGithubActivity().WorkItems = refs
		out = append(out, ev)
	}
	return out
}

func prPayload(n int64, head string) map[string]any {
	return map[string]any{"pull_request": map[string]any{"number": n, "title": "Requirements for #91", "state": "open",
		"head":     map[string]any{"ref": head, "repo": map[string]any{"full_name": "octo/repo"}},
		"html_url": fmt.Sprintf("https://github.com/octo/repo/pull/%d", n)}}
}

// TestSessionPerPR: with routing.tmux.sessionPerPr, a pull request that
// delivers a work item with a live session gets its own session when it is
// opened; its later events (a review comment, a check) reach that session
// only, and the work item's session is told only that it was opened.
func TestSessionPerPR(t *testing.T) {
	e := newEnv(t, func(s *Settings) { s.SessionPerPR = true })
	const issue, pr = "github:octo/repo#91", "github:octo/repo#92"
	item := e.start(issue, 9900)

	e.publish(prCopies(issue, pr, "pr-open-1", "pull_request", "opened", prPayload(92, "the-loop/issue-91"))...)
	e.waitRecord("session.spawned", map[string]any{"work_item": pr})
	prRec := e.record(pr)
	if !prRec.Session.Live() || prRec.Session.Kind != sessions.KindPR {
		t.Fatalf("the pull request's session = %+v", prRec.Session)
	}
	testkit.WaitFor(t, "the pull request's session booted", func() bool { return len(e.bootsOf(prRec.Session.HarnessSessionID)) > 0 })
	if boot := e.bootsOf(prRec.Session.HarnessSessionID)[0]; !strings.Contains(boot.Prompt, pr) {
		t.Errorf("the pull request's session booted with:\n%s", boot.Prompt)
	}
	if st := e.graphState(pr); st == nil || st.Graph != "adhoc" {
		t.Errorf("the pull request's graph = %+v, want the ad-hoc loop", st)
	}
	testkit.WaitFor(t, "the work item's session told the pull request was opened", func() bool {
		for _, in := range e.inputsOf(item.HarnessSessionID) {
			if strings.Contains(in, "pull_request / opened") {
				return true
			}
		}
		return false
	})

	// A review comment on the pull request: ingress-github's two copies.
	url := "https://github.com/octo/repo/pull/92#discussion_r5"
	review := func(ref, id string) *loopv1.Event {
		ev := comment(ref, 9910, alice, "Please split the second requirement.")
		ev.Id = id
		ev.GetComment().Url = url
		return ev
	}
	e.publish(review(issue, "gh:review-comment:9910"), review(pr, "gh:review-comment:9910/"+pr))
	testkit.WaitFor(t, "the review comment typed into the pull request's session", func() bool {
		for _, in := range e.inputsOf(prRec.Session.HarnessSessionID) {
			if strings.Contains(in, "split the second requirement") {
				return true
			}
		}
		return false
	})
	e.waitRecord("dispatch.dropped", map[string]any{"work_item": issue, "reason": DropPROwnSession})
	for _, in := range e.inputsOf(item.HarnessSessionID) {
		if strings.Contains(in, "split the second requirement") {
			t.Errorf("the work item's session was given the pull request's review:\n%s", in)
		}
	}
}

// TestPRJoinsItsIssueByDefault: without sessionPerPr, a pull request's
// review reaches its work item's session, and no session is spawned for the
// pull request.
func TestPRJoinsItsIssueByDefault(t *testing.T) {
	e := newEnv(t, nil)
	const issue, pr = "github:octo/repo#93", "github:octo/repo#94"
	item := e.start(issue, 9950)
	e.publish(prCopies(issue, pr, "pr-open-2", "pull_request", "opened", prPayload(94, "the-loop/issue-93"))...)
	ev := comment(issue, 9960, alice, "One more test, please.")
	ev.GetComment().Url = "https://github.com/octo/repo/pull/94#issuecomment-9960"
	e.publish(ev)
	testkit.WaitFor(t, "the review typed into the work item's session", func() bool {
		for _, in := range e.inputsOf(item.HarnessSessionID) {
			if strings.Contains(in, "One more test") {
				return true
			}
		}
		return false
	})
	e.waitRecord("dispatch.dropped", map[string]any{"work_item": pr, "reason": DropSpawnPolicy})
	if e.record(pr).Session != nil {
		t.Errorf("a session was spawned for the pull request: %+v", e.record(pr).Session)
	}
}
