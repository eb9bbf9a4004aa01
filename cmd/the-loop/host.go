package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/the-loop/bus/internal/hatch"
	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/tracing"
	"github.com/the-loop/bus/services/dispatcher"
	ingressgithub "github.com/the-loop/bus/services/ingress-github"
	ingressslack "github.com/the-loop/bus/services/ingress-slack"
	ledgerwriter "github.com/the-loop/bus/services/ledger-writer"
	slackrenderer "github.com/the-loop/bus/services/slack-renderer"
)

// runner is what every service is to its host.
type runner interface {
	Run(ctx context.Context) error
}

type serviceDef struct {
	name string
	// needsKey: refuses to start without LOOP_ENVELOPE_KEY
	// (docs/architecture.md#the-ledger).
	needsKey bool
	// config is the service's own settings within s: what it reads, and
	// what `serve <name> --help` lists beside the process's.
	config func(s *settings) any
	// new builds the service from what every service gets and its own
	// settings, as h composes them.
	new func(d service.Deps, h *host) (runner, error)
	// required fails, naming each setting, unless what the service cannot
	// work without is set, given the operator config op in force at start:
	// `serve` checks it before connecting, so that a container missing a
	// token exits at once saying which (nil: nothing is required).
	required func(s *settings, op *config.Config) error
}

// services lists the five services in start order: consumers of the streams
// first, producers last, so nothing published by a producer at start waits
// on a consumer that is not up yet.
var services = []serviceDef{
	{ledgerwriter.Name, true, func(s *settings) any { return &s.LedgerWriter }, func(d service.Deps, h *host) (runner, error) {
		cfg := h.settings.LedgerWriter
		cfg.EnvelopeKey = h.envelopeKey
		return ledgerwriter.New(d, cfg)
	}, func(s *settings, _ *config.Config) error { return s.LedgerWriter.Required() }},
	{slackrenderer.Name, false, func(s *settings) any { return &s.SlackRenderer }, func(d service.Deps, h *host) (runner, error) {
		return slackrenderer.New(d, h.settings.SlackRenderer)
	}, func(s *settings, op *config.Config) error { return s.SlackRenderer.Required(op) }},
	{dispatcher.Name, false, func(s *settings) any { return &s.Dispatcher }, func(d service.Deps, h *host) (runner, error) {
		return dispatcher.New(d, h.settings.Dispatcher, dispatcher.WithSessionEnv(h.settings.sessionEnv), dispatcher.WithSandboxHidden(h.sandboxHidden...))
	}, nil},
	{ingressgithub.Name, true, func(s *settings) any { return &s.IngressGitHub }, func(d service.Deps, h *host) (runner, error) {
		cfg := h.settings.IngressGitHub
		cfg.EnvelopeKey = h.envelopeKey
		// Alone (`serve`, a container) it refuses what cannot work; beside
		// the others (`up`) it keeps the process running and says why in
		// /readyz.
		return ingressgithub.New(d, cfg, func(o *ingressgithub.Options) { o.RequireWebhookSecret = h.serve })
	}, func(s *settings, _ *config.Config) error { return s.IngressGitHub.Required() }},
	{ingressslack.Name, false, func(s *settings) any { return &s.IngressSlack }, func(d service.Deps, h *host) (runner, error) {
		return ingressslack.New(d, h.settings.IngressSlack)
	}, func(s *settings, op *config.Config) error { return s.IngressSlack.Required(op) }},
}

func serviceNames() []string {
	out := make([]string, len(services))
	for i, s := range services {
		out[i] = s.name
	}
	return out
}

func lookupService(name string) (serviceDef, bool) {
	for _, s := range services {
		if s.name == name {
			return s, true
		}
	}
	return serviceDef{}, false
}

// settings is every environment setting a host reads: the process's own,
// declared in pkg/config, and each service's Config, declared in its
// package (docs/decisions/089-each-service-owns-its-settings.md).
type settings struct {
	Common  config.Common
	Up      config.Up
	Session config.Session

	LedgerWriter  ledgerwriter.Config
	SlackRenderer slackrenderer.Config
	Dispatcher    dispatcher.Config
	IngressGitHub ingressgithub.Config
	IngressSlack  ingressslack.Config

	// sessionEnv is the allow-listed part of this process's environment
	// that agent sessions start with.
	sessionEnv map[string]string
	// fromConfig are the warnings of the process settings the operator
	// config set (an environment variable that overrides one).
	fromConfig []config.Warning
}

// specs are the structs s reads, the process's first: the order of the
// settings in the docs.
func (s *settings) specs() []any {
	out := []any{&s.Common, &s.Up, &s.Session}
	for _, def := range services {
		out = append(out, def.config(s))
	}
	return out
}

// knownSettings is every setting's name, sorted.
func knownSettings() []string {
	keys := config.Keys((&settings{}).specs()...)
	slices.Sort(keys)
	return keys
}

func loadSettings(env config.Env) (settings, error) {
	var s settings
	// Every service's settings, not only those this process runs: services
	// share one .env, and a typo fails in every one of them.
	if err := config.CheckEnv(env, s.specs()...); err != nil {
		return s, err
	}
	// A file written for the original sets some process settings
	// (routing.autoExecuteLabel is LOOP_GITHUB_POLL_LABEL, …). A file that
	// does not load sets none here; the host refuses it when it loads it.
	if withFile, ws, err := config.EnvWithConfig(env); err == nil {
		env, s.fromConfig = withFile, ws
	}
	if err := config.Process(env, s.specs()...); err != nil {
		return s, err
	}
	s.sessionEnv = dispatcher.SessionBaseEnv(env, s.Dispatcher.SessionEnvNames())
	if err := checkAgentCredentials(env, s); err != nil {
		return s, err
	}
	return s, nil
}

// checkAgentCredentials refuses to give agent sessions the loop's own
// secrets under another name: agents fetch, push and open pull requests
// with credentials the operator grants to agents (LOOP_SESSION_ENV names
// their variables, LOOP_AGENT_GIT_CREDENTIALS their git credential store),
// never the ledger's token or the envelope key, with which a prompt-injected
// agent could write records as the ledger (docs/agents.md).
func checkAgentCredentials(env config.Env, s settings) error {
	secrets := map[string]string{}
	for _, name := range []string{"LOOP_GITHUB_TOKEN", "LOOP_ENVELOPE_KEY", "LOOP_SLACK_BOT_TOKEN", "LOOP_SLACK_APP_TOKEN"} {
		if v := strings.TrimSpace(env[name]); len(v) >= 8 {
			secrets[name] = v
		}
	}
	if len(secrets) == 0 {
		return nil
	}
	for _, n := range s.Dispatcher.SessionEnvNames() {
		for secret, v := range secrets {
			if s.sessionEnv[n] == v {
				return fmt.Errorf("LOOP_SESSION_ENV gives agent sessions %s, which holds the value of %s: agents get credentials of their own (a token of theirs in another variable, LOOP_AGENT_GIT_CREDENTIALS for git)", n, secret)
			}
		}
	}
	if f := s.Dispatcher.AgentGitCredentials; f != "" {
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("LOOP_AGENT_GIT_CREDENTIALS: %w", err)
		}
		for secret, v := range secrets {
			if strings.Contains(string(b), v) {
				return fmt.Errorf("LOOP_AGENT_GIT_CREDENTIALS (%s) holds the value of %s: agents push with credentials of their own, never the loop's", f, secret)
			}
		}
	}
	return nil
}

// newLogger writes JSON lines, or text for a person: format "text", or
// "auto" when w is a terminal (LOOP_LOG_FORMAT).
func newLogger(w io.Writer, level slog.Level, format ...string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if len(format) > 0 && (format[0] == "text" || format[0] == "auto" && isTerminal(w)) {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// host runs a set of services, each over its own bus connection as its own
// identity, with one admin server.
type host struct {
	name     string
	settings settings
	log      *slog.Logger
	stdout   io.Writer
	defs     []serviceDef
	// connect opens the bus connection of one service, authenticated as
	// that service's identity.
	connect func(ctx context.Context, identity string) (*bus.Conn, error)
	// envelopeKey is LOOP_ENVELOPE_KEY, or the key `up` keeps in its store.
	envelopeKey config.Secret
	// serve: one service in its own process.
	serve bool
	// started, if set, is called once every service was started, with the
	// readiness the admin server reports (the demo waits on it).
	started func(*httpserver.Readiness)
	// operator, if set, connects as the operator identity: what the status
	// page's DLQ replay acts with when LOOP_ADMIN_TOKEN is set.
	operator func(ctx context.Context) (*bus.Conn, error)
	// observer, if set, connects as the observer identity: what the status
	// page reads the loop's content through (a service's own identity reads
	// only what it consumes).
	observer func(ctx context.Context) (*bus.Conn, error)
	// adminAt, if set, hears the admin server's address.
	adminAt func(addr string)
	// checklist, if set, is the first-run checklist this host printed at
	// start (`up`): the status page shows it too.
	checklist []capability
	// sandboxHidden are paths no session's sandbox may give it: `up`'s
	// store.
	sandboxHidden []string
}

// defaultConfig is the operator config without a file: nobody authorized,
// Slack off.
var defaultConfig = config.Default()

// run connects every service as its own identity, waits for the topology
// the operator provisions, starts the services and the admin server, and
// waits for them; its defers drain what it opened, last first.
func (h *host) run(ctx context.Context) error {
	reg, metrics, err := newRegistry(h.defs)
	if err != nil {
		return err
	}
	stopTracing, err := tracing.Setup(ctx, h.traceName(), os.Getenv)
	if err != nil {
		return err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stopTracing(tctx)
	}()
	conns := make(map[string]*bus.Conn, len(h.defs))
	defer h.drain(ctx, conns)
	if err := h.connectAll(ctx, conns); err != nil {
		return err
	}
	// The services' event-log records are written by one goroutine, off
	// the path of the work they describe; the queue is emptied before the
	// connections are drained (defers run last first).
	logq := eventlog.NewQueue(8192)
	go logq.Run()
	defer func() {
		qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		logq.Close(qctx)
	}()
	reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "loop_eventlog_dropped_total", Help: "Event-log records dropped because the log's queue was full (the work they describe went on).",
	}, func() float64 { return float64(logq.Dropped()) }))
	ready := httpserver.NewReadiness()
	ready.Add("nats", func() error {
		for name, c := range conns {
			if !c.Connected() {
				return fmt.Errorf("%s not connected to NATS", name)
			}
		}
		return nil
	})
	// The admin port first: a port in use is said before anything
	// waits on the bus.
	ln, err := httpserver.Listen("LOOP_ADMIN_ADDR", h.settings.Common.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin server: %w", err)
	}
	defer ln.Close() // Serve closes it too; this covers a failed start
	topo, err := h.awaitTopology(ctx, reg, conns)
	if err != nil {
		return err
	}
	fmt.Fprintf(h.stdout, "%s: admin on http://%s (/healthz /readyz /metrics), status page http://%s/status\n", h.name, displayAddr(ln.Addr()), displayAddr(ln.Addr()))
	if h.adminAt != nil {
		h.adminAt(ln.Addr().String())
	}
	sh := shared{reg: reg, metrics: metrics, ready: ready, logq: logq, topo: topo, current: func() *config.Config { return defaultConfig }}
	return h.serveAll(ctx, ln, conns, sh)
}

// shared is what the host gives every service alike.
type shared struct {
	reg     *prometheus.Registry
	metrics *bus.Metrics
	ready   *httpserver.Readiness
	logq    *eventlog.Queue
	topo    bus.Topology
	current func() *config.Config
	checks  service.ConfigChecks
}

// serveAll starts the operator config's watcher, the services and the
// admin server on ln, and waits until ctx ends or one of them fails.
func (h *host) serveAll(ctx context.Context, ln net.Listener, conns map[string]*bus.Conn, sh shared) error {
	g, gctx := errgroup.WithContext(ctx)
	var watcher *config.Watcher
	if path := h.settings.Common.ConfigPath; path != "" {
		w, err := config.NewWatcher(path, h.log)
		if err != nil {
			return fmt.Errorf("operator config: %w", err)
		}
		config.LogWarnings(h.log, path, h.settings.fromConfig)
		watcher, sh.current, sh.checks = w, w.Current, w
	}
	names := make([]string, 0, len(h.defs))
	for i, def := range h.defs {
		deps := h.deps(def.name, conns[def.name], sh)
		if watcher != nil && i == 0 {
			// One watcher serves the host's services: its reloads are
			// recorded once, by the first of them.
			reportReloads(gctx, watcher, deps.Events)
		}
		svc, err := def.new(deps, h)
		if err != nil {
			return fmt.Errorf("%s: %w", def.name, err)
		}
		names = append(names, def.name)
		h.start(ctx, gctx, g, deps, svc)
	}
	if watcher != nil {
		g.Go(func() error { return watcher.Run(gctx) })
	}
	mux := httpserver.AdminMux(sh.ready, sh.reg)
	page, closePage, err := h.statusPage(ctx, conns[h.defs[0].name], sh.topo, sh.current)
	if err != nil {
		return err
	}
	defer closePage()
	page.Ready = sh.ready.Check
	if h.checklist != nil {
		page.Checklist = func() []statuspage.Capability { return pageChecklist(h.checklist) }
	}
	statuspage.Register(mux, page)
	g.Go(func() error { return httpserver.Serve(gctx, ln, mux, h.log) })
	fmt.Fprintf(h.stdout, "%s: running %s; Ctrl-C drains and stops\n", h.name, strings.Join(names, ", "))
	if h.started != nil {
		h.started(sh.ready)
	}
	return g.Wait()
}

// deps is what the service name gets of the host: its own connection and
// event log, and what every service shares.
func (h *host) deps(name string, conn *bus.Conn, sh shared) service.Deps {
	log := h.log.With("service", name)
	return service.Deps{
		Conn:        conn,
		Log:         log,
		Events:      eventlog.New(name, log, logPublisher{conn}).Queued(sh.logq),
		Registry:    sh.reg,
		Ready:       sh.ready,
		Partitions:  sh.topo.Partitions,
		Concurrency: h.settings.Common.Concurrency,
		Metrics:     sh.metrics,
		Config:      sh.current,
		Checks:      sh.checks,
	}
}

// start runs svc in g, with the watch on its credential.
func (h *host) start(ctx, gctx context.Context, g *errgroup.Group, deps service.Deps, svc runner) {
	// A credential the server refuses stops the process, naming the
	// service and the setting, rather than leaving it unready.
	g.Go(func() error { return deps.Conn.Refused(gctx) })
	g.Go(func() error {
		deps.Events.Emit(gctx, "service.started")
		err := svc.Run(gctx)
		if err != nil && ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped while it was still starting (opening its buckets):
			// a stop asked for, not a failure.
			err = nil
		}
		deps.Events.Emit(context.WithoutCancel(gctx), "service.stopped")
		return err
	})
}

// newRegistry is the process's metrics registry: the Go and process
// collectors, the bus metrics the services' runners share, and the build.
func newRegistry(defs []serviceDef) (*prometheus.Registry, *bus.Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := bus.NewMetrics(reg)
	if err != nil {
		return nil, nil, fmt.Errorf("metrics: %w", err)
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "loop_build_info", Help: "Always 1: the running the-loop's version and Go version, and the services this process hosts.",
	}, []string{"version", "goversion", "services"})
	buildInfo.WithLabelValues(buildVersion(), goruntime.Version(), strings.Join(defNames(defs), ",")).Set(1)
	reg.MustRegister(buildInfo)
	return reg, metrics, nil
}

// traceName names the process in traces: the service it runs alone, or
// the-loop.
func (h *host) traceName() string {
	if len(h.defs) == 1 {
		return "the-loop-" + h.defs[0].name
	}
	return "the-loop"
}

// connectAll opens each service's connection into conns.
func (h *host) connectAll(ctx context.Context, conns map[string]*bus.Conn) error {
	for _, def := range h.defs {
		c, err := h.connect(ctx, def.name)
		if err != nil {
			return fmt.Errorf("%s: connect to NATS: %w", def.name, err)
		}
		conns[def.name] = c
	}
	return nil
}

// drain drains every connection, bounded.
func (h *host) drain(ctx context.Context, conns map[string]*bus.Conn) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for name, c := range conns {
		if derr := c.Drain(dctx); derr != nil {
			h.log.Warn("drain NATS connection", "service", name, "err", derr)
		}
	}
}

// awaitTopology waits, over the first service's connection, until the
// topology the settings ask for is provisioned (services do not provision:
// docs/decisions/098-provisioning-is-the-operators.md), and registers its
// state collector on reg.
func (h *host) awaitTopology(ctx context.Context, reg *prometheus.Registry, conns map[string]*bus.Conn) (bus.Topology, error) {
	// A credential the server refuses ends the wait at once with the
	// reason, rather than waiting on with none.
	rctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	for _, c := range conns {
		go func() {
			if err := c.Refused(rctx); err != nil {
				refused(err)
			}
		}()
	}
	topo := topologyOf(h.settings)
	first := conns[h.defs[0].name]
	reg.MustRegister(bus.NewStateCollector(first, []string{bus.StreamInbox, bus.StreamEvents, bus.StreamDLQ, bus.StreamLog},
		consumedBy(topo, h.defs), topo.Partitions))
	err := awaitTopology(rctx, h.log, first, topo, consumedBy(topo, h.defs))
	var ae *bus.AuthError
	if cause := context.Cause(rctx); errors.As(cause, &ae) {
		return topo, cause
	}
	if err != nil {
		return topo, fmt.Errorf("wait for the streams and consumers: %w", err)
	}
	return topo, nil
}

// topologyOf is the topology the settings ask for.
func topologyOf(s settings) bus.Topology {
	topo := bus.DefaultTopology()
	topo.Partitions, topo.Replicas = s.Common.Partitions, s.Common.Replicas
	return topo
}

// topologyWaitMax is the longest pause between two checks of the topology.
const topologyWaitMax = 15 * time.Second

// awaitTopology checks, backing off, until topo is provisioned for the
// consumer groups groups, or ctx ends. It says what it waits for: the
// operator's `the-loop provision` (the provision step of compose and
// Kubernetes), or a partition count that differs from the process's.
func awaitTopology(ctx context.Context, log *slog.Logger, c *bus.Conn, topo bus.Topology, groups []bus.ConsumerGroup) error {
	last := ""
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := c.CheckTopology(cctx, topo, groups)
		cancel()
		if err == nil {
			if attempt > 1 {
				log.Info("the streams and consumers are provisioned; starting")
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w (last check: %w)", context.Cause(ctx), err)
		}
		wait := bus.Backoff(attempt, 250*time.Millisecond, topologyWaitMax)
		switch {
		case errors.Is(err, bus.ErrPartitionMismatch):
			log.Error("the streams were provisioned with another partition count: provision them with this count "+
				"(the-loop provision, as the operator; README, Operations) or run with theirs; waiting",
				"err", err, "partitions", topo.Partitions, "retry_in", wait.Round(time.Millisecond))
		case err.Error() != last || bus.BackoffCeiling(attempt, 250*time.Millisecond, topologyWaitMax) == topologyWaitMax:
			log.Warn("waiting for the operator to provision the streams and consumers (the-loop provision, "+
				"the provision step of compose and Kubernetes)", "err", err, "attempt", attempt, "retry_in", wait.Round(time.Millisecond))
		}
		last = err.Error()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last check: %w)", context.Cause(ctx), err)
		case <-time.After(wait):
		}
	}
}

// statusPage is the status page's options: it reads the bus's state over
// conn (every identity may), the loop's content over the observer identity
// when this host holds it (`up`, `demo`; `serve` with LOOP_STATUS_NKEY_FILE),
// and replays as the operator when LOOP_ADMIN_TOKEN is set and this host
// holds the operator identity. The returned func closes what it opened.
func (h *host) statusPage(ctx context.Context, conn *bus.Conn, topo bus.Topology, current func() *config.Config) (statuspage.Options, func(), error) {
	st := h.settings.Common.Status
	o := statuspage.Options{
		Conn: conn, Config: current, Topology: topo, Expose: st.Expose, Token: st.Token.Reveal(),
		AdminToken: st.AdminToken.Reveal(), Log: h.log.With("service", "status"), Scrub: h.scrubber(),
	}
	var opened []*bus.Conn
	closeAll := func() {
		for _, c := range opened {
			c.Close()
		}
	}
	if h.observer != nil {
		obs, err := h.observer(ctx)
		if err != nil {
			return o, closeAll, fmt.Errorf("status page: the observer identity: %w", err)
		}
		opened = append(opened, obs)
		o.Observer = obs
	}
	if o.AdminToken == "" || h.operator == nil {
		return o, closeAll, nil
	}
	op, err := h.operator(ctx)
	if err != nil {
		closeAll()
		return o, func() {}, fmt.Errorf("status page: the operator identity for DLQ replay: %w", err)
	}
	opened = append(opened, op)
	o.Replay = op
	o.Operator = hatch.Operator{Conn: op, Config: current}
	o.Events = eventlog.New("status", h.log.With("service", "status"), storedLog{op})
	return o, closeAll, nil
}

// pageChecklist is the checklist as the status page shows it.
func pageChecklist(caps []capability) []statuspage.Capability {
	out := make([]statuspage.Capability, len(caps))
	for i, c := range caps {
		out[i] = statuspage.Capability{Name: c.name, Missing: append([]string{}, c.missing...)}
	}
	return out
}

// scrubber masks this process's secrets (and tokens of any shape) in what
// the status page shows.
func (h *host) scrubber() redact.Scrubber {
	s, gh, sl := h.settings, h.settings.IngressGitHub, h.settings.IngressSlack
	env := map[string]string{
		"LOOP_GITHUB_TOKEN": gh.Token.Reveal(), "LOOP_GITHUB_WEBHOOK_SECRET": gh.WebhookSecret.Reveal(),
		"LOOP_ENVELOPE_KEY": s.LedgerWriter.EnvelopeKey.Reveal(), "LOOP_SLACK_BOT_TOKEN": sl.BotToken.Reveal(),
		"LOOP_SLACK_APP_TOKEN": sl.AppToken.Reveal(), "LOOP_SLACK_SIGNING_SECRET": sl.SigningSecret.Reveal(),
		"LOOP_STATUS_TOKEN": s.Common.Status.Token.Reveal(), "LOOP_ADMIN_TOKEN": s.Common.Status.AdminToken.Reveal(),
		"LOOP_API_TOKEN": s.Common.API.Token.Reveal(),
	}
	return redact.New(redact.Options{Env: env})
}

func defNames(defs []serviceDef) []string {
	out := make([]string, len(defs))
	for i, d := range defs {
		out[i] = d.name
	}
	return out
}

// consumedBy is the consumer groups of topo that the services of defs run.
func consumedBy(topo bus.Topology, defs []serviceDef) []bus.ConsumerGroup {
	var out []bus.ConsumerGroup
	for _, g := range topo.Consumers {
		for _, d := range defs {
			if d.name == g.Service {
				out = append(out, g)
			}
		}
	}
	return out
}

// reportReloads records the watcher's reloads in the event log: a good edit
// as config.reloaded, a refused one — broken, or failing a service's check
// such as the ledger login's (docs/decisions/027-ledger-login-is-not-a-person.md)
// — as config.reload_failed with why, the previous config staying in force.
func reportReloads(ctx context.Context, w *config.Watcher, events *eventlog.Logger) {
	w.OnReload(func(err error) {
		if err != nil {
			events.Emit(ctx, "config.reload_failed", slog.String("error", err.Error()))
			return
		}
		events.Emit(ctx, "config.reloaded")
	})
}

// logPublisher sends event-log records to loop.log.> with a core publish: the
// LOOP_LOG stream stores them, and a slow log never holds up the work.
type logPublisher struct{ conn *bus.Conn }

func (p logPublisher) PublishLog(_ context.Context, subject string, data []byte) error {
	return p.conn.PublishCore(bus.Message{Subject: subject, Data: data})
}

func displayAddr(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}

// envelopeKey returns LOOP_ENVELOPE_KEY or, under `up`, the key kept in the
// store dir, generating it on first run.
func envelopeKey(s settings, storeDir string) ([]byte, error) {
	if k := s.LedgerWriter.EnvelopeKey; k.IsSet() {
		return []byte(k.Reveal()), nil
	}
	if storeDir == "" {
		return nil, errors.New("LOOP_ENVELOPE_KEY is not set: ledger-writer and ingress-github sign and verify ledger envelopes with it (32 bytes or more)")
	}
	path := filepath.Join(storeDir, "envelope.key")
	if b, err := os.ReadFile(path); err == nil {
		key := strings.TrimSpace(string(b))
		if len(key) < 32 {
			return nil, fmt.Errorf("envelope key in %s is shorter than 32 bytes", path)
		}
		return []byte(key), nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read envelope key: %w", err)
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return nil, fmt.Errorf("generate envelope key: %w", err)
	}
	key := hex.EncodeToString(raw)
	if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write envelope key: %w", err)
	}
	return []byte(key), nil
}

// splitListen parses LOOP_NATS_LISTEN; port 0 means any free port.
func splitListen(addr string) (string, int, error) {
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("LOOP_NATS_LISTEN %q: %w", addr, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("LOOP_NATS_LISTEN %q: bad port", addr)
	}
	if port == 0 {
		port = -1
	}
	return host, port, nil
}
