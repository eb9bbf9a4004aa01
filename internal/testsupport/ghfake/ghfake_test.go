package ghfake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-github/v62/github"
)

const (
	botToken = "ghp_bot"
	botLogin = "loop-bot"
	repoName = "octo/repo"
)

// start returns a fake with octo/repo and the bot's token, and a go-github
// client for it.
func start(t *testing.T, opts ...Option) (*Server, *github.Client) {
	t.Helper()
	s := New(t, opts...)
	s.AddRepo(repoName)
	s.AddToken(botToken, botLogin)
	return s, newClient(t, s, botToken)
}

// newClient is go-github pointed at the fake through BaseURL, as the
// services do with LOOP_GITHUB_API_URL.
func newClient(t *testing.T, s *Server, token string) *github.Client {
	t.Helper()
	c := github.NewClient(s.Client())
	if token != "" {
		c = c.WithAuthToken(token)
	}
	u, err := url.Parse(s.URL())
	if err != nil {
		t.Fatal(err)
	}
	c.BaseURL = u
	return c
}

// errorResponse asserts err is a plain *github.ErrorResponse with status.
func errorResponse(t *testing.T, err error, status int) *github.ErrorResponse {
	t.Helper()
	var er *github.ErrorResponse
	if !errors.As(err, &er) {
		t.Fatalf("err = %v (%T), want *github.ErrorResponse", err, err)
	}
	if er.Response.StatusCode != status {
		t.Fatalf("status = %d, want %d (%v)", er.Response.StatusCode, status, err)
	}
	return er
}

func TestCreateAndGetIssue(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	ctx := t.Context()

	is, resp, err := gh.Issues.Create(ctx, "octo", "repo", &github.IssueRequest{
		Title:  github.String("Ledger"),
		Body:   github.String("records"),
		Labels: &[]string{"the-loop", "ledger"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("status = %d, want 201", resp.StatusCode)
	}
	if got, want := resp.Header.Get("Location"), s.URL()+"repos/octo/repo/issues/1"; got != want {
		t.Errorf("Location = %q, want %q", got, want)
	}
	if is.GetNumber() != 1 || is.GetTitle() != "Ledger" || is.GetBody() != "records" || is.GetState() != "open" {
		t.Errorf("issue = %+v", is)
	}
	if got := is.GetHTMLURL(); got != "https://github.com/octo/repo/issues/1" {
		t.Errorf("html_url = %q", got)
	}
	if is.GetUser().GetLogin() != botLogin || is.GetNodeID() == "" || is.GetCreatedAt().IsZero() {
		t.Errorf("user/node_id/created_at = %q %q %v", is.GetUser().GetLogin(), is.GetNodeID(), is.GetCreatedAt())
	}
	var labels []string
	for _, l := range is.Labels {
		labels = append(labels, l.GetName())
	}
	if diff := cmp.Diff([]string{"the-loop", "ledger"}, labels); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}

	got, _, err := gh.Issues.Get(ctx, "octo", "repo", 1)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetID() != is.GetID() || got.GetTitle() != "Ledger" {
		t.Errorf("GET issue = %+v, want the created one", got)
	}
	second, _, err := gh.Issues.Create(ctx, "octo", "repo", &github.IssueRequest{Title: github.String("two")})
	if err != nil {
		t.Fatal(err)
	}
	if second.GetNumber() != 2 || second.Body != nil {
		t.Errorf("second issue number %d body %v, want 2 and null", second.GetNumber(), second.Body)
	}

	issues := s.Issues(repoName)
	if len(issues) != 2 || issues[0].Title != "Ledger" || issues[0].Login != botLogin || issues[1].Number != 2 {
		t.Errorf("Issues() = %+v", issues)
	}
	if c := s.Counts(); c.Issues != 2 || c.Writes != 2 {
		t.Errorf("Counts() = %+v, want 2 issue writes", c)
	}
}

func TestIssueValidation(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	for _, tc := range []struct {
		name  string
		title *string
		field string
		code  string
	}{
		{"missing title", nil, "title", "missing_field"},
		{"empty title", github.String(""), "title", "missing_field"},
		{"title of 257 characters", github.String(strings.Repeat("é", 257)), "title", "custom"},
	} {
		_, _, err := gh.Issues.Create(t.Context(), "octo", "repo", &github.IssueRequest{Title: tc.title})
		er := errorResponse(t, err, http.StatusUnprocessableEntity)
		if er.Message != "Validation Failed" || len(er.Errors) != 1 || er.Errors[0].Field != tc.field || er.Errors[0].Code != tc.code {
			t.Errorf("%s: error = %+v %+v", tc.name, er, er.Errors)
		}
	}
	if _, _, err := gh.Issues.Create(t.Context(), "octo", "repo", &github.IssueRequest{Title: github.String(strings.Repeat("é", 256))}); err != nil {
		t.Errorf("title of 256 characters: %v", err)
	}

	// Not JSON at all: 400, as GitHub.
	req, err := gh.NewRequest(http.MethodPost, "repos/octo/repo/issues", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Body = io.NopCloser(strings.NewReader("{not json"))
	_, err = gh.Do(t.Context(), req, nil)
	if er := errorResponse(t, err, http.StatusBadRequest); er.Message != "Problems parsing JSON" {
		t.Errorf("message = %q", er.Message)
	}
	if n := len(s.Issues(repoName)); n != 1 {
		t.Errorf("%d issues stored, want only the valid one", n)
	}
}

func TestComments(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	ctx := t.Context()
	s.AddIssue(repoName, "octo", "work item", "")

	var ids []int64
	for i := range 3 {
		c, resp, err := gh.Issues.CreateComment(ctx, "octo", "repo", 1, &github.IssueComment{Body: github.String(fmt.Sprintf("record %d", i))})
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusCreated {
			t.Errorf("status = %d, want 201", resp.StatusCode)
		}
		if got, want := resp.Header.Get("Location"), fmt.Sprintf("%srepos/octo/repo/issues/comments/%d", s.URL(), c.GetID()); got != want {
			t.Errorf("Location = %q, want %q", got, want)
		}
		if got, want := c.GetHTMLURL(), fmt.Sprintf("https://github.com/octo/repo/issues/1#issuecomment-%d", c.GetID()); got != want {
			t.Errorf("html_url = %q, want %q", got, want)
		}
		if c.GetIssueURL() != s.URL()+"repos/octo/repo/issues/1" || c.GetUser().GetLogin() != botLogin || c.GetAuthorAssociation() != "NONE" {
			t.Errorf("comment = %+v", c)
		}
		ids = append(ids, c.GetID())
	}
	if !(ids[0] < ids[1] && ids[1] < ids[2]) {
		t.Errorf("ids %v not increasing", ids)
	}

	edited, resp, err := gh.Issues.EditComment(ctx, "octo", "repo", ids[1], &github.IssueComment{Body: github.String("record 1, edited")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || edited.GetBody() != "record 1, edited" || edited.GetID() != ids[1] {
		t.Errorf("edit: status %d comment %+v", resp.StatusCode, edited)
	}
	got, _, err := gh.Issues.GetComment(ctx, "octo", "repo", ids[1])
	if err != nil || got.GetBody() != "record 1, edited" {
		t.Errorf("GetComment = %+v, %v", got, err)
	}

	var bodies []string
	for _, c := range s.Comments(repoName, 1) {
		bodies = append(bodies, c.Body)
	}
	if diff := cmp.Diff([]string{"record 0", "record 1, edited", "record 2"}, bodies); diff != "" {
		t.Errorf("Comments() (-want +got):\n%s", diff)
	}
	if is, _ := s.Issue(repoName, 1); is.Comments != 3 {
		t.Errorf("issue comment count = %d, want 3", is.Comments)
	}

	// The owner of the repository is OWNER; others as configured.
	s.AddToken("ghp_octo", "octo")
	s.SetAuthorAssociation(repoName, "mona", "COLLABORATOR")
	s.AddToken("ghp_mona", "mona")
	for tok, want := range map[string]string{"ghp_octo": "OWNER", "ghp_mona": "COLLABORATOR"} {
		c, _, err := newClient(t, s, tok).Issues.CreateComment(ctx, "octo", "repo", 1, &github.IssueComment{Body: github.String("hi")})
		if err != nil || c.GetAuthorAssociation() != want {
			t.Errorf("%s: author_association = %q, %v; want %q", tok, c.GetAuthorAssociation(), err, want)
		}
	}

	// A comment id of another repository is not found here.
	s.AddRepo("octo/other")
	_, _, err = gh.Issues.EditComment(ctx, "octo", "other", ids[0], &github.IssueComment{Body: github.String("x")})
	errorResponse(t, err, http.StatusNotFound)
}

func TestCommentValidation(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")
	c := s.AddComment(repoName, 1, "octo", "seed")
	for _, tc := range []struct {
		name string
		body *string
		code string
	}{
		{"missing body", nil, "missing_field"},
		{"empty body", github.String(""), "missing_field"},
		{"blank body", github.String(" \n"), "missing_field"},
		{"body of 65537 characters", github.String(strings.Repeat("ü", 65537)), "custom"},
	} {
		_, _, err := gh.Issues.CreateComment(t.Context(), "octo", "repo", 1, &github.IssueComment{Body: tc.body})
		er := errorResponse(t, err, http.StatusUnprocessableEntity)
		if len(er.Errors) != 1 || er.Errors[0].Field != "body" || er.Errors[0].Code != tc.code {
			t.Errorf("create, %s: errors = %+v", tc.name, er.Errors)
		}
		_, _, err = gh.Issues.EditComment(t.Context(), "octo", "repo", c.ID, &github.IssueComment{Body: tc.body})
		errorResponse(t, err, http.StatusUnprocessableEntity)
	}
	if _, _, err := gh.Issues.CreateComment(t.Context(), "octo", "repo", 1, &github.IssueComment{Body: github.String(strings.Repeat("ü", 65536))}); err != nil {
		t.Errorf("body of 65536 characters: %v", err)
	}
	_, _, err := gh.Issues.CreateComment(t.Context(), "octo", "repo", 2, &github.IssueComment{Body: github.String("x")})
	errorResponse(t, err, http.StatusNotFound)
	if n := len(s.Comments(repoName, 1)); n != 2 {
		t.Errorf("%d comments stored, want 2", n)
	}
}

func TestListCommentsPagination(t *testing.T) {
	t.Parallel()
	clk := NewManualClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	s, gh := start(t, WithClock(clk.Now))
	s.AddIssue(repoName, "octo", "work item", "")
	var want []int64
	for i := range 75 {
		if i == 70 {
			clk.Advance(time.Minute)
		}
		want = append(want, s.AddComment(repoName, 1, "octo", fmt.Sprint(i)).ID)
	}

	// Walk the pages the way go-github callers do: by resp.NextPage.
	var got []int64
	opts := &github.IssueListCommentsOptions{}
	pages := 0
	for {
		cs, resp, err := gh.Issues.ListComments(t.Context(), "octo", "repo", 1, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if resp.LastPage != 0 && resp.LastPage != 3 {
			t.Errorf("page %d: LastPage = %d, want 3", pages, resp.LastPage)
		}
		if pages > 1 && (resp.FirstPage != 1 || resp.PrevPage != pages-1) {
			t.Errorf("page %d: FirstPage %d PrevPage %d", pages, resp.FirstPage, resp.PrevPage)
		}
		for _, c := range cs {
			got = append(got, c.GetID())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	if pages != 3 {
		t.Errorf("%d pages of the default 30, want 3", pages)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}

	// per_page is capped at 100: one page, no Link header.
	cs, resp, err := gh.Issues.ListComments(t.Context(), "octo", "repo", 1, &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 500}})
	if err != nil || len(cs) != 75 || resp.Header.Get("Link") != "" {
		t.Errorf("per_page=500: %d comments, Link %q, %v", len(cs), resp.Header.Get("Link"), err)
	}

	// since keeps only comments updated at or after it, and survives in
	// the Link header.
	since := clk.Now()
	cs, resp, err = gh.Issues.ListComments(t.Context(), "octo", "repo", 1, &github.IssueListCommentsOptions{Since: &since, ListOptions: github.ListOptions{PerPage: 2}})
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 2 || cs[0].GetID() != want[70] || resp.LastPage != 3 {
		t.Errorf("since: first page %d comments from %d, LastPage %d", len(cs), cs[0].GetID(), resp.LastPage)
	}
	if link := resp.Header.Get("Link"); !strings.Contains(link, "since=") {
		t.Errorf("Link %q lost the since parameter", link)
	}

	// The repository-wide list pages the same way.
	all, resp, err := gh.Issues.ListComments(t.Context(), "octo", "repo", 0, &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 50}})
	if err != nil || len(all) != 50 || resp.NextPage != 2 {
		t.Errorf("repo-wide: %d comments, NextPage %d, %v", len(all), resp.NextPage, err)
	}
}

func TestReactions(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	ctx := t.Context()
	s.AddIssue(repoName, "octo", "work item", "")
	c := s.AddComment(repoName, 1, "octo", "approve?")

	r1, resp, err := gh.Reactions.CreateIssueCommentReaction(ctx, "octo", "repo", c.ID, "+1")
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("first reaction: %v, status %v", err, resp)
	}
	r2, resp, err := gh.Reactions.CreateIssueCommentReaction(ctx, "octo", "repo", c.ID, "+1")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("repeated reaction: %v, status %v; want 200", err, resp)
	}
	if r1.GetID() != r2.GetID() || r2.GetContent() != "+1" || r2.GetUser().GetLogin() != botLogin {
		t.Errorf("repeat = %+v, want the first (%d)", r2, r1.GetID())
	}
	ri, resp, err := gh.Reactions.CreateIssueReaction(ctx, "octo", "repo", 1, "eyes")
	if err != nil || resp.StatusCode != http.StatusCreated || ri.GetContent() != "eyes" {
		t.Fatalf("issue reaction: %+v, %v, %v", ri, resp, err)
	}
	_, _, err = gh.Reactions.CreateIssueReaction(ctx, "octo", "repo", 1, "thumbsup")
	errorResponse(t, err, http.StatusUnprocessableEntity)
	_, _, err = gh.Reactions.CreateIssueCommentReaction(ctx, "octo", "repo", 999, "+1")
	errorResponse(t, err, http.StatusNotFound)

	got := s.Reactions(repoName)
	want := []Reaction{
		{ID: r1.GetID(), Repo: repoName, IssueNumber: 1, CommentID: c.ID, Login: botLogin, Content: "+1"},
		{ID: ri.GetID(), Repo: repoName, IssueNumber: 1, Login: botLogin, Content: "eyes"},
	}
	if diff := cmp.Diff(want, got, cmp.FilterPath(func(p cmp.Path) bool { return p.Last().String() == ".CreatedAt" }, cmp.Ignore())); diff != "" {
		t.Errorf("Reactions() (-want +got):\n%s", diff)
	}
	if n := s.Counts().Reactions; n != 2 {
		t.Errorf("Counts().Reactions = %d, want 2", n)
	}
}

func TestUserAndRateLimit(t *testing.T) {
	t.Parallel()
	_, gh := start(t, WithPrimaryLimit(100))
	ctx := t.Context()

	u, resp, err := gh.Users.Get(ctx, "")
	if err != nil || u.GetLogin() != botLogin {
		t.Fatalf("GET /user = %+v, %v", u, err)
	}
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Used", "X-RateLimit-Reset", "X-RateLimit-Resource"} {
		if resp.Header.Get(h) == "" {
			t.Errorf("header %s missing", h)
		}
	}
	if resp.Rate.Limit != 100 || resp.Rate.Remaining != 99 || resp.Header.Get("X-RateLimit-Used") != "1" || resp.Header.Get("X-RateLimit-Resource") != "core" {
		t.Errorf("rate after one request = %+v, used %s", resp.Rate, resp.Header.Get("X-RateLimit-Used"))
	}

	rl, _, err := gh.RateLimit.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// GET /rate_limit is not charged.
	if rl.Core.Limit != 100 || rl.Core.Remaining != 99 || rl.Core.Reset.IsZero() || rl.Search.Limit != 30 {
		t.Errorf("rate_limit = core %+v search %+v", rl.Core, rl.Search)
	}
}

func TestNotFoundAndAuth(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	ctx := t.Context()

	_, _, err := gh.Issues.Get(ctx, "octo", "missing", 1)
	er := errorResponse(t, err, http.StatusNotFound)
	if er.Message != "Not Found" || !strings.HasPrefix(er.DocumentationURL, "https://docs.github.com/rest") {
		t.Errorf("404 body = %+v", er)
	}
	_, _, err = gh.Issues.CreateComment(ctx, "nobody", "repo", 1, &github.IssueComment{Body: github.String("x")})
	errorResponse(t, err, http.StatusNotFound)
	_, _, err = gh.Issues.Get(ctx, "octo", "repo", 7)
	errorResponse(t, err, http.StatusNotFound)
	_, err = gh.Repositories.Delete(ctx, "octo", "repo") // not served
	errorResponse(t, err, http.StatusNotFound)
	// Repository names are case-insensitive, as on GitHub.
	s.AddIssue(repoName, "octo", "x", "")
	if _, _, err := gh.Issues.Get(ctx, "Octo", "Repo", 1); err != nil {
		t.Errorf("GET with other case: %v", err)
	}

	_, _, err = newClient(t, s, "ghp_wrong").Users.Get(ctx, "")
	if er := errorResponse(t, err, http.StatusUnauthorized); er.Message != "Bad credentials" {
		t.Errorf("bad token message = %q", er.Message)
	}
	_, _, err = newClient(t, s, "").Issues.Get(ctx, "octo", "repo", 1)
	if er := errorResponse(t, err, http.StatusUnauthorized); er.Message != "Requires authentication" {
		t.Errorf("no token message = %q", er.Message)
	}
	// "Authorization: token <t>" works as well as Bearer.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"user", nil)
	req.Header.Set("Authorization", "token "+botToken)
	resp, err := s.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("token scheme: status %d", resp.StatusCode)
	}
}

func TestEnterpriseURLs(t *testing.T) {
	t.Parallel()
	s, _ := start(t)
	gh, err := github.NewClient(s.Client()).WithAuthToken(botToken).WithEnterpriseURLs(s.URL(), s.URL())
	if err != nil {
		t.Fatal(err)
	}
	is, resp, err := gh.Issues.Create(t.Context(), "octo", "repo", &github.IssueRequest{Title: github.String("t")})
	if err != nil {
		t.Fatal(err)
	}
	if want := s.URL() + "api/v3/repos/octo/repo/issues/1"; resp.Header.Get("Location") != want || is.GetURL() != want {
		t.Errorf("Location %q url %q, want %q", resp.Header.Get("Location"), is.GetURL(), want)
	}
	if reqs := s.Requests(); reqs[len(reqs)-1].Path != "/repos/octo/repo/issues" {
		t.Errorf("logged path = %q, want it without the prefix", reqs[len(reqs)-1].Path)
	}
}

func TestETag(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	ctx := t.Context()
	s.AddIssue(repoName, "octo", "work item", "")

	get := func(etag string) *github.Response {
		t.Helper()
		req, err := gh.NewRequest(http.MethodGet, "repos/octo/repo/issues/1/comments", nil)
		if err != nil {
			t.Fatal(err)
		}
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := gh.Do(ctx, req, nil)
		if resp == nil {
			t.Fatalf("GET: %v", err)
		}
		return resp
	}
	first := get("")
	etag := first.Header.Get("ETag")
	if first.StatusCode != http.StatusOK || etag == "" {
		t.Fatalf("status %d ETag %q", first.StatusCode, etag)
	}
	again := get(etag)
	if again.StatusCode != http.StatusNotModified {
		t.Errorf("If-None-Match with the same ETag: status %d, want 304", again.StatusCode)
	}
	// GitHub does not charge a 304.
	if again.Rate.Remaining != first.Rate.Remaining {
		t.Errorf("remaining %d after 304, want %d", again.Rate.Remaining, first.Rate.Remaining)
	}
	s.AddComment(repoName, 1, "octo", "new")
	if changed := get(etag); changed.StatusCode != http.StatusOK || changed.Header.Get("ETag") == etag {
		t.Errorf("after a change: status %d ETag %q", changed.StatusCode, changed.Header.Get("ETag"))
	}
}

func TestWaitForComments(t *testing.T) {
	t.Parallel()
	s, gh := start(t)
	s.AddIssue(repoName, "octo", "work item", "")
	errc := make(chan error, 1)
	go func() {
		for i := range 5 {
			if _, _, err := gh.Issues.CreateComment(context.Background(), "octo", "repo", 1, &github.IssueComment{Body: github.String(fmt.Sprint(i))}); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	cs, err := s.WaitForComments(ctx, repoName, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(cs) != 5 || cs[4].Body != "4" {
		t.Errorf("comments = %+v", cs)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}

	short, cancel2 := context.WithCancel(t.Context())
	cancel2()
	if _, err := s.WaitForComments(short, repoName, 1, 6); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitForComments on a done context = %v, want context.Canceled", err)
	}
}

// TestIssueLabels: an issue's labels are listed, added (as a bare array or
// {"labels": [...]}, the answer is every label the issue then has) and
// removed one by one (a label it does not have is 404).
func TestIssueLabels(t *testing.T) {
	s := New(t)
	s.AddRepo("octo/repo")
	s.AddToken("tok", "loop-bot")
	is := s.AddIssue("octo/repo", "alice", "t", "b", "bug")
	c := github.NewClient(s.Client()).WithAuthToken("tok")
	c.BaseURL, _ = url.Parse(s.URL())
	ctx := context.Background()
	if _, _, err := c.Issues.AddLabelsToIssue(ctx, "octo", "repo", is.Number, []string{"loop:design", "bug"}); err != nil {
		t.Fatal(err)
	}
	ls, _, err := c.Issues.ListLabelsByIssue(ctx, "octo", "repo", is.Number, nil)
	if err != nil || len(ls) != 2 || ls[0].GetName() != "bug" || ls[1].GetName() != "loop:design" {
		t.Fatalf("labels %v, %v", ls, err)
	}
	if _, err := c.Issues.RemoveLabelForIssue(ctx, "octo", "repo", is.Number, "loop:design"); err != nil {
		t.Fatal(err)
	}
	if resp, err := c.Issues.RemoveLabelForIssue(ctx, "octo", "repo", is.Number, "loop:design"); err == nil || resp.StatusCode != 404 {
		t.Errorf("removing a label the issue lacks: %v", err)
	}
	if got, _ := s.Issue("octo/repo", is.Number); len(got.Labels) != 1 || got.Labels[0] != "bug" {
		t.Errorf("labels %v", got.Labels)
	}
}
