package ghfake

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// This file adds what a poller reads (ingress-github poll mode):
// GET /repos/{owner}/{repo}/issues, and the state changes a poller must see
// (CloseIssue, SetLabels). It changes nothing the other endpoints do.

const docListRepoIssues = "https://docs.github.com/rest/issues/issues#list-repository-issues"

// listIssuesLocked answers GET /repos/{owner}/{repo}/issues: filters state
// (open, closed, all; default open), labels (comma-separated, all must be
// present), since (updated_at ≥ since, inclusive like the comment lists),
// creator; sort (created, updated; default created) and direction (asc,
// desc; default desc); page and per_page with GitHub's Link header. The
// generic ETag / If-None-Match handling applies as for every GET.
func (s *Server) listIssuesLocked(c *call, r *repo) *response {
	q := c.r.URL.Query()
	f, e := s.issueFilterOf(q)
	if e != nil {
		return e
	}
	var out []*Issue
	for _, is := range r.issues {
		if f.match(is) {
			out = append(out, is)
		}
	}
	sortIssues(out, q.Get("sort"), q.Get("direction"))
	lo, hi, link := page(c, q, len(out))
	body := make([]issueJSON, 0, hi-lo)
	for _, is := range out[lo:hi] {
		body = append(body, s.renderIssueLocked(c.api, r, is))
	}
	resp := s.jsonResponse(http.StatusOK, body)
	if link != "" {
		resp.header.Set("Link", link)
	}
	return resp
}

// issueFilter is what an issue list keeps.
type issueFilter struct {
	state   string // open, closed or all
	labels  []string
	since   time.Time
	creator string
}

// issueFilterOf reads the filters of an issue list, refusing what GitHub
// refuses.
func (s *Server) issueFilterOf(q url.Values) (issueFilter, *response) {
	f := issueFilter{state: q.Get("state"), creator: q.Get("creator")}
	if f.state == "" {
		f.state = "open"
	}
	switch f.state {
	case "open", "closed", "all":
	default:
		return f, s.validation(docListRepoIssues, "Issue", "state", "invalid", "")
	}
	if v := q.Get("labels"); v != "" {
		for _, l := range strings.Split(v, ",") {
			if l = strings.TrimSpace(l); l != "" {
				f.labels = append(f.labels, l)
			}
		}
	}
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return f, s.validation(docListRepoIssues, "Issue", "since", "invalid", "since must be an ISO 8601 timestamp")
		}
		f.since = t
	}
	return f, nil
}

func (f issueFilter) match(is *Issue) bool {
	if f.state != "all" && is.State != f.state {
		return false
	}
	if !f.since.IsZero() && is.UpdatedAt.Before(f.since) {
		return false
	}
	if f.creator != "" && !strings.EqualFold(is.Login, f.creator) {
		return false
	}
	for _, l := range f.labels {
		if !slices.ContainsFunc(is.Labels, func(x string) bool { return strings.EqualFold(x, l) }) {
			return false
		}
	}
	return true
}

// sortIssues orders an issue list by created_at or (by "updated")
// updated_at, ties by number, descending unless direction is "asc".
func sortIssues(out []*Issue, by, direction string) {
	key := func(is *Issue) time.Time { return is.CreatedAt }
	if by == "updated" {
		key = func(is *Issue) time.Time { return is.UpdatedAt }
	}
	slices.SortStableFunc(out, func(a, b *Issue) int {
		if c := key(a).Compare(key(b)); c != 0 {
			return c
		}
		return a.Number - b.Number
	})
	if direction != "asc" {
		slices.Reverse(out)
	}
}

// CloseIssue closes issue number of repo, as a person closing it on GitHub
// would: state "closed", updated_at bumped. It bypasses HTTP, limits and
// hooks, like AddIssue.
func (s *Server) CloseIssue(repo string, number int) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	_, is := s.issueByNumberLocked("CloseIssue", repo, number)
	if is == nil {
		return
	}
	is.State = "closed"
	is.UpdatedAt = s.stamp()
	s.changedLocked()
}

// SetLabels replaces the labels of issue number of repo and bumps its
// updated_at, as labelling on GitHub does.
func (s *Server) SetLabels(repo string, number int, labels ...string) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r, is := s.issueByNumberLocked("SetLabels", repo, number)
	if is == nil {
		return
	}
	is.Labels = nil
	s.addLabelsLocked(r, is, labels)
	is.UpdatedAt = s.stamp()
	s.changedLocked()
}

// issueByNumberLocked finds issue number of repo for a test helper (named
// by who), failing the test when there is none.
func (s *Server) issueByNumberLocked(who, repo string, number int) (*repo, *Issue) {
	s.t.Helper()
	r := s.st.repos[repoKey(repo)]
	if r == nil || number < 1 || number > len(r.issues) {
		s.t.Fatalf("ghfake: %s: no issue %s#%d", who, repo, number)
		return nil, nil
	}
	return r, r.issues[number-1]
}
