// Package poll reads GitHub by polling, for deployments GitHub cannot reach:
// each cycle lists the open work items carrying the label in each repository
// and the new comments on those that changed, with conditional requests
// (ETag: an unchanged listing costs no rate limit) and cursors kept in the
// cursors KV bucket, and turns them into payloads equivalent to the webhook's
// (docs/requirements.md K16) for the same router. Comment events take their ids
// from the comment, so a comment the webhook also delivered is stored once
// (decision 010).
//
// Scope: issue and pull-request conversation comments (the issues API), the
// label's first sight (an issues/labeled activity) and closes. Review
// comments and reviews are webhook-only.
package poll

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/the-loop/bus/pkg/bus"
)

// Delivery is one synthesised webhook delivery.
type Delivery struct {
	Event   string
	ID      string // synthetic delivery id: poll-…
	Payload []byte
}

// Config configures a Poller.
type Config struct {
	Conn *bus.Conn
	Log  *slog.Logger
	// GitHub is the service's client (pkg/githubclient): its base URL,
	// authentication and timeout.
	GitHub   *github.Client
	Repos    []string // owner/repo
	Label    string
	Interval time.Duration
	Now      func() time.Time
	// Deliver routes and publishes a delivery; an error stops the
	// repository's cycle before its cursor moves (retried next cycle).
	Deliver func(ctx context.Context, d Delivery) error
	// Observe counts each GitHub request by result; Cycle each cycle.
	Observe, Cycle func(result string)
}

// Poller polls GitHub.
type Poller struct {
	cfg Config
	c   *client
}

// New returns a Poller.
func New(cfg Config) (*Poller, error) {
	if cfg.Conn == nil || cfg.Deliver == nil || cfg.Log == nil || cfg.GitHub == nil {
		return nil, errors.New("poll: Conn, Deliver, Log and GitHub are required")
	}
	for _, r := range cfg.Repos {
		if o, n, ok := strings.Cut(r, "/"); !ok || o == "" || n == "" || strings.Contains(n, "/") {
			return nil, fmt.Errorf("poll: repository %q: want owner/repo", r)
		}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	nop := func(string) {}
	if cfg.Observe == nil {
		cfg.Observe = nop
	}
	if cfg.Cycle == nil {
		cfg.Cycle = nop
	}
	return &Poller{cfg: cfg, c: &client{gh: cfg.GitHub, observe: cfg.Observe}}, nil
}

// Run polls every Interval until ctx ends.
func (p *Poller) Run(ctx context.Context) error {
	p.cfg.Log.InfoContext(ctx, "poller started", "repos", p.cfg.Repos, "label", p.cfg.Label, "interval", p.cfg.Interval.String())
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := p.Cycle(ctx); err != nil && ctx.Err() == nil {
			p.cfg.Log.WarnContext(ctx, "poll cycle failed", "err", err)
		}
		t.Reset(p.cfg.Interval)
	}
}

// Cycle polls every repository once. It returns the errors of the
// repositories that failed; the others are done.
func (p *Poller) Cycle(ctx context.Context) error {
	var errs []error
	for _, repo := range p.cfg.Repos {
		if ctx.Err() != nil {
			break
		}
		if err := p.repo(ctx, repo); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", repo, err))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		p.cfg.Cycle("error")
	} else {
		p.cfg.Cycle("ok")
	}
	return err
}

// repoState is a repository's cursor, in the cursors bucket.
type repoState struct {
	// Since is when polling of the repository began: comments older than
	// it on a newly seen work item are history, not news.
	Since    time.Time             `json:"since"`
	ListETag string                `json:"list_etag,omitempty"`
	Items    map[string]*itemState `json:"items"`
}

type itemState struct {
	UpdatedAt     string `json:"updated_at"`
	Comments      int    `json:"comments"`
	LastComment   int64  `json:"last_comment_id"`
	CommentsSince string `json:"comments_since,omitempty"`
	CommentsETag  string `json:"comments_etag,omitempty"`
}

func stateKey(repo string) string { return "github-poll:" + strings.ToLower(repo) }

func (p *Poller) repo(ctx context.Context, repo string) error {
	kv, err := p.cfg.Conn.KV(ctx, bus.BucketCursors)
	if err != nil {
		return err
	}
	st := &repoState{Since: p.cfg.Now().UTC().Truncate(time.Second), Items: map[string]*itemState{}}
	var rev uint64
	if e, err := kv.Get(ctx, stateKey(repo)); err == nil {
		if err := json.Unmarshal(e.Value, st); err != nil {
			return fmt.Errorf("cursor: %w", err)
		}
		if st.Items == nil {
			st.Items = map[string]*itemState{}
		}
		rev = e.Revision
	} else if !errors.Is(err, bus.ErrNotFound) {
		return err
	}

	q := url.Values{"state": {"open"}, "labels": {p.cfg.Label}, "sort": {"updated"}, "direction": {"desc"}, "per_page": {"100"}}
	items, etag, single, err := getAll[restIssue](ctx, p.c, "repos/"+repo+"/issues", q, st.ListETag)
	if errors.Is(err, errNotModified) {
		return nil // nothing changed on any listed item (a comment bumps updated_at)
	}
	if err != nil {
		return err
	}
	st.ListETag = ""
	if single {
		st.ListETag = etag
	}
	listed := map[string]bool{}
	for _, is := range items {
		key := strconv.FormatInt(is.Number, 10)
		listed[key] = true
		if err := p.item(ctx, repo, is, st); err != nil {
			return err
		}
	}
	for key := range st.Items {
		if listed[key] {
			continue
		}
		if err := p.gone(ctx, repo, key, st); err != nil {
			return err
		}
	}
	b, _ := json.Marshal(st)
	_, err = kv.CompareAndSet(ctx, stateKey(repo), b, rev)
	if bus.IsConflict(err) {
		// Another replica polled too; its cursor wins, and the events
		// both raised carry the same ids.
		p.cfg.Log.InfoContext(ctx, "poll cursor moved by another poller", "repo", repo)
		return nil
	}
	return err
}

func (p *Poller) item(ctx context.Context, repo string, is restIssue, st *repoState) error {
	key := strconv.FormatInt(is.Number, 10)
	it, known := st.Items[key]
	full := repoFromURL(is.RepositoryURL)
	if full == "" {
		full = repo
	}
	if !known {
		it = &itemState{}
		updated, _ := time.Parse(time.RFC3339, is.UpdatedAt)
		d := Delivery{
			Event:   "issues",
			ID:      fmt.Sprintf("poll-labeled-%s-%d-%d", idRepo(repo), is.Number, updated.Unix()),
			Payload: mustJSON(itemPayload(full, is, "labeled", p.cfg.Label)),
		}
		if err := p.cfg.Deliver(ctx, d); err != nil {
			return err
		}
	} else if it.UpdatedAt == is.UpdatedAt && it.Comments == is.Comments {
		// updated_at has whole seconds: the count catches a comment made
		// in the same second as the last look.
		return nil
	}
	sentSince := it.CommentsSince
	q := url.Values{"per_page": {"100"}}
	if it.CommentsSince != "" {
		q.Set("since", it.CommentsSince)
	}
	comments, etag, single, err := getAll[restComment](ctx, p.c, fmt.Sprintf("repos/%s/issues/%d/comments", repo, is.Number), q, it.CommentsETag)
	switch {
	case errors.Is(err, errNotModified):
	case err != nil:
		return err
	default:
		slices.SortFunc(comments, func(a, b restComment) int { return cmp.Compare(a.ID, b.ID) })
		for _, c := range comments {
			if c.ID <= it.LastComment {
				continue
			}
			if !known && c.CreatedAt < st.Since.Format(time.RFC3339) {
				it.LastComment = c.ID // history before polling began
				continue
			}
			d := Delivery{Event: "issue_comment", ID: "poll-comment-" + strconv.FormatInt(c.ID, 10), Payload: mustJSON(commentPayload(full, is, c))}
			if err := p.cfg.Deliver(ctx, d); err != nil {
				return err
			}
			it.LastComment = c.ID
		}
		for _, c := range comments {
			if c.UpdatedAt > it.CommentsSince {
				it.CommentsSince = c.UpdatedAt
			}
		}
		// The ETag stands for this exact query; keep it only if the
		// next cycle asks the same (same since, one page).
		it.CommentsETag = ""
		if single && it.CommentsSince == sentSince {
			it.CommentsETag = etag
		}
	}
	it.UpdatedAt, it.Comments = is.UpdatedAt, is.Comments
	st.Items[key] = it
	return nil
}

// gone handles a work item no longer listed: closed (raise the close), or
// unlabelled or deleted (forget it).
func (p *Poller) gone(ctx context.Context, repo, key string, st *repoState) error {
	var is restIssue
	_, err := p.c.get(ctx, "repos/"+repo+"/issues/"+key, "", &is)
	var se *statusError
	switch {
	case errors.As(err, &se) && (se.code == http.StatusNotFound || se.code == http.StatusGone):
		delete(st.Items, key)
		return nil
	case err != nil:
		return err
	}
	if is.State == "closed" {
		full := repoFromURL(is.RepositoryURL)
		if full == "" {
			full = repo
		}
		event, how := "issues", "closed"
		if is.PullRequest != nil {
			event = "pull_request"
			if is.PullRequest.MergedAt != nil {
				how = "merged"
			}
		}
		d := Delivery{Event: event, ID: fmt.Sprintf("poll-close-%s-%s-%s", idRepo(repo), key, how), Payload: mustJSON(closePayload(full, event, is))}
		if err := p.cfg.Deliver(ctx, d); err != nil {
			return err
		}
	}
	delete(st.Items, key)
	return nil
}

// idRepo writes owner/repo into a synthetic delivery id: lower-case (GitHub
// names are case-insensitive) and without '/' (event ids keep '/' for the
// copies of one event on other work items).
func idRepo(repo string) string { return strings.ReplaceAll(strings.ToLower(repo), "/", ":") }

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("poll: marshal synthesised payload: %v", err)) // only maps of strings and numbers
	}
	return b
}

func labels(is restIssue) []map[string]any {
	out := []map[string]any{}
	for _, l := range is.Labels {
		out = append(out, map[string]any{"name": l.Name})
	}
	return out
}

// entityPayload is the issue object a webhook carries, as far as routing
// reads it. A PR seen through the issues API keeps its pull_request key, so
// it routes as a PR conversation (linked issues from its body first).
func entityPayload(is restIssue) map[string]any {
	e := map[string]any{
		"number":   is.Number,
		"title":    is.Title,
		"html_url": is.HTMLURL,
		"state":    is.State,
		"labels":   labels(is),
		"user":     map[string]any{"login": is.User.Login},
	}
	if is.Body != nil {
		e["body"] = *is.Body
	}
	if is.PullRequest != nil {
		e["pull_request"] = map[string]any{"html_url": is.PullRequest.HTMLURL, "merged_at": is.PullRequest.MergedAt}
	}
	return e
}

func itemPayload(repo string, is restIssue, action, label string) map[string]any {
	return map[string]any{
		"action":     action,
		"issue":      entityPayload(is),
		"label":      map[string]any{"name": label},
		"repository": map[string]any{"full_name": repo},
	}
}

func commentPayload(repo string, is restIssue, c restComment) map[string]any {
	cm := map[string]any{
		"id":                 c.ID,
		"node_id":            c.NodeID,
		"html_url":           c.HTMLURL,
		"author_association": c.AuthorAssociation,
		"created_at":         c.CreatedAt,
		"updated_at":         c.UpdatedAt,
	}
	if c.Body != nil {
		cm["body"] = *c.Body
	}
	if c.User != nil {
		cm["user"] = map[string]any{"login": c.User.Login}
	}
	return map[string]any{
		"action":     "created",
		"issue":      entityPayload(is),
		"comment":    cm,
		"repository": map[string]any{"full_name": repo},
	}
}

func closePayload(repo, event string, is restIssue) map[string]any {
	p := map[string]any{"action": "closed", "repository": map[string]any{"full_name": repo}}
	e := entityPayload(is)
	if event == "pull_request" {
		delete(e, "pull_request")
		e["merged"] = is.PullRequest.MergedAt != nil
		p["pull_request"] = e
	} else {
		p["issue"] = e
	}
	return p
}
