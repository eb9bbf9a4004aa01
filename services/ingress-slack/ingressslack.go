// Package ingressslack is the ingress-slack service: Slack messages and
// button presses become granted, authorized catalog events on the inbox
// (loop.in.…), which the ledger-writer records and fans out
// (docs/requirements.md R2, R5.3, R6.3, R6.5, K18).
//
// It reads Slack one of three ways, chosen by channels.slack.read.mode and
// re-read from the live config, so a mode change restarts the reader without
// restarting the process:
//
//   - socket: Socket Mode over LOOP_SLACK_APP_TOKEN (slack-go socketmode).
//     Every envelope is acknowledged once its message is settled — published
//     (PubAck) or dropped — inside ProcessTimeout, well within Slack's 3 s; one
//     that could not be settled is left unacknowledged so Slack redelivers it.
//   - events: the Events API and interactivity over HTTP, POST /slack/events
//     and POST /slack/interactions on LOOP_SLACK_EVENTS_ADDR, Slack signature
//     v0 with a 5-minute skew, fail-closed (401, nothing published),
//     verified as the body streams in, within a cap on requests at once and
//     on the memory of bodies being checked (events.go, pkg/webhook).
//   - poll: bound threads through conversations.replies and the kickoff
//     channel through conversations.history, cursors in KV "cursors", 429s
//     honoured until their Retry-After. Work is sharded over LOOP_PARTITIONS
//     shards, each read by the one replica holding the shard's lease in KV.
//
// Whatever carried it, a message runs through one pipeline (pipeline.go):
// map → drop bot and own messages → authorize → (a gate button: the gate
// visit it names must be current) → classify → publish grant → kickoff
// checks → publish, each drop recorded as channel.dropped with its reason. Event ids are deterministic (channel+ts for a message, channel+ts+
// action+presser for a press), so Slack's retries, Socket Mode redeliveries
// and a poll after a mode change publish once.
//
// The service never crashes its process over Slack: with the channel
// disabled it idles (ready); with a token missing it idles and /readyz names
// the missing variable (never a value).
//
// It imports slack-go (the one Slack client) and the-loop's pkg/...; never
// another service.
package ingressslack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/slack-go/slack"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/threads"
	"github.com/the-loop/bus/pkg/webhook"
)

// Name is the service name used for logs and `serve`.
const Name = "ingress-slack"

// Options are what is not a setting (Config); tests use them to shrink
// timings. Zero fields take the defaults of DefaultOptions.
type Options struct {
	// PollInterval overrides channels.slack.read.intervalSeconds (tests).
	PollInterval time.Duration
	// SuperviseEvery is how often the config is re-read for a change of
	// mode (default 1s).
	SuperviseEvery time.Duration
	// ProcessTimeout bounds the work on one message before its answer or
	// ack (default 2s, inside Slack's 3 s).
	ProcessTimeout time.Duration
	// PingInterval: Socket Mode reconnects when Slack has sent no ping for
	// this long (default 30s, slack-go's).
	PingInterval time.Duration
	// LeaseTTL is how long a poll shard stays with a replica that stopped
	// renewing it (default three poll intervals, at least 30s).
	LeaseTTL time.Duration
	// ReplicaID names this replica in poll leases (default host-pid-random).
	ReplicaID string
	// MaxBodyBytes bounds an Events API request body (default 1 MiB).
	MaxBodyBytes int64
	// MaxConcurrent caps the Events API requests handled at once; one more
	// is answered 503 with Retry-After (default 64).
	MaxConcurrent int
	// BodyBudget bounds the memory of the Events API bodies being read and
	// checked at once; a request takes room as its bytes arrive, and one
	// whose next bytes find none is answered 503 with Retry-After (default
	// 8 MiB; never below what one body of MaxBodyBytes needs).
	BodyBudget int64
	// BodyPace is how fast an Events API body must arrive; a sender that
	// falls behind is cut off and answered 408 (default
	// webhook.DefaultPace).
	BodyPace webhook.Pace
	// RefusalLogEvery is the least time between two webhook.rejected
	// records of one reason (default 1m).
	RefusalLogEvery time.Duration
	// RestartBackoff is the longest wait before a failed reader is started
	// again (default 30s).
	RestartBackoff time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Option adjusts the Options New starts from.
type Option func(*Options)

// restartBase is the longest wait after a reader's first failure; it doubles
// per failure up to Options.RestartBackoff.
const restartBase = 200 * time.Millisecond

// DefaultOptions are the options New starts from.
func DefaultOptions() Options {
	return Options{
		SuperviseEvery:  time.Second,
		ProcessTimeout:  2 * time.Second,
		PingInterval:    30 * time.Second,
		MaxBodyBytes:    1 << 20,
		MaxConcurrent:   64,
		BodyBudget:      8 << 20,
		BodyPace:        webhook.DefaultPace,
		RefusalLogEvery: time.Minute,
		RestartBackoff:  30 * time.Second,
		Now:             time.Now,
	}
}

func (o *Options) setDefaults() {
	d := DefaultOptions()
	if o.SuperviseEvery <= 0 {
		o.SuperviseEvery = d.SuperviseEvery
	}
	if o.ProcessTimeout <= 0 {
		o.ProcessTimeout = d.ProcessTimeout
	}
	if o.PingInterval <= 0 {
		o.PingInterval = d.PingInterval
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = d.MaxBodyBytes
	}
	if o.MaxConcurrent <= 0 {
		o.MaxConcurrent = d.MaxConcurrent
	}
	if o.BodyBudget <= 0 {
		o.BodyBudget = d.BodyBudget
	}
	o.BodyBudget = max(o.BodyBudget, webhook.MinBudget(o.MaxBodyBytes))
	o.BodyPace = o.BodyPace.OrDefault()
	if o.RefusalLogEvery <= 0 {
		o.RefusalLogEvery = d.RefusalLogEvery
	}
	if o.RestartBackoff <= 0 {
		o.RestartBackoff = d.RestartBackoff
	}
	if o.Now == nil {
		o.Now = d.Now
	}
	if o.ReplicaID == "" {
		host, _ := os.Hostname()
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.ReplicaID = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
	}
}

// Service is ingress-slack.
type Service struct {
	deps service.Deps
	cfg  Config
	opts Options
	m    *metrics

	// The Events API's bounds (events.go).
	slots    webhook.Slots
	bodies   *webhook.Budget
	refusals *webhook.Refusals

	// kv is set by Run once the KV buckets are open; nil before.
	kv atomic.Pointer[stores]

	own    atomic.Pointer[string] // the bot's own user id (auth.test)
	status atomic.Pointer[string] // why the service is not ready; "" when it is

	mu        sync.Mutex
	addr      net.Addr      // events mode: the bound address
	listening chan struct{} // closed when addr is set
}

// New returns the service with DefaultOptions adjusted by opts.
func New(deps service.Deps, cfg Config, opts ...Option) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	o := service.Apply(DefaultOptions(), opts)
	o.setDefaults()
	s := &Service{
		deps: deps, cfg: cfg, opts: o, m: newMetrics(deps.Registry),
		slots: webhook.NewSlots(o.MaxConcurrent), bodies: webhook.NewBudget(o.BodyBudget),
		refusals:  webhook.NewRefusals(deps.Events, viaEvents, o.RefusalLogEvery, o.Now),
		listening: make(chan struct{}),
	}
	s.setStatus("starting")
	// Registered here, not in Run, so that /readyz is never ready before
	// Run has opened what the handlers need.
	deps.Ready.Add(Name, s.ready)
	return s, nil
}

// stores are the KV buckets the pipeline reads and writes.
type stores struct {
	threads *threads.Store
	graph   *bus.KV
	cursors *bus.KV
}

// errNotStarted: a message arrived before Run opened the buckets.
var errNotStarted = errors.New("ingress-slack: not started")

func (s *Service) stores() (*stores, error) {
	if st := s.kv.Load(); st != nil {
		return st, nil
	}
	return nil, errNotStarted
}

func (s *Service) setStatus(why string) { s.status.Store(&why) }

func (s *Service) ownUser() string {
	if p := s.own.Load(); p != nil {
		return *p
	}
	return ""
}

// ready is the service's /readyz check: connected to NATS, and reading
// Slack the way the config asks, or deliberately not reading it.
func (s *Service) ready() error {
	if !s.deps.Conn.Connected() {
		return errors.New("not connected to NATS")
	}
	if p := s.status.Load(); p != nil && *p != "" {
		return errors.New(*p)
	}
	return nil
}

// EventsAddr returns the address the Events API listener is bound to, once
// it is, or nil when ctx ends first.
func (s *Service) EventsAddr(ctx context.Context) net.Addr {
	select {
	case <-s.listening:
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.addr
	case <-ctx.Done():
		return nil
	}
}

// Run reads Slack until ctx ends. It returns nil on a clean stop; Slack's
// own failures never end it.
func (s *Service) Run(ctx context.Context) error {
	if err := s.openKV(ctx); err != nil {
		return nil // ctx ended while waiting for the buckets
	}
	return s.supervise(ctx)
}

// openKV opens the buckets, waiting for the bus to be provisioned.
func (s *Service) openKV(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		th, err1 := s.deps.Conn.KV(ctx, bus.BucketThreads)
		gr, err2 := s.deps.Conn.KV(ctx, bus.BucketGraph)
		cu, err3 := s.deps.Conn.KV(ctx, bus.BucketCursors)
		if err := errors.Join(err1, err2, err3); err == nil {
			s.kv.Store(&stores{threads: threads.New(th), graph: gr, cursors: cu})
			return nil
		} else {
			s.setStatus("KV buckets not available: " + err.Error())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(bus.Backoff(attempt, 100*time.Millisecond, 5*time.Second)):
		}
	}
}

// plan is what the config asks the service to run.
type plan struct {
	mode config.ReadMode // ReadOff: nothing
	// why is the readiness status while the plan holds; "" is ready.
	why string
}

// desired reads the live config.
func (s *Service) desired() plan {
	sc := s.deps.Config().Channels.Slack
	switch {
	case !sc.Enabled:
		return plan{mode: config.ReadOff}
	case sc.Read.Mode != config.ReadPoll && sc.Read.Mode != config.ReadSocket && sc.Read.Mode != config.ReadEvents:
		return plan{mode: config.ReadOff}
	}
	if err := s.cfg.Require(sc.Read.Mode); err != nil {
		// Names the variables, never their values.
		return plan{mode: config.ReadOff, why: strings.ReplaceAll(err.Error(), "\n", "; ")}
	}
	return plan{mode: sc.Read.Mode}
}

// reader is one running read mode.
type reader struct {
	plan   plan
	cancel context.CancelFunc
	done   chan error
}

// supervise runs the reader the config asks for, restarting it when the mode
// changes or it fails (with back-off), until ctx ends.
func (s *Service) supervise(ctx context.Context) error {
	var cur *reader
	var failures int
	var retryAt time.Time
	stop := func() {
		if cur == nil {
			return
		}
		cur.cancel()
		<-cur.done
		cur = nil
	}
	defer stop()
	tick := time.NewTicker(s.opts.SuperviseEvery)
	defer tick.Stop()
	var last plan
	first := true
	for {
		want := s.desired()
		if first || want != last {
			s.logPlan(ctx, want)
			first, last = false, want
		}
		if cur != nil && cur.plan != want {
			stop()
			failures, retryAt = 0, time.Time{}
		}
		if cur == nil && !s.opts.Now().Before(retryAt) {
			if want.mode == config.ReadOff {
				s.setStatus(want.why)
			} else {
				cur = s.start(ctx, want)
			}
		}
		var done chan error
		if cur != nil {
			done = cur.done
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-done:
			cur.cancel()
			cur = nil
			if ctx.Err() != nil {
				return nil
			}
			failures++
			// The bus's one jittered backoff, so replicas that lost Slack
			// together do not reconnect in step.
			backoff := bus.Backoff(failures, restartBase, s.opts.RestartBackoff)
			retryAt = s.opts.Now().Add(backoff)
			s.setStatus(fmt.Sprintf("read mode %s failed (restarting): %v", want.mode, err))
			s.deps.Log.Warn("ingress-slack: reader stopped; restarting", "mode", string(want.mode), "err", err, "backoff", backoff)
		case <-tick.C:
		}
	}
}

func (s *Service) logPlan(ctx context.Context, p plan) {
	sc := s.deps.Config().Channels.Slack
	switch {
	case !sc.Enabled:
		s.deps.Log.InfoContext(ctx, "ingress-slack: channels.slack.enabled is false; reading nothing")
	case p.why != "":
		s.deps.Log.WarnContext(ctx, "ingress-slack: not reading Slack", "mode", string(sc.Read.Mode), "reason", p.why)
	case p.mode == config.ReadOff:
		// Fail closed on an unknown or off mode, loudly
		// (docs/requirements.md, Fail closed).
		s.deps.Log.WarnContext(ctx, "ingress-slack: channels.slack.read.mode is off or unknown; the Slack channel reads nothing",
			"mode", string(sc.Read.Mode))
	default:
		s.deps.Log.InfoContext(ctx, "ingress-slack: reading Slack", "mode", string(p.mode))
	}
}

// start starts the reader of p.
func (s *Service) start(ctx context.Context, p plan) *reader {
	rctx, cancel := context.WithCancel(ctx)
	r := &reader{plan: p, cancel: cancel, done: make(chan error, 1)}
	var run func(context.Context) error
	switch p.mode {
	case config.ReadSocket:
		run = s.runSocket
	case config.ReadEvents:
		run = s.runEvents
	default:
		run = s.runPoll
	}
	s.setStatus(fmt.Sprintf("read mode %s starting", p.mode))
	go func() {
		err := run(rctx)
		if err == nil && rctx.Err() == nil {
			err = errors.New("reader returned")
		}
		r.done <- err
	}()
	return r
}

// api is a Web API client over the bot token (and the app token, for
// Socket Mode), pointed at LOOP_SLACK_API_URL.
func (s *Service) api() *slack.Client {
	u := s.cfg.APIURL
	if !strings.HasSuffix(u, "/") {
		u += "/"
	}
	opts := []slack.Option{slack.OptionAPIURL(u), slack.OptionHTTPClient(&http.Client{Timeout: 15 * time.Second})}
	if s.cfg.AppToken.IsSet() {
		opts = append(opts, slack.OptionAppLevelToken(s.cfg.AppToken.Reveal()))
	}
	return slack.New(s.cfg.BotToken.Reveal(), opts...)
}

// learnOwnID asks auth.test for the bot's own user id, for the own-message
// drop. Best effort: the bot's posts also carry bot_id, which is checked
// first.
func (s *Service) learnOwnID(ctx context.Context, api *slack.Client) {
	if s.ownUser() != "" {
		return
	}
	actx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := api.AuthTestContext(actx)
	if err != nil {
		s.deps.Log.Warn("ingress-slack: auth.test failed; own messages are recognised by bot_id only", "err", err)
		return
	}
	id := resp.UserID
	s.own.Store(&id)
}
