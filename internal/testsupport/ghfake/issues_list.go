package ghfake

import (
	"net/http"
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
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	switch state {
	case "open", "closed", "all":
	default:
		return s.validation(docListRepoIssues, "Issue", "state", "invalid", "")
	}
	var want []string
	if v := q.Get("labels"); v != "" {
		for _, l := range strings.Split(v, ",") {
			if l = strings.TrimSpace(l); l != "" {
				want = append(want, l)
			}
		}
	}
	var since time.Time
	if v := q.Get("since"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return s.validation(docListRepoIssues, "Issue", "since", "invalid", "since must be an ISO 8601 timestamp")
		}
		since = t
	}
	creator := q.Get("creator")
	var out []*Issue
	for _, is := range r.issues {
		if state != "all" && is.State != state {
			continue
		}
		if !since.IsZero() && is.UpdatedAt.Before(since) {
			continue
		}
		if creator != "" && !strings.EqualFold(is.Login, creator) {
			continue
		}
		ok := true
		for _, l := range want {
			if !slices.ContainsFunc(is.Labels, func(x string) bool { return strings.EqualFold(x, l) }) {
				ok = false
				break
			}
		}
		if ok {
			out = append(out, is)
		}
	}
	key := func(is *Issue) time.Time { return is.CreatedAt }
	if q.Get("sort") == "updated" {
		key = func(is *Issue) time.Time { return is.UpdatedAt }
	}
	slices.SortStableFunc(out, func(a, b *Issue) int {
		if c := key(a).Compare(key(b)); c != 0 {
			return c
		}
		return a.Number - b.Number
	})
	if q.Get("direction") != "asc" {
		slices.Reverse(out)
	}
	perPage := 30
	if v := atoiOr(q.Get("per_page"), 0); v > 0 {
		perPage = min(v, 100)
	}
	page := max(atoiOr(q.Get("page"), 1), 1)
	last := max((len(out)+perPage-1)/perPage, 1)
	lo := min((page-1)*perPage, len(out))
	hi := min(lo+perPage, len(out))
	body := make([]issueJSON, 0, hi-lo)
	for _, is := range out[lo:hi] {
		body = append(body, s.renderIssueLocked(c.api, r, is))
	}
	resp := s.jsonResponse(http.StatusOK, body)
	if last > 1 {
		resp.header.Set("Link", linkHeader(c, q, page, last))
	}
	return resp
}

func atoiOr(s string, def int) int {
	n := 0
	if s == "" {
		return def
	}
	for _, ch := range s {
		if ch < '0' || ch > '9' || n > 1<<20 {
			return def
		}
		n = n*10 + int(ch-'0')
	}
	return n
}

// CloseIssue closes issue number of repo, as a person closing it on GitHub
// would: state "closed", updated_at bumped. It bypasses HTTP, limits and
// hooks, like AddIssue.
func (s *Server) CloseIssue(repo string, number int) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.st.repos[repoKey(repo)]
	if r == nil || number < 1 || number > len(r.issues) {
		s.t.Fatalf("ghfake: CloseIssue: no issue %s#%d", repo, number)
		return
	}
	is := r.issues[number-1]
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
	r := s.st.repos[repoKey(repo)]
	if r == nil || number < 1 || number > len(r.issues) {
		s.t.Fatalf("ghfake: SetLabels: no issue %s#%d", repo, number)
		return
	}
	is := r.issues[number-1]
	is.Labels = nil
	for _, l := range labels {
		if l == "" || slices.Contains(is.Labels, l) {
			continue
		}
		if _, ok := r.labels[l]; !ok {
			s.st.lastLabelID++
			r.labels[l] = s.st.lastLabelID
		}
		is.Labels = append(is.Labels, l)
	}
	is.UpdatedAt = s.stamp()
	s.changedLocked()
}
