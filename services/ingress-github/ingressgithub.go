// Package ingressgithub is the ingress-github service: everything the loop and
// the channels learn from GitHub enters here, as verified webhooks (POST
// /gh-webhook) and/or by polling, and becomes catalog events on the inbox
// (loop.in.…): comment.human, comment.agent, ledger.record and
// work-item.activity (docs/requirements.md R3.7, R5.2, R6.1;
// docs/configuration.md#catalog-event-types;
// docs/architecture.md#trust-boundaries).
//
// The webhook answers 202 only after the bus acknowledged every event of the
// delivery; the event ids are deterministic, so GitHub's redelivery (manual,
// within 3 days) is dropped by Nats-Msg-Id and the seen bucket.
package ingressgithub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/githubapp"
	"github.com/the-loop/bus/pkg/githubclient"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/webhook"
	"github.com/the-loop/bus/services/ingress-github/internal/poll"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// Name is the service name used for logs and `serve`.
const Name = "ingress-github"

// Mode is how GitHub is read (LOOP_GITHUB_MODE).
type Mode string

// Modes.
const (
	ModeWebhook Mode = "webhook"
	ModePoll    Mode = "poll"
	ModeBoth    Mode = "both"
)

func (m Mode) webhook() bool { return m == ModeWebhook || m == ModeBoth }
func (m Mode) poll() bool    { return m == ModePoll || m == ModeBoth }

// Options are what is not a setting (Config): how the service is hosted,
// and bounds tests shrink. Zero fields take the defaults of DefaultOptions.
type Options struct {
	// RequireWebhookSecret makes New refuse to build the service when the
	// webhook is on and no secret is set (`serve ingress-github`). Without
	// it (`up`), the webhook listener stays off, says why in the log and in
	// /readyz, and the process keeps running.
	RequireWebhookSecret bool
	// Events is the enabled event set (default route.DefaultEvents).
	Events []string
	// MaxBodyBytes bounds a webhook body (default MaxWebhookBytes).
	MaxBodyBytes int64
	// BodyBudget bounds the memory of the bodies being read and checked at
	// once. A request takes room for its bytes as they arrive, never for
	// the size it announces; one whose next bytes find no room is answered
	// 503 with Retry-After (default DefaultBodyBudget; never below what one
	// body of MaxBodyBytes needs).
	BodyBudget int64
	// BodyPace is how fast a body must arrive; a sender that falls behind
	// is cut off and answered 408 (default webhook.DefaultPace: 2 s, and
	// 1 s more per 3 MiB received).
	BodyPace webhook.Pace
	// RefusalLogEvery is the least time between two webhook.rejected
	// records of one reason (default 1m).
	RefusalLogEvery time.Duration
	// PublishTimeout bounds the bus work of one delivery, PubAcks included;
	// past it the webhook answers 503 (default 8s, inside GitHub's 10s).
	PublishTimeout time.Duration
	// Validator overrides the signature check (tests).
	Validator Validator
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Defaults of the webhook's bounds (decision 037).
const (
	// DefaultBodyBudget holds two bodies of GitHub's largest size, or
	// about a thousand ordinary ones, at once.
	DefaultBodyBudget = 64 << 20
)

// Option adjusts the Options New starts from.
type Option func(*Options)

// DefaultOptions are the options New starts from.
func DefaultOptions() Options {
	return Options{
		Events:          route.DefaultEvents,
		MaxBodyBytes:    MaxWebhookBytes,
		BodyBudget:      DefaultBodyBudget,
		RefusalLogEvery: time.Minute,
		PublishTimeout:  8 * time.Second,
		Now:             time.Now,
	}
}

func (o *Options) setDefaults() {
	d := DefaultOptions()
	if o.Events == nil {
		o.Events = d.Events
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = d.MaxBodyBytes
	}
	if o.BodyBudget <= 0 {
		o.BodyBudget = d.BodyBudget
	}
	o.BodyBudget = max(o.BodyBudget, webhook.MinBudget(o.MaxBodyBytes))
	o.BodyPace = o.BodyPace.OrDefault()
	if o.RefusalLogEvery <= 0 {
		o.RefusalLogEvery = d.RefusalLogEvery
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = d.PublishTimeout
	}
	if o.Now == nil {
		o.Now = d.Now
	}
}

// Service is ingress-github.
type Service struct {
	deps      service.Deps
	cfg       Config
	key       []byte // the envelope key
	opts      Options
	m         *metrics
	intake    *intake
	validator Validator
	slots     webhook.Slots
	bodies    *webhook.Budget
	refusals  *webhook.Refusals
	insecure  bool
	login     *ledgerLogin
	// gh is the service's GitHub client: the token, or a GitHub App's
	// installation tokens when one is configured.
	gh *githubclient.Client
	// guard is the ledger login check of the operator config (see
	// guardLogin); refused carries a failure found after Run began.
	guardMu  sync.Mutex
	guarded  string
	guardErr error
	refused  chan error
	// webhookOff says why the webhook listener is off ("" when on).
	webhookOff string
	// pollOff says why the poller is off ("" when on or not asked for).
	pollOff  string
	stopping atomic.Bool

	mu        sync.Mutex
	addr      net.Addr
	listening chan struct{}
	poller    *poll.Poller
}

// New returns the service with DefaultOptions adjusted by with.
func New(deps service.Deps, cfg Config, with ...Option) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	opts := service.Apply(DefaultOptions(), with)
	opts.setDefaults()
	switch cfg.mode() {
	case ModeWebhook, ModePoll, ModeBoth:
	default:
		return nil, fmt.Errorf("ingress-github: mode %q: want webhook, poll or both", cfg.Mode)
	}
	if !cfg.EnvelopeKey.IsSet() {
		return nil, errors.New("ingress-github: no envelope key: it verifies ledger envelopes with LOOP_ENVELOPE_KEY")
	}
	s := &Service{deps: deps, cfg: cfg, key: []byte(cfg.EnvelopeKey.Reveal()), opts: opts, m: newMetrics(deps.Registry), listening: make(chan struct{}), refused: make(chan error, 1),
		slots: webhook.NewSlots(cfg.WebhookConcurrency), bodies: webhook.NewBudget(opts.BodyBudget),
		refusals: webhook.NewRefusals(deps.Events, viaWebhook, opts.RefusalLogEvery, opts.Now)}
	s.intake = newIntake(s)
	// With an app, its installation tokens instead of the token
	// (docs/decisions/078-github-app-authentication.md).
	a := cfg.App
	gh, err := githubclient.New(githubclient.Options{APIURL: cfg.APIURL, Token: cfg.Token.Reveal(),
		App: githubapp.Options{AppID: a.AppID, InstallationID: a.InstallationID, PrivateKeyFile: a.PrivateKeyFile}})
	if err != nil {
		return nil, fmt.Errorf("ingress-github: %w", err)
	}
	s.gh = gh
	s.login = newLedgerLogin(cfg.GitHub, gh, opts.Now)
	s.login.onLearn = func(login string) {
		if err := s.guardLogin(login); err != nil {
			// Run returns it and the host says it, once.
			select {
			case s.refused <- err:
			default:
			}
		}
	}
	secret := cfg.WebhookSecret
	switch {
	case opts.Validator != nil:
		s.validator = opts.Validator
	case secret.IsSet():
		s.validator = NewHMACValidator([]byte(secret.Reveal()))
	case cfg.InsecureNoSignature:
		s.validator, s.insecure = UnverifiedValidator(), true
	}
	if cfg.mode().webhook() && s.validator == nil {
		s.webhookOff = "LOOP_GITHUB_WEBHOOK_SECRET is not set: the webhook listener is off (fail-closed). Set the secret, " +
			"or LOOP_GITHUB_INSECURE_NO_SIGNATURE=true to accept unsigned deliveries, or LOOP_GITHUB_MODE=poll"
		if opts.RequireWebhookSecret {
			return nil, errors.New("ingress-github: " + s.webhookOff)
		}
	}
	if cfg.mode().poll() {
		switch {
		case len(cfg.PollRepoList()) == 0:
			s.pollOff = "poll mode without repositories: set LOOP_GITHUB_POLL_REPOS"
		case !cfg.Token.IsSet() && !cfg.App.Set():
			s.pollOff = "poll mode without LOOP_GITHUB_TOKEN"
		}
		if s.pollOff != "" && opts.RequireWebhookSecret {
			return nil, errors.New("ingress-github: " + s.pollOff)
		}
	}
	return s, nil
}

// guardLogin refuses an operator config whose routing.authorizedUsers lists
// the ledger's own login (docs/decisions/027-ledger-login-is-not-a-person.md):
// the config in force (its error is returned) and every reload. Once per
// login.
func (s *Service) guardLogin(login string) error {
	s.guardMu.Lock()
	defer s.guardMu.Unlock()
	if login == "" || strings.EqualFold(login, s.guarded) {
		return s.guardErr
	}
	s.guarded = login
	s.guardErr = s.deps.GuardConfig(config.RefuseLedgerLogin(login))
	if s.guardErr != nil {
		s.guardErr = fmt.Errorf("ingress-github: operator config refused: %w", s.guardErr)
	}
	return s.guardErr
}

// policy is the routing policy in force: read per delivery, as the operator
// config reloads live.
func (s *Service) policy() route.Policy {
	cfg := s.deps.Config()
	if cfg == nil {
		cfg = config.Default()
	}
	return route.Policy{
		Events:      s.opts.Events,
		Directory:   cfg.Routing.AuthorizedUsers,
		LedgerLogin: s.login.get(context.Background()),
		EnvelopeKey: s.key,
	}
}

func (s *Service) now() time.Time { return s.opts.Now() }

// WebhookAddr waits until the webhook listens and returns its address, or
// nil when ctx ends first (or the listener is off).
func (s *Service) WebhookAddr(ctx context.Context) net.Addr {
	select {
	case <-s.listening:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.addr
	case <-ctx.Done():
		return nil
	}
}

func (s *Service) ready() error {
	var problems []string
	if s.stopping.Load() {
		problems = append(problems, "shutting down")
	}
	if !s.deps.Conn.Connected() {
		problems = append(problems, "not connected to NATS")
	}
	if s.webhookOff != "" {
		problems = append(problems, s.webhookOff)
	}
	if s.pollOff != "" {
		problems = append(problems, s.pollOff)
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// Run serves the webhook and/or polls until ctx ends. Shutdown flips
// readiness first, then stops accepting requests and lets in-flight ones
// finish their PubAcks (httpserver.Serve's bounded shutdown).
func (s *Service) Run(ctx context.Context) error {
	// The ledger's login, if it can be known now: a config that lists it
	// is refused before anything is routed by it.
	if err := s.guardLogin(s.login.get(ctx)); err != nil {
		return err
	}
	s.deps.Ready.Add(Name, s.ready)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		<-gctx.Done()
		s.stopping.Store(true)
		return nil
	})
	g.Go(func() error {
		// The login learned later (GET /user answered at last).
		select {
		case err := <-s.refused:
			return err
		case <-gctx.Done():
			return nil
		}
	})
	if s.cfg.mode().webhook() {
		if s.webhookOff != "" {
			// A state the settings chose (`up` without a secret; `serve`
			// refuses to start so), said once and on /readyz: not an
			// error of the service.
			s.deps.Log.InfoContext(ctx, "webhook listener off", "reason", s.webhookOff)
		} else {
			ln, err := httpserver.Listen("LOOP_GITHUB_WEBHOOK_ADDR", s.cfg.WebhookAddr)
			if err != nil {
				return fmt.Errorf("ingress-github: webhook: %w", err)
			}
			s.mu.Lock()
			s.addr = ln.Addr()
			s.mu.Unlock()
			close(s.listening)
			s.deps.Log.InfoContext(ctx, "webhook listening", "addr", ln.Addr().String(), "path", WebhookPath,
				"verifying_signatures", !s.insecure)
			if s.insecure {
				s.deps.Log.ErrorContext(ctx, "INSECURE: "+insecureWarning)
			}
			h := http.Handler(s.Handler())
			g.Go(func() error { return httpserver.Serve(gctx, ln, h, s.deps.Log) })
			g.Go(func() error { s.refusals.Run(gctx); return nil })
		}
	}
	if s.cfg.mode().poll() {
		if s.pollOff != "" {
			// As the webhook listener's: a state the settings chose.
			s.deps.Log.InfoContext(ctx, "poller off", "reason", s.pollOff)
		} else {
			p, err := s.newPoller()
			if err != nil {
				return err
			}
			g.Go(func() error { return p.Run(gctx) })
		}
	}
	err := g.Wait()
	// Every delivery answered has its events on the bus; keep what is
	// still to be remembered of them before going.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := s.intake.marks.flush(fctx); ferr != nil {
		s.deps.Log.Warn("ingress-github: stopping with seen marks unwritten", "err", ferr)
	}
	return err
}

func (s *Service) newPoller() (*poll.Poller, error) {
	p, err := poll.New(poll.Config{
		Conn:     s.deps.Conn,
		Log:      s.deps.Log.With("component", "poller"),
		GitHub:   s.gh.GitHub,
		Repos:    s.cfg.PollRepoList(),
		Label:    s.cfg.Label,
		Interval: s.cfg.PollInterval,
		Now:      s.opts.Now,
		Deliver:  s.deliverPolled,
		Observe: func(result string) {
			s.m.poll.WithLabelValues(result).Inc()
		},
		Cycle: func(result string) { s.m.cycles.WithLabelValues(result).Inc() },
	})
	if err != nil {
		return nil, fmt.Errorf("ingress-github: poller: %w", err)
	}
	s.mu.Lock()
	s.poller = p
	s.mu.Unlock()
	return p, nil
}

// deliverPolled hands a synthesised delivery to the shared intake.
func (s *Service) deliverPolled(ctx context.Context, d poll.Delivery) error {
	p, err := route.Decode(d.Payload)
	if err != nil {
		return fmt.Errorf("synthesised payload: %w", err)
	}
	_, err = s.intake.handle(ctx, route.Delivery{Event: d.Event, DeliveryID: d.ID, Payload: d.Payload, Received: s.now()}, p, viaPoll, false)
	return err
}
