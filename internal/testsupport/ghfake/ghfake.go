// Package ghfake is an in-process HTTP fake of the part of the GitHub REST
// API that the-loop calls: issues, issue comments, reactions, an issue's
// labels, GET /user and GET /rate_limit, as GitHub documents them (its tests
// check the fake's answers against recorded ones; the labels, which no
// recording covers, follow GitHub's documentation: labels.go).
// Tests of the ledger-writer and of ingress-github point a real client
// (go-github, through BaseURL or WithEnterpriseURLs, or LOOP_GITHUB_API_URL)
// at Server.URL and get GitHub's status codes, bodies and headers back,
// including the primary and secondary rate limits, which the fake enforces
// against an injectable, optionally scaled clock.
//
// Beyond what GitHub does, the fake lets a test fail requests on purpose
// (SetDown, FailNext, Inject, OnRequest), observe or interrupt a write
// between its commit and its response (AfterWrite, DropResponseAfterWrite:
// the "did my comment land?" case a crash-safe writer must survive), and
// read back everything it stored (Issues, Comments, Requests, Counts, Wait).
//
// Time. Budgets are counted on the fake's clock, which is one of:
//
//   - the real clock (default);
//   - WithTimeScale(f): fake time runs f times faster than the wall clock,
//     from the moment New returns. Header values a client acts on are
//     translated back to the wall clock: Retry-After is the wall-clock wait,
//     rounded up to whole seconds (at least 1), and x-ratelimit-reset is the
//     wall-clock instant at which the fake window resets. An unmodified
//     client that sleeps with time.Sleep, including go-github's own
//     client-side rate-limit cache (which compares those headers with
//     time.Now and refuses requests until then), therefore waits the right
//     amount of scaled time. With f=60 an "80 writes per minute" budget is
//     80 per wall second. Server.Sleep sleeps a fake duration on this clock;
//   - WithClock(now): any clock the test owns, typically a ManualClock.
//     Header values are reported in that clock's time, as GitHub would, so
//     the client must sleep on the same clock (ManualClock.Sleep advances it
//     at once). Caveat: go-github remembers Retry-After and a zero
//     x-ratelimit-remaining against the wall clock and refuses further
//     requests without sending them, so after a test hits a limit on a
//     manual clock it must use a new go-github client.
//
// Injected latencies (Rule.Delay) are wall-clock durations: they stand for
// the network, and client timeouts are wall-clock too.
//
// The package is test support: only _test.go files and test helpers may
// import it. It imports neither go-github nor anything of the-loop, so that
// it tests the client from the outside.
package ghfake

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"sync"
	"time"
)

// Server is a running fake. It is safe for concurrent use by any number of
// clients and test goroutines.
type Server struct {
	t  reporter
	ts *httptest.Server
	// closeOnce guards Close, which a test's cleanup and a caller may both run.
	closeOnce sync.Once
	clk       clock
	cfg       config
	closing   chan struct{}

	mu        sync.Mutex
	st        state
	primary   map[string]*primaryWindow // key: token, or "" for unauthenticated
	writeLogs map[string]*writeLog      // key: token
	down      bool
	rules     []*rule
	onRequest func(*http.Request) (int, bool)
	hooks     []*writeHook
	dropNext  int
	requests  []Request
	counts    Counts
	changed   chan struct{}
	seq       int64
	// app is the GitHub App registered with InstallApp, if any.
	app *appState
}

type config struct {
	clk             clock
	primaryLimit    int
	perMinute       int
	perHour         int
	secondaryStatus int
}

// Option configures New.
type Option func(*config)

// WithPrimaryLimit sets the primary limit: requests per hour per token
// (GitHub: 5,000 for a user token, the default). 0 disables it.
func WithPrimaryLimit(perHour int) Option {
	return func(c *config) { c.primaryLimit = perHour }
}

// WithSecondaryLimits sets the content-creation budgets per token: how many
// content-creating requests (create issue, create comment, edit comment,
// reactions) are accepted in any sliding minute and any sliding hour.
// GitHub documents 80 and 500, the defaults. 0 disables a budget.
func WithSecondaryLimits(perMinute, perHour int) Option {
	return func(c *config) { c.perMinute, c.perHour = perMinute, perHour }
}

// WithSecondaryLimitStatus sets the status of a secondary-limit refusal:
// http.StatusForbidden (the default, which go-github turns into
// *github.AbuseRateLimitError) or http.StatusTooManyRequests (which GitHub
// also sends, and which go-github v62 does not recognise).
func WithSecondaryLimitStatus(status int) Option {
	return func(c *config) { c.secondaryStatus = status }
}

// WithClock makes the fake read time from now, and report header values in
// that time. See the package documentation.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.clk = injectedClock(now) }
}

// WithTimeScale makes fake time run factor times faster than the wall clock
// and translates header values back to wall time. See the package
// documentation. factor must be positive.
func WithTimeScale(factor float64) Option {
	return func(c *config) {
		if factor > 0 {
			c.clk = scaledClock(factor)
		}
	}
}

// New starts a fake on a loopback port and stops it when the test ends.
// It knows no repositories and no tokens until AddRepo and AddToken.
func New(t TB, opts ...Option) *Server {
	t.Helper()
	s := launch(t, opts...)
	live.Store(s.ts.URL, s)
	t.Cleanup(func() {
		live.Delete(s.ts.URL)
		s.Close()
	})
	return s
}

// live is every fake New started and not yet cleaned up, by URL.
var live sync.Map

// ByURL returns the running fake (started by New) whose URL is apiURL, or
// nil: a suite's harness finds the fake a test pointed its settings at, to
// switch it to app authentication (AppMode).
func ByURL(apiURL string) *Server {
	if s, ok := live.Load(strings.TrimSuffix(apiURL, "/")); ok {
		return s.(*Server)
	}
	return nil
}

// reporter is how the fake reports its own misuse (an unknown repository,
// a bad pattern): a test's t, or a panic outside tests.
type reporter interface {
	Helper()
	Fatalf(format string, args ...any)
}

type panicReporter struct{}

func (panicReporter) Helper() {}
func (panicReporter) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}

// Start runs the fake outside a test (`the-loop demo`): misuse panics, and
// the caller calls Close.
func Start(opts ...Option) *Server { return launch(panicReporter{}, opts...) }

// Close stops the server, releasing hung and delayed requests first:
// httptest.Server.Close waits for every outstanding request.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.ts.Close()
	})
}

func launch(t reporter, opts ...Option) *Server {
	cfg := config{
		clk:             realClock(),
		primaryLimit:    5000,
		perMinute:       80,
		perHour:         500,
		secondaryStatus: http.StatusForbidden,
	}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Server{
		t:         t,
		clk:       cfg.clk,
		cfg:       cfg,
		closing:   make(chan struct{}),
		st:        newState(),
		primary:   map[string]*primaryWindow{},
		writeLogs: map[string]*writeLog{},
		changed:   make(chan struct{}),
	}
	s.ts = httptest.NewServer(s)
	return s
}

// URL is the API base URL, ending in "/": use it as go-github's BaseURL or
// as LOOP_GITHUB_API_URL. The fake also answers under "/api/v3/" (where
// go-github's WithEnterpriseURLs puts requests), and then builds the URLs
// in its responses under that prefix too.
func (s *Server) URL() string { return s.ts.URL + "/" }

// Client returns an HTTP client for the fake (no timeout, its own
// connection pool).
func (s *Server) Client() *http.Client { return s.ts.Client() }

// Now is the current time on the fake's clock.
func (s *Server) Now() time.Time { return s.clk.now() }

// TimeScale is how many fake seconds pass per wall second: the factor given
// to WithTimeScale, else 1.
func (s *Server) TimeScale() float64 { return s.clk.scale }

// Sleep waits d of fake time: d/TimeScale of wall time. It returns early
// with ctx's error. Under WithClock it returns ErrInjectedClock at once.
func (s *Server) Sleep(ctx context.Context, d time.Duration) error {
	if s.clk.injected {
		return ErrInjectedClock
	}
	tm := time.NewTimer(s.clk.wallDuration(d))
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Request is one entry of the request log.
type Request struct {
	Method string
	Path   string // without the "/api/v3" prefix
	Query  string
	Login  string // authenticated user, "" if none
	// Status is what the fake answered, or would have answered for a
	// dropped response; 0 for a request held by Rule.Hang.
	Status int
	// Time is when the fake handled the request (for an injected answer:
	// when it arrived), on the fake's clock. For requests that reached the
	// handlers, these times are in the order budgets were charged.
	Time     time.Time
	Injected bool // answered by SetDown, OnRequest, Inject or FailNext
	Dropped  bool // connection closed instead of answering
}

// Requests returns the request log in completion order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Counts are running totals since New.
type Counts struct {
	Requests int // every request that reached the fake
	// Writes is the number of committed writes of every kind; the next
	// four split it by kind.
	Writes       int
	Issues       int
	Comments     int
	CommentEdits int
	Reactions    int // created; a repeat (200 "Reaction exists") stores nothing
	// PrimaryLimited and SecondaryLimited count requests refused by a limit.
	PrimaryLimited   int
	SecondaryLimited int
	Injected         int // answered or held by fault injection
	Dropped          int // writes committed whose response was dropped
}

// Counts returns the running totals.
func (s *Server) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// WriteKind names what a write stored.
type WriteKind string

// The writes the fake commits.
const (
	WriteIssue       WriteKind = "issue"
	WriteComment     WriteKind = "comment"
	WriteCommentEdit WriteKind = "comment_edit"
	WriteReaction    WriteKind = "reaction"
	// WriteLabel: labels added to or removed from an issue (ID is 0).
	WriteLabel WriteKind = "label"
)

// Write describes one committed write.
type Write struct {
	Kind        WriteKind
	Repo        string
	IssueNumber int
	// ID is the issue's id for WriteIssue, the comment's id for
	// WriteComment and WriteCommentEdit, the reaction's id for
	// WriteReaction.
	ID    int64
	Login string
}

type writeHook struct{ fn func(Write) }

// AfterWrite registers fn to run after each write is committed and before
// its response is sent (or dropped), on the request's goroutine and without
// the fake's lock. A crash test blocks or kills the client under test in fn
// to reproduce "the comment is on GitHub, the writer never heard back";
// while fn runs, the client is still waiting for its response. The returned
// function unregisters fn.
func (s *Server) AfterWrite(fn func(Write)) (remove func()) {
	h := &writeHook{fn: fn}
	s.mu.Lock()
	s.hooks = append(s.hooks, h)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, x := range s.hooks {
			if x == h {
				s.hooks = append(s.hooks[:i:i], s.hooks[i+1:]...)
				return
			}
		}
	}
}

// DropResponseAfterWrite makes the next n committed writes close their
// connection instead of answering: the write is stored, and the client sees
// a transport error (EOF) with no status. That is the ambiguous case a
// writer must resolve by reading back. Writes refused (validation, limits)
// do not use up n.
func (s *Server) DropResponseAfterWrite(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropNext = n
}

// SetDown makes every request get 503 (GitHub down) while down is true.
func (s *Server) SetDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

// OnRequest installs a hook that sees every request before the fake handles
// it (after SetDown). Returning handled=true answers the request with
// status and a basic-error body. The request's body may be read. nil
// removes the hook.
func (s *Server) OnRequest(fn func(r *http.Request) (status int, handled bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onRequest = fn
}

// Rule fails, delays or holds matching requests. Rules are tried in the
// order injected; the first match applies.
type Rule struct {
	Method string // "" matches every method
	// Path is a path.Match pattern over the request path without the
	// "/api/v3" prefix, e.g. "/repos/*/*/issues/*/comments". "" matches
	// every path.
	Path  string
	Times int // apply to this many matching requests, then retire; 0: until removed
	// Delay holds the request this long (wall clock) before going on. The
	// request then goes on even if the client has given up, as on GitHub:
	// a write delayed past the client's timeout is still committed.
	Delay time.Duration
	// Hang holds the request until the client gives up (or the fake
	// closes), and never handles it: the client sees its own timeout.
	Hang bool
	// Status, if not 0, answers the request with this status and a
	// basic-error body instead of handling it.
	Status int
	// Header is added to a Status answer, e.g. Retry-After on a 503.
	Header http.Header
}

type rule struct {
	Rule
	left int
}

// Inject adds a fault rule and returns a function that removes it.
func (s *Server) Inject(r Rule) (remove func()) {
	s.t.Helper()
	if r.Path != "" {
		if _, err := path.Match(r.Path, "/"); err != nil {
			s.t.Fatalf("ghfake: Inject: bad Path pattern %q: %v", r.Path, err)
		}
	}
	x := &rule{Rule: r, left: r.Times}
	s.mu.Lock()
	s.rules = append(s.rules, x)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.removeRuleLocked(x)
	}
}

// FailNext answers the next n requests, whatever they are, with status.
func (s *Server) FailNext(n int, status int) {
	if n <= 0 {
		return
	}
	s.Inject(Rule{Times: n, Status: status})
}

func (s *Server) removeRuleLocked(x *rule) {
	for i, y := range s.rules {
		if y == x {
			s.rules = append(s.rules[:i:i], s.rules[i+1:]...)
			return
		}
	}
}

// matchRuleLocked returns the rule for a request and uses up one of its
// Times.
func (s *Server) matchRuleLocked(method, p string) *Rule {
	for _, x := range s.rules {
		if x.Method != "" && x.Method != method {
			continue
		}
		if x.Path != "" {
			if ok, _ := path.Match(x.Path, p); !ok {
				continue
			}
		}
		if x.Times > 0 {
			x.left--
			if x.left <= 0 {
				s.removeRuleLocked(x)
			}
		}
		r := x.Rule
		return &r
	}
	return nil
}
