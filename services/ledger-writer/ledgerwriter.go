// Package ledgerwriter is the ledger-writer service: the sole consumer of the
// inbox (loop.in.>) and the only writer to GitHub. For every inbox event it
// writes the event's record onto the work item (docs/architecture.md, the
// ledger), acknowledges the inbox message, and only then fans the event out
// on loop.ev.> carrying that record — exactly once (docs/architecture.md,
// exactly once).
//
// Per event E, on the partitioned, pinned runner (one event in flight per
// partition, so a work item's records keep their order):
//
//  0. publish what the partition's outbox still holds (a delivery that
//     acknowledged its event and stopped before publishing left it there);
//  1. types the catalog does not record go straight to step 5;
//  2. otherwise wait for the content-write pacer (GitHub's secondary limits),
//     then claim ledger/E with Create (pending, owner, lease);
//  3. write the record (a comment, or for a kickoff an issue) with a signed
//     envelope naming E;
//  4. Update ledger/E to recorded with the record's ref (compare-and-set);
//  5. put the fan-out message in the partition's outbox (KV ledger,
//     outbox/pNNN): the fan-out is pending;
//  6. double-ack E on the inbox;
//  7. publish the fan-out to loop.ev with Nats-Msg-Id E, wait for the PubAck;
//  8. take it out of the outbox: fanned out.
//
// A sweeper in every replica publishes, under the same Nats-Msg-Id, what has
// waited in an outbox past a grace period, so a crash between 6 and 8 loses
// nothing even when the partition sees no next event (outbox.go).
//
// A delivery that finds ledger/E already there decides from it: recorded →
// fan out only; failed → fail again (the notice and DLQ were not finished);
// pending → take the claim over with compare-and-set once its owner released
// it or its lease ran out, read the work item back for E's envelope, and
// write only if it is not there. The lease is longer than any write the owner
// can still have in flight, so two workers never both write. The crash table
// this satisfies is in docs/architecture.md (exactly once).
//
// Transient GitHub failures (5xx, timeouts, dropped responses, 403/429 rate
// limits) hand the delivery back with a delay (bus.Retry: NakWithDelay, the
// partition stays in order) — GitHub's Retry-After or reset up to a cap, else
// a jittered backoff — and after the consumer's MaxDeliver deliveries the
// event fails with the failure's reason, so one message cannot stall its
// partition for more than a bounded time (README, Operations). A rejected
// token (401) is the credential's failure, not the event's: like a missing
// token it is held inside the delivery until fixed. Permanent ones (404, 410,
// 422, 400, another 403, a ref that is not github:owner/repo#N, an actor no
// longer authorized, kickoff disabled) and transient ones that used up their
// deliveries emit bus.record_failed, publish a ledger.record_failed notice
// for channel-originated events, and go to the DLQ. A gate, control or
// kickoff event is never fanned out unrecorded.
package ledgerwriter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/githubapp"
	"github.com/the-loop/bus/pkg/githubclient"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/threads"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Name is the service name used for consumers, logs and `serve`.
const Name = bus.ServiceLedgerWriter

// Defaults of the options (the settings' are in Config).
const (
	DefaultHTTPTimeout = 30 * time.Second
	DefaultSweepEvery  = 5 * time.Second
	DefaultSweepGrace  = 10 * time.Second
)

// Option configures New.
type Option func(*options)

type options struct {
	perMinute, perHour int
	timeScale          float64
	httpTimeout        time.Duration
	lease              time.Duration
	retryBase          time.Duration
	retryMax           time.Duration
	transport          http.RoundTripper
	sweepEvery         time.Duration
	sweepGrace         time.Duration
	emptyAfter         time.Duration
	scrub              func(string) string
	// hook, when set (tests), runs after each step of a delivery; a non-nil
	// error makes the delivery stop there and return it, as if the process
	// had died at that point.
	hook func(s step, eventID string) error
}

// WithPacing sets the content-write budgets per credential (per process):
// perMinute and perHour writes, 0 disabling one. With R replicas sharing one
// token, give each limit/R. Both 0 disable pacing (benchmarks).
func WithPacing(perMinute, perHour int) Option {
	return func(o *options) { o.perMinute, o.perHour = perMinute, perHour }
}

// WithTimeScale makes the pacer's budgets run f times faster, matching a
// GitHub fake whose clock is scaled by f. For tests.
func WithTimeScale(f float64) Option {
	return func(o *options) { o.timeScale = f }
}

// WithHTTPTimeout bounds one GitHub request (default 30s).
func WithHTTPTimeout(d time.Duration) Option {
	return func(o *options) { o.httpTimeout = d }
}

// WithClaimLease sets how long a claim whose owner went silent is left alone
// before another delivery takes it over. It must exceed the HTTP timeout, so
// the old owner's write can no longer be in flight (default 2×timeout+30s).
func WithClaimLease(d time.Duration) Option {
	return func(o *options) { o.lease = d }
}

// WithRetryBackoff shapes the wait between deliveries after a transient
// failure: a jittered backoff of at most base doubling to maxWait (default 1s
// doubling to 1m, bus.Backoff), and maxWait also caps a wait GitHub names
// (Retry-After, a rate-limit reset).
func WithRetryBackoff(base, maxWait time.Duration) Option {
	return func(o *options) { o.retryBase, o.retryMax = base, maxWait }
}

// WithSweep sets how often every replica's sweeper reads the outboxes
// (default 5s), and how long a fan-out waits in one before the sweeper
// publishes it for the delivery that queued it (default 10s; that delivery,
// if alive, published it within milliseconds).
func WithSweep(every, grace time.Duration) Option {
	return func(o *options) { o.sweepEvery, o.sweepGrace = every, grace }
}

// WithEmptyAfter sets how long a published fan-out stays in a quiet
// partition's outbox before the writer empties it (default
// DefaultEmptyAfter; empties.go).
func WithEmptyAfter(d time.Duration) Option {
	return func(o *options) { o.emptyAfter = d }
}

// WithTransport sets the HTTP transport of the GitHub client.
func WithTransport(rt http.RoundTripper) Option {
	return func(o *options) { o.transport = rt }
}

// Service is the ledger-writer.
type Service struct {
	deps    service.Deps
	cfg     Config
	key     []byte // the envelope key
	opts    options
	m       *metrics
	gh      *ghClient // nil: not configured (heldReason says why)
	held    string
	pacer   *pacer
	worker  string
	ledger  *bus.KV
	threads *threads.Store
	empties empties // published fan-outs whose outbox is not emptied yet
}

// New returns the service. A missing LOOP_GITHUB_TOKEN or envelope key is not
// an error: `the-loop up` runs every service on a laptop that may have no
// token yet. The writer then reports not ready (check "ledger-writer/github"
// on /readyz, with the reason), consumes, passes through what needs no
// record, and holds every event that does — nothing is acknowledged,
// dead-lettered or fanned out unrecorded; each held delivery waits inside the
// handler, so it uses up no MaxDeliver — and says so loudly (log,
// loop_ledger_writer_github_configured 0) until it is restarted with a token.
func New(deps service.Deps, cfg Config, opts ...Option) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	o := service.Apply(options{perMinute: cfg.WritesPerMinute, perHour: cfg.WritesPerHour, timeScale: 1,
		httpTimeout: DefaultHTTPTimeout, retryBase: time.Second, retryMax: time.Minute,
		sweepEvery: DefaultSweepEvery, sweepGrace: DefaultSweepGrace, emptyAfter: DefaultEmptyAfter}, opts)
	if o.sweepEvery <= 0 {
		o.sweepEvery = DefaultSweepEvery
	}
	if o.sweepGrace < 0 {
		o.sweepGrace = 0
	}
	if o.lease <= 0 {
		o.lease = 2*o.httpTimeout + 30*time.Second
	}
	if o.scrub == nil {
		o.scrub = redact.FromOS().Scrub
	}
	m, err := newMetrics(deps.Registry)
	if err != nil {
		return nil, fmt.Errorf("%s: metrics: %w", Name, err)
	}
	s := &Service{deps: deps, cfg: cfg, key: []byte(cfg.EnvelopeKey.Reveal()), opts: o, m: m, pacer: newPacer(o.perMinute, o.perHour, o.timeScale), worker: workerID(deps.Conn.Name())}
	switch {
	case !cfg.Token.IsSet() && !cfg.App.Set():
		s.held = "LOOP_GITHUB_TOKEN is not set (nor LOOP_GITHUB_APP_ID)"
	case len(s.key) == 0:
		s.held = "no envelope key (LOOP_ENVELOPE_KEY)"
	default:
		// With an app, its installation tokens instead of the token
		// (docs/decisions/078-github-app-authentication.md).
		a := cfg.App
		gh, err := newGHClient(githubclient.Options{APIURL: cfg.APIURL, Token: cfg.Token.Reveal(),
			App:  githubapp.Options{AppID: a.AppID, InstallationID: a.InstallationID, PrivateKeyFile: a.PrivateKeyFile},
			Base: o.transport, Timeout: o.httpTimeout})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", Name, err)
		}
		gh.onRate = func(n int) { m.headroom.Set(float64(n)) }
		s.gh = gh
	}
	if s.gh != nil {
		m.configured.Set(1)
	} else {
		m.configured.Set(0)
	}
	return s, nil
}

func workerID(conn string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return conn + "/" + hex.EncodeToString(b)
}

// Run consumes the inbox until ctx is done, then drains.
func (s *Service) Run(ctx context.Context) error {
	if s.gh == nil {
		// Only `up` gets here (`serve` refuses to start without the
		// token): a laptop's first run, which its checklist explains.
		s.deps.Log.Info("ledger-writer cannot record: every event that needs a GitHub record is held, unacknowledged, until the service restarts with it configured",
			"reason", s.held)
		// Not ready, with the reason on /readyz: the writer runs (it passes
		// through what needs no record and dead-letters what can never be
		// decoded) but cannot do its job.
		reason := errors.New(s.held + ": events that need a GitHub record are held in the inbox (none is lost); configure it and restart")
		s.deps.Ready.Add(Name+"/github", func() error { return reason })
	}
	ctx, refuse := context.WithCancelCause(ctx)
	defer refuse(nil)
	if err := s.guardLedgerLogin(ctx, refuse); err != nil {
		return err
	}
	if err := s.open(ctx); err != nil {
		if ctx.Err() != nil {
			return refused(ctx)
		}
		return err
	}
	var sweeper sync.WaitGroup
	sweeper.Go(func() { s.sweep(ctx) })
	// Stopping hands the partitions over: their outboxes are emptied
	// first, and what the message in hand publishes on its way out is
	// emptied before its delivery returns (markPublished).
	sweeper.Go(func() { <-ctx.Done(); s.emptyAll() })
	err := service.Consume(ctx, s.deps, Name, bus.StreamInbox, func(hctx context.Context, ev *loopv1.Event, d *bus.Delivery) error {
		return s.handle(hctx, ctx.Done(), ev, d)
	})
	sweeper.Wait()
	if err == nil {
		err = refused(ctx)
	}
	return err
}

// errConfigRefused wraps why the writer stopped on its operator config.
var errConfigRefused = errors.New("operator config refused")

// refused is the error the writer stopped with when a check of its operator
// config cancelled ctx, or nil for an ordinary shutdown.
func refused(ctx context.Context) error {
	if err := context.Cause(ctx); errors.Is(err, errConfigRefused) {
		return err
	}
	return nil
}

// guardLedgerLogin refuses an operator config whose routing.authorizedUsers
// lists the ledger's own login (docs/decisions/027-ledger-login-is-not-a-person.md):
// the config in force now (an error: the writer does not start) and every
// reload. The login is LOOP_GITHUB_LOGIN, else the token's (GET /user); when
// GitHub does not answer yet it is asked again every minute, and a config in
// force that lists it then stops the writer through stop.
func (s *Service) guardLedgerLogin(ctx context.Context, stop context.CancelCauseFunc) error {
	guard := func(login string) error {
		if err := s.deps.GuardConfig(config.RefuseLedgerLogin(login)); err != nil {
			return fmt.Errorf("%s: %w: %w", Name, errConfigRefused, err)
		}
		s.deps.Log.Info("ledger-writer: the operator config may not list the ledger's own login", "login", login)
		return nil
	}
	if login := s.cfg.Login; login != "" {
		return guard(login)
	}
	if s.gh == nil {
		return nil // no token: no login, and nothing is written as anyone
	}
	login, err := s.gh.login(ctx)
	if err == nil {
		return guard(login)
	}
	s.deps.Log.Warn("ledger-writer: the ledger's own login is not known yet (GET /user failed); asking again every minute", "err", err)
	go func() {
		for sleep(ctx, nil, time.Minute) == nil {
			login, err := s.gh.login(ctx)
			if err != nil {
				continue
			}
			if err := guard(login); err != nil {
				// Run returns it and the host says it, once.
				stop(err)
			}
			return
		}
	}()
	return nil
}

// open binds the KV buckets, waiting for the connection and provisioning.
func (s *Service) open(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		err := s.deps.Conn.WaitConnected(ctx)
		if err == nil {
			var l, t *bus.KV
			if l, err = s.deps.Conn.KV(ctx, bus.BucketLedger); err == nil {
				if t, err = s.deps.Conn.KV(ctx, bus.BucketThreads); err == nil {
					s.ledger, s.threads = l, threads.New(t)
					return nil
				}
			}
		}
		if errors.Is(err, bus.ErrClosed) {
			return fmt.Errorf("%s: %w", Name, err)
		}
		s.deps.Log.Warn("ledger-writer: KV buckets not available yet", "err", err)
		if err := sleep(ctx, nil, bus.Backoff(attempt, 100*time.Millisecond, 5*time.Second)); err != nil {
			return err
		}
	}
}

// renderInput snapshots what rendering reads from the config in force (it
// reloads without a restart, so it is read per event).
func (s *Service) renderInput() (renderInput, error) {
	cfg := s.deps.Config()
	g, err := control.New(cfg.Routing.Control.Enabled, cfg.Routing.Control.Keywords)
	if err != nil {
		return renderInput{}, fmt.Errorf("routing.control: %w", err)
	}
	in := renderInput{key: s.key, grammar: g, people: cfg.Routing.AuthorizedUsers, scrub: func(t string) string { return inertComments(s.opts.scrub(t)) }}
	in.kickoff.repo = strings.TrimSpace(cfg.Channels.Slack.Kickoff.Repo)
	in.kickoff.labels = cfg.Channels.Slack.Kickoff.Labels
	return in, nil
}

// backoff is the wait before attempt n (1-based) after a transient failure
// that named no wait: the bus's jittered backoff, at most retryMax.
func (s *Service) backoff(n int) time.Duration {
	return bus.Backoff(n, s.opts.retryBase, s.opts.retryMax)
}

// errStopping: the service is shutting down; the delivery is handed back.
var errStopping = errors.New("ledger-writer: shutting down")

// sleep waits d, or until ctx ends or stop closes.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return errStopping
	}
}

func (s *Service) logAttrs(ev *loopv1.Event, d *bus.Delivery, extra ...slog.Attr) []slog.Attr {
	return append(service.EventAttrs(ev, d), extra...)
}

// inertComments breaks every HTML comment opener in relayed text with a
// zero-width space. A member's text must not carry a hidden comment into the
// record: one that spells an envelope would sit beside the ledger's own, and
// the GitHub ingress refuses a body with two, losing the record.
func inertComments(t string) string { return strings.ReplaceAll(t, "<!--", "<\u200b!--") }
