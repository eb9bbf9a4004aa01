package ghfake

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// GitHub's documented size limits.
const (
	maxTitle = 256
	maxBody  = 65536
)

// Documentation URLs GitHub puts in error bodies, per operation.
const (
	docCreateIssue     = "https://docs.github.com/rest/issues/issues#create-an-issue"
	docGetIssue        = "https://docs.github.com/rest/issues/issues#get-an-issue"
	docListComments    = "https://docs.github.com/rest/issues/comments#list-issue-comments"
	docListRepoComms   = "https://docs.github.com/rest/issues/comments#list-issue-comments-for-a-repository"
	docGetComment      = "https://docs.github.com/rest/issues/comments#get-an-issue-comment"
	docCreateComment   = "https://docs.github.com/rest/issues/comments#create-an-issue-comment"
	docUpdateComment   = "https://docs.github.com/rest/issues/comments#update-an-issue-comment"
	docReactComment    = "https://docs.github.com/rest/reactions/reactions#create-reaction-for-an-issue-comment"
	docReactIssue      = "https://docs.github.com/rest/reactions/reactions#create-reaction-for-an-issue"
	docRoot            = "https://docs.github.com/rest"
	docProblemsParsing = docRoot
)

var reactionContents = []string{"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}

// routeLocked dispatches an authenticated request. Anything the fake does
// not serve, including a known path with another method, gets GitHub's 404.
func (s *Server) routeLocked(c *call) *response {
	seg := c.segs
	get, post, patch := c.method == http.MethodGet, c.method == http.MethodPost, c.method == http.MethodPatch
	del := c.method == http.MethodDelete
	switch {
	case len(seg) == 1 && seg[0] == "user" && get:
		return s.jsonResponse(http.StatusOK, renderUser(c.api, s.userLocked(c.login)))
	case len(seg) == 1 && seg[0] == "rate_limit" && get:
		return s.rateLimitLocked(c)
	case len(seg) < 4 || seg[0] != "repos" || seg[3] != "issues":
		return s.errorResponse(http.StatusNotFound, "Not Found", docRoot)
	}

	// /repos/{owner}/{repo}/issues...
	rest := seg[4:]
	var doc string
	var h func(*call, *repo) *response
	switch {
	case len(rest) == 0 && post:
		doc, h = docCreateIssue, s.createIssueHTTPLocked
	case len(rest) == 0 && get: // issues_list.go
		doc, h = docListRepoIssues, s.listIssuesLocked
	case len(rest) == 1 && rest[0] == "comments" && get:
		doc, h = docListRepoComms, s.listRepoCommentsLocked
	case len(rest) == 2 && rest[0] == "comments" && get:
		doc, h = docGetComment, s.getCommentLocked
	case len(rest) == 2 && rest[0] == "comments" && patch:
		doc, h = docUpdateComment, s.updateCommentLocked
	case len(rest) == 3 && rest[0] == "comments" && rest[2] == "reactions" && post:
		doc, h = docReactComment, s.reactCommentLocked
	case len(rest) == 1 && rest[0] != "comments" && get:
		doc, h = docGetIssue, s.getIssueLocked
	case len(rest) == 2 && rest[0] != "comments" && rest[1] == "comments" && get:
		doc, h = docListComments, s.listCommentsLocked
	case len(rest) == 2 && rest[0] != "comments" && rest[1] == "comments" && post:
		doc, h = docCreateComment, s.createCommentHTTPLocked
	case len(rest) == 2 && rest[0] != "comments" && rest[1] == "reactions" && post:
		doc, h = docReactIssue, s.reactIssueLocked
	case len(rest) == 2 && rest[0] != "comments" && rest[1] == "labels" && get: // labels.go
		doc, h = docListLabels, s.listLabelsLocked
	case len(rest) == 2 && rest[0] != "comments" && rest[1] == "labels" && post:
		doc, h = docAddLabels, s.addLabelsHTTPLocked
	case len(rest) == 3 && rest[0] != "comments" && rest[1] == "labels" && del:
		doc, h = docRemoveLabel, s.removeLabelLocked
	default:
		return s.errorResponse(http.StatusNotFound, "Not Found", docRoot)
	}
	r := s.st.repos[repoKey(seg[1]+"/"+seg[2])]
	if r == nil {
		return s.errorResponse(http.StatusNotFound, "Not Found", doc)
	}
	return h(c, r)
}

// issueLocked resolves the issue number in path segment 5.
func (s *Server) issueLocked(c *call, r *repo, doc string) (*Issue, *response) {
	n, err := strconv.Atoi(c.segs[4])
	if err != nil || n < 1 || n > len(r.issues) {
		return nil, s.errorResponse(http.StatusNotFound, "Not Found", doc)
	}
	return r.issues[n-1], nil
}

// commentLocked resolves the comment id in path segment 6; a comment of
// another repository is not found, as on GitHub.
func (s *Server) commentLocked(c *call, r *repo, doc string) (*Comment, *response) {
	id, err := strconv.ParseInt(c.segs[5], 10, 64)
	cm := s.st.comments[id]
	if err != nil || cm == nil || !strings.EqualFold(cm.Repo, r.name) {
		return nil, s.errorResponse(http.StatusNotFound, "Not Found", doc)
	}
	return cm, nil
}

// decode parses a JSON request body. GitHub answers 400 "Problems parsing
// JSON" to anything that is not a JSON object.
func (s *Server) decode(c *call, v any) *response {
	if len(bytes.TrimSpace(c.body)) == 0 || json.Unmarshal(c.body, v) != nil {
		return s.errorResponse(http.StatusBadRequest, "Problems parsing JSON", docProblemsParsing)
	}
	return nil
}

func (s *Server) createIssueHTTPLocked(c *call, r *repo) *response {
	var in struct {
		Title  json.RawMessage   `json:"title"`
		Body   *string           `json:"body"`
		Labels []json.RawMessage `json:"labels"`
	}
	if e := s.decode(c, &in); e != nil {
		return e
	}
	// The schema allows a string or an integer title.
	var title string
	var num json.Number
	switch {
	case len(in.Title) == 0 || string(in.Title) == "null":
		return s.validation(docCreateIssue, "Issue", "title", "missing_field", "")
	case json.Unmarshal(in.Title, &title) == nil:
	case json.Unmarshal(in.Title, &num) == nil:
		title = num.String()
	default:
		return s.validation(docCreateIssue, "Issue", "title", "invalid", "")
	}
	if strings.TrimSpace(title) == "" {
		return s.validation(docCreateIssue, "Issue", "title", "missing_field", "")
	}
	if utf8.RuneCountInString(title) > maxTitle {
		return s.validation(docCreateIssue, "Issue", "title", "custom", fmt.Sprintf("title is too long (maximum is %d characters)", maxTitle))
	}
	body := ""
	if in.Body != nil {
		body = *in.Body
	}
	if utf8.RuneCountInString(body) > maxBody {
		return s.validation(docCreateIssue, "Issue", "body", "custom", fmt.Sprintf("body is too long (maximum is %d characters)", maxBody))
	}
	// Labels are names, or objects with a name.
	var labels []string
	for _, raw := range in.Labels {
		var name string
		var obj struct {
			Name string `json:"name"`
		}
		switch {
		case json.Unmarshal(raw, &name) == nil:
		case json.Unmarshal(raw, &obj) == nil:
			name = obj.Name
		default:
			return s.validation(docCreateIssue, "Issue", "labels", "invalid", "")
		}
		labels = append(labels, name)
	}
	if e := s.secondaryLocked(c); e != nil {
		return e
	}
	is := s.createIssueLocked(r, c.login, title, body, labels)
	return s.wroteLocked(http.StatusCreated, s.renderIssueLocked(c.api, r, is),
		fmt.Sprintf("%srepos/%s/issues/%d", c.api, r.name, is.Number),
		Write{Kind: WriteIssue, Repo: r.name, IssueNumber: is.Number, ID: is.ID, Login: c.login})
}

// wroteLocked commits a write and answers status with body, carrying the
// write for the test's hooks and, when it created something, its Location.
func (s *Server) wroteLocked(status int, body any, location string, w Write) *response {
	s.commitLocked(w.Kind)
	resp := s.jsonResponse(status, body)
	if location != "" {
		resp.header.Set("Location", location)
	}
	resp.write = &w
	return resp
}

func (s *Server) getIssueLocked(c *call, r *repo) *response {
	is, e := s.issueLocked(c, r, docGetIssue)
	if e != nil {
		return e
	}
	return s.jsonResponse(http.StatusOK, s.renderIssueLocked(c.api, r, is))
}

func (s *Server) listCommentsLocked(c *call, r *repo) *response {
	is, e := s.issueLocked(c, r, docListComments)
	if e != nil {
		return e
	}
	return s.pageCommentsLocked(c, r.comments[is.Number], docListComments)
}

func (s *Server) listRepoCommentsLocked(c *call, r *repo) *response {
	var all []*Comment
	for _, cs := range r.comments {
		all = append(all, cs...)
	}
	slices.SortFunc(all, func(a, b *Comment) int { return cmp.Compare(a.ID, b.ID) })
	if c.r.URL.Query().Get("direction") == "desc" {
		slices.Reverse(all)
	}
	return s.pageCommentsLocked(c, all, docListRepoComms)
}

// pageCommentsLocked answers a comment list: the "since" filter, then
// page/per_page, with the Link header go-github and octokit paginate by.
func (s *Server) pageCommentsLocked(c *call, cs []*Comment, doc string) *response {
	q := c.r.URL.Query()
	if v := q.Get("since"); v != "" {
		since, err := time.Parse(time.RFC3339, v)
		if err != nil {
			return s.validation(doc, "IssueComment", "since", "invalid", "since must be an ISO 8601 timestamp")
		}
		// Inclusive: GitHub's timestamps have whole seconds, and a poller
		// that asks "since" the last updated_at it saw must not miss a
		// comment made in that same second.
		var kept []*Comment
		for _, cm := range cs {
			if !cm.UpdatedAt.Before(since) {
				kept = append(kept, cm)
			}
		}
		cs = kept
	}
	lo, hi, link := page(c, q, len(cs))
	out := make([]commentJSON, 0, hi-lo)
	for _, cm := range cs[lo:hi] {
		out = append(out, s.renderCommentLocked(c.api, cm))
	}
	resp := s.jsonResponse(http.StatusOK, out)
	if link != "" {
		resp.header.Set("Link", link)
	}
	return resp
}

// page reads page and per_page (30 by default, at most 100) for a list of n
// items: the slice [lo, hi) to answer and the Link header, empty when the
// list fits one page.
func page(c *call, q url.Values, n int) (lo, hi int, link string) {
	perPage := 30
	if v, err := strconv.Atoi(q.Get("per_page")); err == nil && v > 0 {
		perPage = min(v, 100)
	}
	page := 1
	if v, err := strconv.Atoi(q.Get("page")); err == nil && v > 0 {
		page = v
	}
	last := max((n+perPage-1)/perPage, 1)
	lo = min((page-1)*perPage, n)
	hi = min(lo+perPage, n)
	if last > 1 {
		link = linkHeader(c, q, page, last)
	}
	return lo, hi, link
}

// linkHeader builds GitHub's pagination header, in GitHub's order: prev,
// next, last, first. Other query parameters (since, per_page) are kept.
func linkHeader(c *call, q url.Values, page, last int) string {
	link := func(p int, rel string) string {
		v := url.Values{}
		for k, vs := range q {
			v[k] = vs
		}
		v.Set("page", strconv.Itoa(p))
		return fmt.Sprintf(`<%s%s?%s>; rel="%s"`, c.api, strings.TrimPrefix(c.path, "/"), v.Encode(), rel)
	}
	var parts []string
	if page > 1 {
		parts = append(parts, link(min(page-1, last), "prev"))
	}
	if page < last {
		parts = append(parts, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		parts = append(parts, link(1, "first"))
	}
	return strings.Join(parts, ", ")
}

func (s *Server) getCommentLocked(c *call, r *repo) *response {
	cm, e := s.commentLocked(c, r, docGetComment)
	if e != nil {
		return e
	}
	return s.jsonResponse(http.StatusOK, s.renderCommentLocked(c.api, cm))
}

// commentBody validates a comment body the way GitHub does.
func (s *Server) commentBody(c *call, doc string) (string, *response) {
	var in struct {
		Body *string `json:"body"`
	}
	if e := s.decode(c, &in); e != nil {
		return "", e
	}
	if in.Body == nil || strings.TrimSpace(*in.Body) == "" {
		return "", s.validation(doc, "IssueComment", "body", "missing_field", "")
	}
	if utf8.RuneCountInString(*in.Body) > maxBody {
		return "", s.validation(doc, "IssueComment", "body", "custom", fmt.Sprintf("Body is too long (maximum is %d characters)", maxBody))
	}
	return *in.Body, nil
}

// commentWriteLocked is the body of a comment write, validated as GitHub
// does, with the write charged to the secondary limit.
func (s *Server) commentWriteLocked(c *call, doc string) (string, *response) {
	body, e := s.commentBody(c, doc)
	if e != nil {
		return "", e
	}
	if e := s.secondaryLocked(c); e != nil {
		return "", e
	}
	return body, nil
}

func (s *Server) createCommentHTTPLocked(c *call, r *repo) *response {
	is, e := s.issueLocked(c, r, docCreateComment)
	if e != nil {
		return e
	}
	body, e := s.commentWriteLocked(c, docCreateComment)
	if e != nil {
		return e
	}
	cm := s.createCommentLocked(r, is, c.login, body)
	return s.wroteLocked(http.StatusCreated, s.renderCommentLocked(c.api, cm),
		fmt.Sprintf("%srepos/%s/issues/comments/%d", c.api, r.name, cm.ID),
		Write{Kind: WriteComment, Repo: r.name, IssueNumber: is.Number, ID: cm.ID, Login: c.login})
}

func (s *Server) updateCommentLocked(c *call, r *repo) *response {
	cm, e := s.commentLocked(c, r, docUpdateComment)
	if e != nil {
		return e
	}
	body, e := s.commentWriteLocked(c, docUpdateComment)
	if e != nil {
		return e
	}
	cm.Body = body
	cm.UpdatedAt = s.stamp()
	return s.wroteLocked(http.StatusOK, s.renderCommentLocked(c.api, cm), "",
		Write{Kind: WriteCommentEdit, Repo: r.name, IssueNumber: cm.IssueNumber, ID: cm.ID, Login: c.login})
}

func (s *Server) reactCommentLocked(c *call, r *repo) *response {
	cm, e := s.commentLocked(c, r, docReactComment)
	if e != nil {
		return e
	}
	return s.reactLocked(c, r, cm.IssueNumber, cm.ID, docReactComment)
}

func (s *Server) reactIssueLocked(c *call, r *repo) *response {
	is, e := s.issueLocked(c, r, docReactIssue)
	if e != nil {
		return e
	}
	return s.reactLocked(c, r, is.Number, 0, docReactIssue)
}

// reactLocked adds a reaction, answering 201 when it is new and 200 with
// the existing reaction when this user already reacted so.
func (s *Server) reactLocked(c *call, r *repo, number int, commentID int64, doc string) *response {
	var in struct {
		Content string `json:"content"`
	}
	if e := s.decode(c, &in); e != nil {
		return e
	}
	if !slices.Contains(reactionContents, in.Content) {
		return s.validation(doc, "Reaction", "content", "invalid", "")
	}
	// A repeat is still a content-creating request as far as the budget
	// is concerned: GitHub counts requests, not what they stored.
	if e := s.secondaryLocked(c); e != nil {
		return e
	}
	key := reactionKey{repo: repoKey(r.name), number: number, commentID: commentID, login: c.login, content: in.Content}
	if old := s.st.reactions[key]; old != nil {
		return s.jsonResponse(http.StatusOK, s.renderReactionLocked(c.api, old))
	}
	s.st.lastReactionID++
	re := &Reaction{
		ID:          s.st.lastReactionID,
		Repo:        r.name,
		IssueNumber: number,
		CommentID:   commentID,
		Login:       c.login,
		Content:     in.Content,
		CreatedAt:   s.stamp(),
	}
	s.st.reactions[key] = re
	s.st.reactList = append(s.st.reactList, re)
	return s.wroteLocked(http.StatusCreated, s.renderReactionLocked(c.api, re), "",
		Write{Kind: WriteReaction, Repo: r.name, IssueNumber: number, ID: re.ID, Login: c.login})
}

func (s *Server) commitLocked(k WriteKind) {
	s.counts.Writes++
	switch k {
	case WriteIssue:
		s.counts.Issues++
	case WriteComment:
		s.counts.Comments++
	case WriteCommentEdit:
		s.counts.CommentEdits++
	case WriteReaction:
		s.counts.Reactions++
	}
	s.changedLocked()
}

// rateLimitLocked answers GET /rate_limit. Only "core" is tracked; the other
// resources are reported full, with GitHub's limits.
func (s *Server) rateLimitLocked(c *call) *response {
	w := s.primaryLocked(c.token, c.now)
	core := rateJSON{Limit: w.limit, Used: w.used, Remaining: w.remaining(), Reset: s.clk.toWall(w.reset).Unix()}
	if w.limit <= 0 {
		core.Limit, core.Remaining = 5000, 5000
	}
	full := func(limit int, d time.Duration) rateJSON {
		return rateJSON{Limit: limit, Remaining: limit, Reset: s.clk.toWall(c.now.Add(d)).Unix()}
	}
	return s.jsonResponse(http.StatusOK, map[string]any{
		"resources": map[string]rateJSON{
			"core":                        core,
			"search":                      full(30, time.Minute),
			"graphql":                     full(5000, time.Hour),
			"integration_manifest":        full(5000, time.Hour),
			"source_import":               full(100, time.Minute),
			"actions_runner_registration": full(10000, time.Hour),
			"scim":                        full(15000, time.Hour),
			"dependency_snapshots":        full(100, time.Minute),
			"code_search":                 full(10, time.Minute),
			"code_scanning_autofix":       full(10, time.Minute),
		},
		"rate": core,
	})
}
