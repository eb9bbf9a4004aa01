package ghfake

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"
)

func TestFailNext(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.FailNext(2, http.StatusBadGateway)
	for range 2 {
		_, resp, err := gh.Users.Get(t.Context(), "")
		errorResponse(t, err, http.StatusBadGateway)
		if resp.Header.Get("X-RateLimit-Remaining") == "" {
			t.Error("injected answer without rate-limit headers")
		}
	}
	if _, _, err := gh.Users.Get(t.Context(), ""); err != nil {
		t.Errorf("third request: %v", err)
	}
	reqs := s.Requests()
	if !reqs[0].Injected || !reqs[1].Injected || reqs[2].Injected || s.Counts().Injected != 2 {
		t.Errorf("log = %+v, counts %+v", reqs, s.Counts())
	}
}

func TestInjectRule(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")
	s.Inject(Rule{Method: http.MethodPost, Path: "/repos/*/*/issues/*/comments", Status: http.StatusInternalServerError, Times: 1})
	remove := s.Inject(Rule{Path: "/repos/octo/repo/issues/1", Status: http.StatusServiceUnavailable, Header: http.Header{"Retry-After": {"3"}}})

	_, _, err := comment(t, gh, "fails")
	errorResponse(t, err, http.StatusInternalServerError)
	if _, _, err := comment(t, gh, "passes"); err != nil {
		t.Errorf("rule with Times 1 applied twice: %v", err)
	}
	_, _, err = gh.Issues.Get(t.Context(), "octo", "repo", 1)
	if er := errorResponse(t, err, http.StatusServiceUnavailable); er.Response.Header.Get("Retry-After") != "3" {
		t.Errorf("Retry-After = %q", er.Response.Header.Get("Retry-After"))
	}
	remove()
	if _, _, err := gh.Issues.Get(t.Context(), "octo", "repo", 1); err != nil {
		t.Errorf("after remove: %v", err)
	}
	if n := len(s.Comments(repoName, 1)); n != 1 {
		t.Errorf("%d comments stored, want 1", n)
	}

	// A rule's headers override the rate headers: a hand-made primary limit.
	s.Inject(Rule{Path: "/user", Status: http.StatusForbidden, Times: 1, Header: http.Header{"X-RateLimit-Remaining": {"0"}}})
	_, _, err = newClient(t, s, botToken).Users.Get(t.Context(), "")
	var rle *github.RateLimitError
	if !errors.As(err, &rle) {
		t.Errorf("injected 403 with remaining 0: %v (%T), want *github.RateLimitError", err, err)
	}
}

func TestInjectHang(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")
	s.Inject(Rule{Method: http.MethodPost, Hang: true, Times: 1})

	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, _, err := gh.Issues.CreateComment(ctx, "octo", "repo", 1, &github.IssueComment{Body: github.String("never")})
		errc <- err
	}()
	// Give up only once the fake holds the request: a client timeout.
	if err := s.Wait(t.Context(), func() bool { return s.Counts().Injected == 1 }); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("client err = %v, want context.Canceled", err)
	}
	if err := s.Wait(t.Context(), func() bool { return len(s.Requests()) == 1 }); err != nil {
		t.Fatal(err)
	}
	if r := s.Requests()[0]; r.Status != 0 || !r.Injected {
		t.Errorf("logged %+v, want status 0, injected", r)
	}
	if n := len(s.Comments(repoName, 1)); n != 0 {
		t.Errorf("a held request stored %d comments", n)
	}
}

func TestInjectDelay(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")

	// Latency: the request is answered after the delay.
	s.Inject(Rule{Path: "/user", Delay: 30 * time.Millisecond, Times: 1})
	began := time.Now()
	if _, _, err := gh.Users.Get(t.Context(), ""); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d < 30*time.Millisecond {
		t.Errorf("answered after %v, want at least the 30ms delay", d)
	}

	// A write delayed past the moment the client gives up is committed all
	// the same: the client cannot know whether it landed.
	arrived := make(chan struct{})
	s.OnRequest(func(r *http.Request) (int, bool) {
		if r.Method == http.MethodPost {
			close(arrived)
			<-r.Context().Done() // the client has gone
		}
		return 0, false
	})
	s.Inject(Rule{Method: http.MethodPost, Delay: 5 * time.Millisecond})
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, _, err := gh.Issues.CreateComment(ctx, "octo", "repo", 1, &github.IssueComment{Body: github.String("landed?")})
		errc <- err
	}()
	<-arrived
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Errorf("client err = %v, want context.Canceled", err)
	}
	wctx, wcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer wcancel()
	cs, err := s.WaitForComments(wctx, repoName, 1, 1)
	if err != nil || cs[0].Body != "landed?" {
		t.Errorf("WaitForComments = %+v, %v; want the abandoned write committed", cs, err)
	}
}

func TestOnRequest(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")
	c := s.AddComment(repoName, 1, botLogin, "v1")
	s.OnRequest(func(r *http.Request) (int, bool) {
		return http.StatusInternalServerError, r.Method == http.MethodPatch
	})
	_, _, err := gh.Issues.EditComment(t.Context(), "octo", "repo", c.ID, &github.IssueComment{Body: github.String("v2")})
	errorResponse(t, err, http.StatusInternalServerError)
	if _, _, err := gh.Issues.GetComment(t.Context(), "octo", "repo", c.ID); err != nil {
		t.Errorf("GET passed to the hook: %v", err)
	}
	s.OnRequest(nil)
	if _, _, err := gh.Issues.EditComment(t.Context(), "octo", "repo", c.ID, &github.IssueComment{Body: github.String("v2")}); err != nil {
		t.Errorf("after removing the hook: %v", err)
	}
}

func TestSetDown(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")
	s.SetDown(true)
	_, _, err := gh.Issues.Get(t.Context(), "octo", "repo", 1)
	errorResponse(t, err, http.StatusServiceUnavailable)
	_, _, err = comment(t, gh, "while down")
	errorResponse(t, err, http.StatusServiceUnavailable)
	if n := len(s.Comments(repoName, 1)); n != 0 {
		t.Errorf("GitHub down stored %d comments", n)
	}
	s.SetDown(false)
	if _, _, err := comment(t, gh, "back"); err != nil {
		t.Errorf("after SetDown(false): %v", err)
	}
}

func TestAfterWrite(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")

	inHook := make(chan Write, 1)
	release := make(chan struct{})
	remove := s.AfterWrite(func(w Write) {
		inHook <- w
		<-release
	})
	type result struct {
		c   *github.IssueComment
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, _, err := comment(t, gh, "record")
		done <- result{c, err}
	}()

	w := <-inHook
	if w.Kind != WriteComment || w.Repo != repoName || w.IssueNumber != 1 || w.Login != botLogin {
		t.Errorf("Write = %+v", w)
	}
	// Committed, and the writer has not heard back: the crash window.
	if cs := s.Comments(repoName, 1); len(cs) != 1 || cs[0].ID != w.ID {
		t.Errorf("during the hook, Comments() = %+v, want the write committed", cs)
	}
	select {
	case r := <-done:
		t.Fatalf("client got its response while the hook ran: %+v", r)
	default:
	}
	close(release)
	r := <-done
	if r.err != nil || r.c.GetID() != w.ID {
		t.Errorf("client got %+v, %v; want comment %d", r.c, r.err, w.ID)
	}

	remove()
	if _, _, err := comment(t, gh, "unhooked"); err != nil {
		t.Fatal(err)
	}
	select {
	case w := <-inHook:
		t.Errorf("removed hook ran for %+v", w)
	default:
	}
}

func TestDropResponseAfterWrite(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")
	s.DropResponseAfterWrite(1)

	// A refused write does not use up the drop.
	_, _, err := comment(t, gh, "")
	errorResponse(t, err, http.StatusUnprocessableEntity)

	c, resp, err := comment(t, gh, "ambiguous")
	var er *github.ErrorResponse
	if err == nil || errors.As(err, &er) || resp != nil || c != nil {
		t.Fatalf("got %+v, %+v, %v; want a transport error and no response", c, resp, err)
	}
	cs := s.Comments(repoName, 1)
	if len(cs) != 1 || cs[0].Body != "ambiguous" {
		t.Fatalf("Comments() = %+v, want the write committed", cs)
	}
	reqs := s.Requests()
	if last := reqs[len(reqs)-1]; !last.Dropped || last.Status != http.StatusCreated {
		t.Errorf("logged %+v, want dropped 201", last)
	}
	// The writer resolves the ambiguity by reading back.
	listed, _, err := gh.Issues.ListComments(t.Context(), "octo", "repo", 1, nil)
	if err != nil || len(listed) != 1 || listed[0].GetID() != cs[0].ID {
		t.Errorf("read back %d comments, %v", len(listed), err)
	}
	if _, _, err := comment(t, gh, "answered"); err != nil {
		t.Errorf("next write: %v", err)
	}
	if c := s.Counts(); c.Dropped != 1 || c.Comments != 2 {
		t.Errorf("Counts() = %+v", c)
	}
}
