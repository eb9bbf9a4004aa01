package route

import (
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// DefaultHost is the host a ref leaves out (docs/requirements.md K1).
const DefaultHost = "github.com"

// Ref is a work item on GitHub: github:[host/]owner/repo#N.
type Ref struct {
	Host   string // "" or "github.com" is github.com
	Repo   string // owner/repo
	Number int64
}

// String is the ref as it travels in ce-subject. The host is written only
// for GitHub Enterprise.
func (r Ref) String() string {
	if r.Host == "" || strings.EqualFold(r.Host, DefaultHost) {
		return fmt.Sprintf("github:%s#%d", r.Repo, r.Number)
	}
	return fmt.Sprintf("github:%s/%s#%d", strings.ToLower(r.Host), r.Repo, r.Number)
}

// same compares two refs the way GitHub does: host, owner and repository
// case-insensitively.
func (r Ref) same(o Ref) bool {
	h1, h2 := r.Host, o.Host
	if h1 == "" {
		h1 = DefaultHost
	}
	if h2 == "" {
		h2 = DefaultHost
	}
	return r.Number == o.Number && strings.EqualFold(h1, h2) && strings.EqualFold(r.Repo, o.Repo)
}

// Provenance says how a ref was found.
type Provenance string

// Provenances (docs/requirements.md K5).
const (
	FromClosingReference Provenance = "closing-reference"
	FromBranch           Provenance = "branch"
	FromKeyword          Provenance = "keyword"
	FromEntity           Provenance = "entity"
	// FromLink: a session recorded the pull request as delivering the
	// work item (`the-loop sessions link-pr`, package pkg/links).
	FromLink Provenance = "link"
)

// Item is one extracted work item.
type Item struct {
	Ref        Ref
	Provenance []Provenance
}

// BranchOnly reports whether the item was found only through a branch name,
// the one provenance that can name a work item nobody created
// (docs/requirements.md K5): consumers verify such refs before acting on them.
func (it Item) BranchOnly() bool {
	for _, p := range it.Provenance {
		if p != FromBranch {
			return false
		}
	}
	return len(it.Provenance) > 0
}

// Branch rule: "issue", then "-" or "/", then digits, anywhere
// (unanchored: "my-tissue-5" yields 5, a quirk kept on purpose).
var branchRule = regexp.MustCompile(`(?i)issue[-/](\d+)`)

// Closing keywords (docs/requirements.md K5), alternatives tried in order: an
// issue URL, an optionally qualified #N, GH-N.
var closingKeyword = regexp.MustCompile(`(?i)\b(?:close|closes|closed|fix|fixes|fixed|resolve|resolves|resolved)\s*:?\s+` +
	`(?:https?://([^/\s]+)/([\w.-]+)/([\w.-]+)/issues/(\d+)|(?:([\w.-]+)/([\w.-]+))?#(\d+)|GH-(\d+))`)

var urlIssuePath = regexp.MustCompile(`/([\w.-]+)/([\w.-]+)/issues/(\d+)`)

// hostOf returns the host of an html_url, or "".
func hostOf(raw string) string {
	if raw == "" {
		return ""
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return u.Host
}

// validRepo checks owner/repo.
func validRepo(s string) bool {
	owner, name, ok := strings.Cut(s, "/")
	return ok && owner != "" && name != "" && !strings.ContainsAny(name, "/ \t\r\n#") &&
		!strings.ContainsAny(owner, " \t\r\n#")
}

type collector struct {
	items []Item
}

func (c *collector) add(r Ref, p Provenance) {
	if r.Number <= 0 || !validRepo(r.Repo) {
		return
	}
	for i := range c.items {
		if c.items[i].Ref.same(r) {
			for _, q := range c.items[i].Provenance {
				if q == p {
					return
				}
			}
			c.items[i].Provenance = append(c.items[i].Provenance, p)
			return
		}
	}
	c.items = append(c.items, Item{Ref: r, Provenance: []Provenance{p}})
}

// prEntity returns the pull request an event is about, if any.
func prEntity(event string, p obj) obj {
	switch {
	case strings.HasPrefix(event, "pull_request"):
		return p.obj("pull_request")
	case event == "issues" || event == "issue_comment":
		if is := p.obj("issue"); is != nil && is.has("pull_request") {
			return is
		}
		// The poll path's fallback (docs/requirements.md K16); unreachable from
		// webhooks.
		return p.obj("pull_request")
	}
	return nil
}

// ExtractWorkItems returns the work items an event is about, most
// authoritative first: a PR's linked issues (closing references, branch
// rule, closing keywords), then the PR itself; an issue's own number; a CI
// event's pull requests and branches (docs/requirements.md K5).
func ExtractWorkItems(event string, p obj) []Item {
	repo := p.obj("repository")
	full := repo.str("full_name")
	if !validRepo(full) {
		return nil
	}
	host := eventHost(p)
	c := &collector{}
	if pr := prEntity(event, p); pr != nil {
		c.pullRequest(pr, host, full)
		return c.items
	}
	here := func(n int64) Ref { return Ref{Host: host, Repo: full, Number: n} }
	switch event {
	case "issues", "issue_comment":
		if n, ok := p.obj("issue").int("number"); ok {
			c.add(here(n), FromEntity)
		}
		return c.items
	}
	var ci obj
	switch event {
	case "workflow_run":
		ci = p.obj("workflow_run")
	case "check_run":
		ci = p.obj("check_run").obj("check_suite")
	case "check_suite":
		ci = p.obj("check_suite")
	case "status":
		ci = nil
	default:
		return nil
	}
	for _, pr := range ci.objs("pull_requests") {
		if n, ok := pr.int("number"); ok {
			c.add(here(n), FromEntity)
		}
	}
	if n, ok := branchNumber(ci.str("head_branch")); ok {
		c.add(here(n), FromBranch)
	}
	if event == "status" {
		for _, b := range p.objs("branches") {
			if n, ok := branchNumber(b.str("name")); ok {
				c.add(here(n), FromBranch)
			}
		}
	}
	return c.items
}

// eventHost is the GitHub host the event's repository lives on.
func eventHost(p obj) string {
	for _, key := range [...]string{"repository", "issue", "pull_request"} {
		if host := hostOf(p.obj(key).str("html_url")); host != "" {
			return host
		}
	}
	return DefaultHost
}

// pullRequest collects a PR's linked issues (closing references, branch
// rule, closing keywords), other than itself, then the PR.
func (c *collector) pullRequest(pr obj, host, full string) {
	here := func(n int64) Ref { return Ref{Host: host, Repo: full, Number: n} }
	own, hasOwn := pr.int("number")
	self := func(r Ref) bool { return hasOwn && r.same(here(own)) }
	for _, ref := range pr.objs("closingIssuesReferences") {
		n, ok := ref.int("number")
		if !ok {
			continue
		}
		r := Ref{Host: host, Repo: closingRefRepo(ref, full), Number: n}
		if !self(r) {
			c.add(r, FromClosingReference)
		}
	}
	if n, ok := branchNumber(pr.obj("head").str("ref")); ok && !self(here(n)) {
		c.add(here(n), FromBranch)
	}
	for _, r := range keywordRefs(pr.str("body"), host, full) {
		if !self(r) {
			c.add(r, FromKeyword)
		}
	}
	if hasOwn {
		c.add(here(own), FromEntity)
	}
}

// branchNumber is the work item a branch name names by the branch rule.
func branchNumber(branch string) (int64, bool) {
	m := branchRule.FindStringSubmatch(branch)
	if m == nil {
		return 0, false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return n, err == nil
}

// closingRefRepo is the repository of a closingIssuesReferences entry.
func closingRefRepo(ref obj, fallback string) string {
	r := ref.obj("repository")
	if s := r.str("nameWithOwner"); validRepo(s) {
		return s
	}
	if o, n := r.obj("owner").str("login"), r.str("name"); o != "" && n != "" && validRepo(o+"/"+n) {
		return o + "/" + n
	}
	if m := urlIssuePath.FindStringSubmatch(ref.str("url")); m != nil {
		return m[1] + "/" + m[2]
	}
	return fallback
}

// keywordRefs finds closing-keyword references in a PR body. A qualified
// other/repo#N or an issue URL names that repository (docs/requirements.md K5).
func keywordRefs(body, host, repo string) []Ref {
	if body == "" {
		return nil
	}
	var out []Ref
	for _, m := range closingKeyword.FindAllStringSubmatch(body, -1) {
		var r Ref
		var digits string
		switch {
		case m[4] != "":
			r = Ref{Host: m[1], Repo: m[2] + "/" + m[3]}
			digits = m[4]
		case m[7] != "":
			r = Ref{Host: host, Repo: repo}
			if m[5] != "" {
				r.Repo = m[5] + "/" + m[6]
			}
			digits = m[7]
		default:
			r = Ref{Host: host, Repo: repo}
			digits = m[8]
		}
		n, err := strconv.ParseInt(digits, 10, 64)
		if err != nil {
			continue
		}
		r.Number = n
		out = append(out, r)
	}
	return out
}

// Actor is the GitHub login an event is attributed to
// (docs/requirements.md K4), or "" for CI events, which carry no instructions.
func Actor(event string, p obj) string {
	switch {
	case event == "issue_comment", event == "pull_request_review_comment":
		return login(p.obj("comment"))
	case event == "pull_request_review":
		return login(p.obj("review"))
	case event == "issues", strings.HasPrefix(event, "pull_request"):
		return p.obj("sender").str("login")
	}
	return ""
}

// LabelCarried reports whether the event carries label (exact): a labeled
// action naming it, or the issue's or PR's labels.
func LabelCarried(p obj, label string) bool {
	if label == "" {
		return false
	}
	if p.str("action") == "labeled" && p.obj("label").str("name") == label {
		return true
	}
	for _, key := range []string{"issue", "pull_request"} {
		for _, l := range p.obj(key).objs("labels") {
			if l.str("name") == label {
				return true
			}
		}
	}
	return false
}

// PullRequestRef is the ref of the pull request an event is about, "" when
// it is about none: the one ref whose links (Policy.Linked) can add work
// items.
func PullRequestRef(event string, p Payload) string {
	full := p.o.obj("repository").str("full_name")
	pr := prEntity(event, p.o)
	if pr == nil || !validRepo(full) {
		return ""
	}
	n, ok := pr.int("number")
	if !ok || n <= 0 {
		return ""
	}
	return Ref{Host: eventHost(p.o), Repo: full, Number: n}.String()
}

// withLinks puts the work items linked to the pull request pr before it
// among items, as its other linked issues stand.
func withLinks(items []Item, pr string, linked []string) []Item {
	if pr == "" || len(linked) == 0 {
		return items
	}
	at := len(items)
	for i, it := range items {
		if it.Ref.String() == pr {
			at = i
			break
		}
	}
	c := &collector{items: slices.Clone(items[:at])}
	for _, l := range linked {
		if r, ok := ParseRef(l); ok && r.String() != pr {
			c.add(r, FromLink)
		}
	}
	for _, it := range items[at:] {
		for _, p := range it.Provenance {
			c.add(it.Ref, p)
		}
	}
	return c.items
}

// ParseRef reads a ref as Ref.String writes it: github:[host/]owner/repo#N.
func ParseRef(s string) (Ref, bool) {
	rest, ok := strings.CutPrefix(s, "github:")
	if !ok {
		return Ref{}, false
	}
	path, num, ok := strings.Cut(rest, "#")
	n, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || n <= 0 {
		return Ref{}, false
	}
	parts := strings.Split(path, "/")
	r := Ref{Number: n}
	switch len(parts) {
	case 2:
		r.Repo = path
	case 3:
		r.Host, r.Repo = parts[0], parts[1]+"/"+parts[2]
	default:
		return Ref{}, false
	}
	if !validRepo(r.Repo) {
		return Ref{}, false
	}
	return r, true
}
