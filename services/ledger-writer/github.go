package ledgerwriter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/githubapp"
	"github.com/the-loop/bus/pkg/githubclient"
)

// ghClient is the ledger's GitHub side: the five REST calls the writer makes
// (create a comment, create an issue, list an issue's comments, get an issue,
// get its own user)
// and the classification of their failures. It is the only file of the
// service that imports go-github.
type ghClient struct {
	c *github.Client
	// onRate receives x-ratelimit-remaining of every response (the headroom
	// gauge).
	onRate func(remaining int)
	// app, with GitHub App authentication, is what knows the ledger's
	// login (its bot's): installation tokens cannot call GET /user.
	app *githubapp.App
}

// newGHClient builds the writer's client on the one GitHub client
// (docs/decisions/083-one-github-client.md).
func newGHClient(o githubclient.Options) (*ghClient, error) {
	c, err := githubclient.New(o)
	if err != nil {
		return nil, err
	}
	return &ghClient{c: c.GitHub, app: c.App}, nil
}

// repoRef is a parsed work-item ref, github:owner/repo#N.
type repoRef struct {
	Owner, Repo string
	Number      int
}

func (r repoRef) FullName() string { return r.Owner + "/" + r.Repo }

var refRE = regexp.MustCompile(`^github:([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})#([1-9][0-9]{0,9})$`)

// parseRef parses a GitHub work-item ref. Anything else is not a place the
// ledger can write to.
func parseRef(ref string) (repoRef, bool) {
	m := refRE.FindStringSubmatch(ref)
	if m == nil || m[2] == "." || m[2] == ".." {
		return repoRef{}, false
	}
	n, err := strconv.Atoi(m[3])
	if err != nil {
		return repoRef{}, false
	}
	return repoRef{Owner: m[1], Repo: m[2], Number: n}, true
}

var repoRE = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9-]{0,38})/([A-Za-z0-9._-]{1,100})$`)

// parseRepo parses owner/repo (channels.slack.kickoff.repo).
func parseRepo(s string) (owner, repo string, ok bool) {
	m := repoRE.FindStringSubmatch(s)
	if m == nil || m[2] == "." || m[2] == ".." {
		return "", "", false
	}
	return m[1], m[2], true
}

// written is what a successful write or read-back found: the ledger record.
type written struct {
	Repo      string
	Number    int
	CommentID int64
	URL       string
}

// failure classifies a GitHub error.
type failure struct {
	err error
	// permanent: no retry can fix it (404, 410, 422, 400, 403 that is not a
	// rate limit).
	permanent bool
	// reason is a short code for logs, metrics and the DLQ reason.
	reason string
	// wait is how long to wait before the next attempt (0: back off).
	wait time.Duration
	// limited: a rate limit, the credential's and shared by every
	// partition: waited out inside the delivery a few times before it
	// spends one. Any other wait (a 5xx's Retry-After) spaces deliveries.
	limited bool
	// maybeWritten: the request may have been committed (5xx, timeout,
	// dropped connection), so the next attempt must read back first.
	maybeWritten bool
	// held: the credential, not the event, fails (401): every event
	// alike waits for the operator, as without a token.
	held bool
}

func (f *failure) Error() string { return f.err.Error() }
func (f *failure) Unwrap() error { return f.err }

// classify turns a go-github error into a failure. now is the wall clock.
func classify(err error, now time.Time) *failure {
	var rl *github.RateLimitError
	var abuse *github.AbuseRateLimitError
	var er *github.ErrorResponse
	switch {
	case errors.As(err, &rl):
		// Primary limit exhausted; go-github refuses further requests
		// until the reset, so wait for it. Nothing was written.
		return &failure{err: err, reason: "rate-limited", wait: max(rl.Rate.Reset.Time.Sub(now), 0) + time.Second, limited: true}
	case errors.As(err, &abuse):
		w := time.Minute // GitHub: "otherwise wait at least one minute"
		if abuse.RetryAfter != nil {
			w = *abuse.RetryAfter
		}
		return &failure{err: err, reason: "secondary-rate-limited", wait: w, limited: true}
	case errors.As(err, &er) && er.Response != nil:
		st := er.Response.StatusCode
		switch {
		case st == http.StatusTooManyRequests:
			// go-github v62 does not special-case 429: read the headers.
			return &failure{err: err, reason: "rate-limited", wait: retryAfter(er.Response.Header, now), limited: true}
		case st == http.StatusUnauthorized:
			// A bad or revoked token fails every event alike: hold them
			// all until the operator fixes it, rather than dead-letter
			// the whole inbox.
			return &failure{err: err, reason: "unauthorized-token", wait: time.Minute, held: true}
		case st == http.StatusForbidden && er.Response.Header.Get("X-Ratelimit-Remaining") == "0":
			return &failure{err: err, reason: "rate-limited", wait: retryAfter(er.Response.Header, now), limited: true}
		case st == http.StatusNotFound:
			return &failure{err: err, permanent: true, reason: "not-found"}
		case st == http.StatusGone:
			return &failure{err: err, permanent: true, reason: "gone"}
		case st == http.StatusUnprocessableEntity, st == http.StatusBadRequest:
			return &failure{err: err, permanent: true, reason: "invalid"}
		case st == http.StatusForbidden:
			return &failure{err: err, permanent: true, reason: "forbidden"}
		case st >= 500:
			// A 503 may say when to come back (Retry-After): the next
			// delivery waits that long (capped) instead of the backoff
			// (docs/decisions/040-retry-after-on-5xx.md).
			return &failure{err: err, reason: "github-unavailable", maybeWritten: true, wait: retryAfterSeconds(er.Response.Header)}
		}
		return &failure{err: err, reason: "github-error", maybeWritten: true}
	}
	// Transport errors, timeouts, a dropped connection: the request may
	// have been committed.
	return &failure{err: err, reason: "github-unreachable", maybeWritten: true}
}

// retryAfterSeconds reads a Retry-After of delay-seconds, 0 when there is
// none.
func retryAfterSeconds(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// retryAfter reads Retry-After, else x-ratelimit-reset, else a minute.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if s, err := strconv.Atoi(h.Get("Retry-After")); err == nil && s >= 0 {
		return time.Duration(s) * time.Second
	}
	if h.Get("X-Ratelimit-Remaining") == "0" {
		if s, err := strconv.ParseInt(h.Get("X-Ratelimit-Reset"), 10, 64); err == nil {
			return max(time.Unix(s, 0).Sub(now), 0) + time.Second
		}
	}
	return time.Minute
}

func (g *ghClient) observe(resp *github.Response) {
	if resp != nil && g.onRate != nil && resp.Response != nil && resp.Header.Get("X-Ratelimit-Remaining") != "" {
		g.onRate(resp.Rate.Remaining)
	}
}

func (g *ghClient) createComment(ctx context.Context, r repoRef, body string) (written, error) {
	c, resp, err := g.c.Issues.CreateComment(ctx, r.Owner, r.Repo, r.Number, &github.IssueComment{Body: github.String(body)})
	g.observe(resp)
	if err != nil {
		return written{}, g.fail(ctx, err)
	}
	return written{Repo: r.FullName(), Number: r.Number, CommentID: c.GetID(), URL: c.GetHTMLURL()}, nil
}

func (g *ghClient) createIssue(ctx context.Context, owner, repo, title, body string, labels []string) (written, error) {
	req := &github.IssueRequest{Title: github.String(title), Body: github.String(body)}
	if len(labels) > 0 {
		req.Labels = &labels
	}
	is, resp, err := g.c.Issues.Create(ctx, owner, repo, req)
	g.observe(resp)
	if err != nil {
		return written{}, g.fail(ctx, err)
	}
	return written{Repo: owner + "/" + repo, Number: is.GetNumber(), URL: is.GetHTMLURL()}, nil
}

// login is the token's own GitHub login (GET /user): the ledger's login.
func (g *ghClient) login(ctx context.Context) (string, error) {
	if g.app != nil {
		return g.app.Login(ctx)
	}
	u, resp, err := g.c.Users.Get(ctx, "")
	g.observe(resp)
	if err != nil {
		return "", g.fail(ctx, err)
	}
	if u.GetLogin() == "" {
		return "", errors.New("GET /user: no login in the answer")
	}
	return u.GetLogin(), nil
}

// findComment reads back every comment of the work item (paginated) and
// returns the one whose verified envelope names id.
func (g *ghClient) findComment(ctx context.Context, r repoRef, key []byte, id string) (written, bool, error) {
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for {
		cs, resp, err := g.c.Issues.ListComments(ctx, r.Owner, r.Repo, r.Number, opts)
		g.observe(resp)
		if err != nil {
			return written{}, false, g.fail(ctx, err)
		}
		for _, c := range cs {
			if carries(key, envelope.Binding{Repo: r.FullName(), Number: r.Number}, c.GetBody(), id) {
				return written{Repo: r.FullName(), Number: r.Number, CommentID: c.GetID(), URL: c.GetHTMLURL()}, true, nil
			}
		}
		if resp.NextPage == 0 {
			return written{}, false, nil
		}
		opts.Page = resp.NextPage
	}
}

// findIssue reads back the issues numbered after `after`, in order, until the
// first number that does not exist, and returns the one whose verified
// envelope names id. GitHub numbers issues and pull requests from one
// sequence and never reuses a number, so an issue created after the claim
// (which recorded `after`) is among them.
func (g *ghClient) findIssue(ctx context.Context, owner, repo string, after int, key []byte, id string) (written, bool, error) {
	for n := after + 1; ; n++ {
		is, resp, err := g.c.Issues.Get(ctx, owner, repo, n)
		g.observe(resp)
		if err != nil {
			f := g.fail(ctx, err)
			var ff *failure
			if errors.As(f, &ff) && ff.permanent {
				switch ff.reason {
				case "not-found":
					return written{}, false, nil // past the newest number
				case "gone":
					continue // a deleted issue keeps its number
				}
			}
			return written{}, false, f
		}
		if carries(key, envelope.IssueBody(owner+"/"+repo), is.GetBody(), id) {
			return written{Repo: owner + "/" + repo, Number: is.GetNumber(), URL: is.GetHTMLURL()}, true, nil
		}
	}
}

// fail classifies err, or returns ctx's error when the call was cut short by
// the caller (a shutdown, not GitHub).
func (g *ghClient) fail(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return &failure{err: fmt.Errorf("github: %w", ctx.Err()), reason: "cancelled", maybeWritten: true}
	}
	return classify(err, time.Now())
}

// carries reports whether body, read from the record at b, holds a verified
// envelope for event id. A valid signature means the ledger-writer wrote it
// there (nobody else has the key), so a copy of E's envelope on another record
// or under other words is not E's record.
func carries(key []byte, b envelope.Binding, body, id string) bool {
	if !strings.Contains(body, "the-loop:envelope") {
		return false
	}
	l, err := envelope.ParseLedger(key, b, body)
	return err == nil && l.ID == id
}

// react adds content to a comment of repo (commentID, of a pull request's
// review when review is set) or to issue number itself (commentID 0).
// GitHub answers a reaction its user already left with that reaction (200),
// so a repeat adds nothing: the call is idempotent.
func (g *ghClient) react(ctx context.Context, r repoRef, commentID int64, review bool, content string) error {
	var resp *github.Response
	var err error
	switch {
	case commentID != 0 && review:
		_, resp, err = g.c.Reactions.CreatePullRequestCommentReaction(ctx, r.Owner, r.Repo, commentID, content)
	case commentID != 0:
		_, resp, err = g.c.Reactions.CreateIssueCommentReaction(ctx, r.Owner, r.Repo, commentID, content)
	default:
		_, resp, err = g.c.Reactions.CreateIssueReaction(ctx, r.Owner, r.Repo, r.Number, content)
	}
	g.observe(resp)
	if err != nil {
		return g.fail(ctx, err)
	}
	return nil
}

// phaseLabel makes label the only label of the issue that starts with
// prefix: the others of the prefix are removed, then label is added when it
// is missing. Reading first makes a repeat write nothing. pace is called
// before each write (each is a content write under GitHub's secondary
// limits); its error is returned as is, nothing further written.
func (g *ghClient) phaseLabel(ctx context.Context, r repoRef, prefix, label string, pace func() error) (changed bool, err error) {
	var have []string
	opts := &github.ListOptions{PerPage: 100}
	for {
		ls, resp, err := g.c.Issues.ListLabelsByIssue(ctx, r.Owner, r.Repo, r.Number, opts)
		g.observe(resp)
		if err != nil {
			return false, g.fail(ctx, err)
		}
		for _, l := range ls {
			have = append(have, l.GetName())
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	found := false
	for _, name := range have {
		switch {
		case name == label:
			found = true
		case strings.HasPrefix(name, prefix):
			if err := pace(); err != nil {
				return changed, err
			}
			resp, err := g.c.Issues.RemoveLabelForIssue(ctx, r.Owner, r.Repo, r.Number, name)
			g.observe(resp)
			if err != nil && (resp == nil || resp.StatusCode != http.StatusNotFound) {
				// A 404 is a label someone removed meanwhile.
				return changed, g.fail(ctx, err)
			}
			changed = true
		}
	}
	if found {
		return changed, nil
	}
	if err := pace(); err != nil {
		return changed, err
	}
	_, resp, err := g.c.Issues.AddLabelsToIssue(ctx, r.Owner, r.Repo, r.Number, []string{label})
	g.observe(resp)
	if err != nil {
		return changed, g.fail(ctx, err)
	}
	return true, nil
}
