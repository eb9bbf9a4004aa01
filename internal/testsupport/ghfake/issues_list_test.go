package ghfake

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-github/v62/github"
)

// TestListRepoIssues: GET /repos/{o}/{r}/issues through go-github: state,
// labels, creator filters, sort and direction, pagination with Link, and a
// conditional request answered 304 until something changes.
func TestListRepoIssues(t *testing.T) {
	s, gh := start(t)
	ctx := context.Background()
	s.AddIssue(repoName, "alice", "one", "", "go", "bug")
	s.AddIssue(repoName, "bob", "two", "", "go")
	s.AddIssue(repoName, "alice", "three", "")
	s.CloseIssue(repoName, 2)

	numbers := func(opts *github.IssueListByRepoOptions) []int {
		t.Helper()
		is, _, err := gh.Issues.ListByRepo(ctx, "octo", "repo", opts)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, i := range is {
			out = append(out, i.GetNumber())
		}
		return out
	}
	for name, tc := range map[string]struct {
		opts *github.IssueListByRepoOptions
		want []int
	}{
		"default: open, newest first": {&github.IssueListByRepoOptions{}, []int{3, 1}},
		"all":                         {&github.IssueListByRepoOptions{State: "all"}, []int{3, 2, 1}},
		"closed":                      {&github.IssueListByRepoOptions{State: "closed"}, []int{2}},
		"labels all present":          {&github.IssueListByRepoOptions{State: "all", Labels: []string{"go", "bug"}}, []int{1}},
		"creator":                     {&github.IssueListByRepoOptions{State: "all", Creator: "alice", Direction: "asc"}, []int{1, 3}},
	} {
		if diff := cmp.Diff(tc.want, numbers(tc.opts)); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}

	is, resp, err := gh.Issues.ListByRepo(ctx, "octo", "repo", &github.IssueListByRepoOptions{State: "all", Direction: "asc", ListOptions: github.ListOptions{PerPage: 2}})
	if err != nil || len(is) != 2 || resp.NextPage != 2 || resp.LastPage != 2 {
		t.Fatalf("page 1: %d issues, next %d last %d, err %v", len(is), resp.NextPage, resp.LastPage, err)
	}

	// Conditional requests.
	get := func(etag string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.URL()+"repos/"+repoName+"/issues?labels=go", nil)
		req.Header.Set("Authorization", "Bearer "+botToken)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		r, err := s.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r
	}
	first := get("")
	if r := get(first.Header.Get("ETag")); r.StatusCode != http.StatusNotModified {
		t.Errorf("unchanged listing: %d, want 304", r.StatusCode)
	}
	s.AddComment(repoName, 1, "bob", "bumps updated_at and the count")
	if r := get(first.Header.Get("ETag")); r.StatusCode != http.StatusOK {
		t.Errorf("changed listing: %d, want 200", r.StatusCode)
	}
	s.SetLabels(repoName, 1)
	if diff := cmp.Diff([]int(nil), numbers(&github.IssueListByRepoOptions{Labels: []string{"bug"}})); diff != "" {
		t.Errorf("after SetLabels: %s", diff)
	}
	if is, ok := s.Issue(repoName, 2); !ok || is.State != "closed" {
		t.Errorf("CloseIssue: %+v", is)
	}
}
