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
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/tracing"
	"github.com/the-loop/bus/services/dispatcher"
	ingressgithub "github.com/the-loop/bus/services/ingress-github"
	ingressslack "github.com/the-loop/bus/services/ingress-slack"
	ledgerwriter "github.com/the-loop/bus/services/ledger-writer"
	"github.com/the-loop/bus/services/runtime"
	slackrenderer "github.com/the-loop/bus/services/slack-renderer"
	"github.com/the-loop/bus/services/statuspage"
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
	new      func(runtime.Deps, hostKind) (runner, error)
}

// hostKind says whether a service runs alone (`serve`, a container: refuse
// what cannot work) or beside the others (`up`: keep the process running and
// report the problem in /readyz).
type hostKind struct{ serve bool }

func newDispatcher(d runtime.Deps, _ hostKind) (runner, error) {
	return dispatcher.New(d, dispatcher.WithSettings(dispatcher.Settings{
		Harness:          dispatcher.ClaudeCode(d.Dispatcher.HarnessBinary, nil),
		Runner:           d.Dispatcher.Runner,
		TmuxBinary:       d.Dispatcher.TmuxBinary,
		TmuxSocket:       d.Dispatcher.TmuxSocket,
		Host:             d.Dispatcher.Host,
		Workdir:          d.Dispatcher.Workdir,
		Label:            d.GitHub.PollLabel,
		SpawnOnUnmatched: d.Dispatcher.Spawn,
		SessionAddr:      d.Dispatcher.SessionAddr,
		SessionEnv:       d.SessionEnv,
	}))
}

func newIngressGitHub(d runtime.Deps, k hostKind) (runner, error) {
	o := ingressgithub.DefaultOptions()
	o.Mode = ingressgithub.Mode(d.GitHub.Mode)
	o.InsecureNoSignature = d.GitHub.InsecureNoSignature
	o.MaxConcurrent = d.GitHub.WebhookConcurrency
	o.RequireWebhookSecret = k.serve
	o.Poll.Repos = d.GitHub.PollRepoList()
	o.Poll.Label = d.GitHub.PollLabel
	o.Poll.Interval = d.GitHub.PollInterval
	return ingressgithub.NewWithOptions(d, o)
}

// services lists the five services in start order: consumers of the streams
// first, producers last, so nothing published by a producer at start waits
// on a consumer that is not up yet.
var services = []serviceDef{
	{ledgerwriter.Name, true, func(d runtime.Deps, _ hostKind) (runner, error) {
		return ledgerwriter.New(d, ledgerwriter.WithPacing(d.GitHub.WritesPerMinute, d.GitHub.WritesPerHour))
	}},
	{slackrenderer.Name, false, func(d runtime.Deps, _ hostKind) (runner, error) {
		return slackrenderer.New(d, slackrenderer.WithPostInterval(d.Slack.PostInterval))
	}},
	{dispatcher.Name, false, newDispatcher},
	{ingressgithub.Name, true, newIngressGitHub},
	{ingressslack.Name, false, func(d runtime.Deps, _ hostKind) (runner, error) { return ingressslack.New(d) }},
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

// settings is every environment setting a host reads.
type settings struct {
	Common     config.Common
	GitHub     config.GitHub
	Slack      config.Slack
	Up         config.Up
	Dispatcher config.Dispatcher
	Session    config.Session
	// sessionEnv is the allow-listed part of this process's environment
	// that agent sessions start with.
	sessionEnv map[string]string
	// fromConfig are the warnings of the process settings the operator
	// config set (an environment variable that overrides one).
	fromConfig []config.Warning
}

func loadSettings(env config.Env) (settings, error) {
	var s settings
	if err := config.CheckEnv(env); err != nil {
		return s, err
	}
	// A file written for the original sets some process settings
	// (routing.autoExecuteLabel is LOOP_GITHUB_POLL_LABEL, …). A file that
	// does not load sets none here; the host refuses it when it loads it.
	if withFile, ws, err := config.EnvWithConfig(env); err == nil {
		env, s.fromConfig = withFile, ws
	}
	if err := config.Process(env, &s.Common, &s.GitHub, &s.Slack, &s.Up, &s.Dispatcher, &s.Session); err != nil {
		return s, err
	}
	if err := s.Common.Validate(); err != nil {
		return s, err
	}
	s.sessionEnv = dispatcher.SessionBaseEnv(env, s.Dispatcher.SessionEnvNames())
	return s, nil
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
	envelopeKey []byte
	// serve: one service in its own process.
	serve bool
	// started, if set, is called once every service was started, with the
	// readiness the admin server reports (the demo waits on it).
	started func(*httpserver.Readiness)
	// operator, if set, connects as the operator identity: what the status
	// page's DLQ replay acts with when LOOP_ADMIN_TOKEN is set.
	operator func(ctx context.Context) (*bus.Conn, error)
	// adminAt, if set, hears the admin server's address.
	adminAt func(addr string)
}

// defaultConfig is the operator config without a file: nobody authorized,
// Slack off.
var defaultConfig = config.Default()

func (h *host) run(ctx context.Context) (err error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := bus.NewMetrics(reg)
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	buildInfo := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "loop_build_info", Help: "Always 1: the running the-loop's version and Go version, and the services this process hosts.",
	}, []string{"version", "goversion", "services"})
	buildInfo.WithLabelValues(buildVersion(), goruntime.Version(), strings.Join(defNames(h.defs), ",")).Set(1)
	reg.MustRegister(buildInfo)
	service := "the-loop"
	if len(h.defs) == 1 {
		service = "the-loop-" + h.defs[0].name
	}
	stopTracing, err := tracing.Setup(ctx, service, os.Getenv)
	if err != nil {
		return err
	}
	defer func() {
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = stopTracing(tctx)
	}()
	conns := make(map[string]*bus.Conn, len(h.defs))
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for name, c := range conns {
			if derr := c.Drain(dctx); derr != nil {
				h.log.Warn("drain NATS connection", "service", name, "err", derr)
			}
		}
	}()
	for _, def := range h.defs {
		c, err := h.connect(ctx, def.name)
		if err != nil {
			return fmt.Errorf("%s: connect to NATS: %w", def.name, err)
		}
		conns[def.name] = c
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

	// A credential the server refuses ends provisioning at once with the
	// reason, rather than after its timeout with none.
	rctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	for _, c := range conns {
		go func() {
			if err := c.Refused(rctx); err != nil {
				refused(err)
			}
		}()
	}
	topo := bus.DefaultTopology()
	topo.Partitions = h.settings.Common.Partitions
	topo.Replicas = h.settings.Common.Replicas
	reg.MustRegister(bus.NewStateCollector(conns[h.defs[0].name], []string{bus.StreamInbox, bus.StreamEvents, bus.StreamDLQ, bus.StreamLog},
		consumedBy(topo, h.defs), topo.Partitions))
	err = provision(rctx, h.log, conns[h.defs[0].name], topo)
	var ae *bus.AuthError
	if cause := context.Cause(rctx); errors.As(cause, &ae) {
		return cause
	}
	if err != nil {
		return fmt.Errorf("provision streams and consumers: %w", err)
	}

	ln, err := httpserver.Listen(h.settings.Common.AdminAddr)
	if err != nil {
		return fmt.Errorf("admin: %w", err)
	}
	fmt.Fprintf(h.stdout, "%s: admin on http://%s (/healthz /readyz /metrics), status page http://%s/status\n", h.name, displayAddr(ln.Addr()), displayAddr(ln.Addr()))
	if h.adminAt != nil {
		h.adminAt(ln.Addr().String())
	}

	g, gctx := errgroup.WithContext(ctx)
	current := func() *config.Config { return defaultConfig }
	var checks runtime.ConfigChecks
	var watcher *config.Watcher
	if path := h.settings.Common.ConfigPath; path != "" {
		watcher, err = config.NewWatcher(path, h.log)
		if err != nil {
			ln.Close()
			return fmt.Errorf("operator config: %w", err)
		}
		config.LogWarnings(h.log, path, h.settings.fromConfig)
		current, checks = watcher.Current, watcher
	}
	names := make([]string, 0, len(h.defs))
	for i, def := range h.defs {
		conn := conns[def.name]
		deps := runtime.Deps{
			Conn:        conn,
			Log:         h.log.With("service", def.name),
			Events:      eventlog.New(def.name, h.log.With("service", def.name), logPublisher{conn}).Queued(logq),
			Registry:    reg,
			Ready:       ready,
			Partitions:  topo.Partitions,
			Concurrency: h.settings.Common.Concurrency,
			Metrics:     metrics,
			Config:      current,
			Checks:      checks,
			GitHub:      h.settings.GitHub,
			Slack:       h.settings.Slack,
			Dispatcher:  h.settings.Dispatcher,
			SessionEnv:  h.settings.sessionEnv,
		}
		if def.needsKey {
			deps.EnvelopeKey = h.envelopeKey
		}
		if watcher != nil && i == 0 {
			// One watcher serves the host's services: its reloads are
			// recorded once, by the first of them.
			reportReloads(gctx, watcher, deps.Events)
		}
		svc, err := def.new(deps, hostKind{serve: h.serve})
		if err != nil {
			ln.Close()
			return fmt.Errorf("%s: %w", def.name, err)
		}
		names = append(names, def.name)
		// A credential the server refuses stops the process, naming the
		// service and the setting, rather than leaving it unready.
		g.Go(func() error { return conn.Refused(gctx) })
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
	if watcher != nil {
		g.Go(func() error { return watcher.Run(gctx) })
	}
	mux := httpserver.AdminMux(ready, reg)
	page, op, err := h.statusPage(ctx, conns[h.defs[0].name], topo, current)
	if err != nil {
		ln.Close()
		return err
	}
	if op != nil {
		defer op.Close()
	}
	statuspage.Register(mux, page)
	g.Go(func() error { return httpserver.Serve(gctx, ln, mux, h.log) })
	fmt.Fprintf(h.stdout, "%s: running %s; Ctrl-C drains and stops\n", h.name, strings.Join(names, ", "))
	if h.started != nil {
		h.started(ready)
	}
	return g.Wait()
}

// statusPage is the status page's options: it reads over conn (every
// identity's grant includes the page's reads), and replays as the operator
// when LOOP_ADMIN_TOKEN is set and this host holds the operator identity.
func (h *host) statusPage(ctx context.Context, conn *bus.Conn, topo bus.Topology, current func() *config.Config) (statuspage.Options, *bus.Conn, error) {
	st := h.settings.Common.Status
	o := statuspage.Options{
		Conn: conn, Config: current, Topology: topo, Expose: st.Expose, Token: st.Token.Reveal(),
		AdminToken: st.AdminToken.Reveal(), Log: h.log.With("service", "status"), Scrub: h.scrubber(),
	}
	if o.AdminToken == "" || h.operator == nil {
		return o, nil, nil
	}
	op, err := h.operator(ctx)
	if err != nil {
		return o, nil, fmt.Errorf("status page: the operator identity for DLQ replay: %w", err)
	}
	o.Replay = op
	o.Events = eventlog.New("status", h.log.With("service", "status"), storedLog{op})
	return o, op, nil
}

// scrubber masks this process's secrets (and tokens of any shape) in what
// the status page shows.
func (h *host) scrubber() redact.Scrubber {
	s := h.settings
	env := map[string]string{
		"LOOP_GITHUB_TOKEN": s.GitHub.Token.Reveal(), "LOOP_GITHUB_WEBHOOK_SECRET": s.GitHub.WebhookSecret.Reveal(),
		"LOOP_ENVELOPE_KEY": s.GitHub.EnvelopeKey.Reveal(), "LOOP_SLACK_BOT_TOKEN": s.Slack.BotToken.Reveal(),
		"LOOP_SLACK_APP_TOKEN": s.Slack.AppToken.Reveal(), "LOOP_SLACK_SIGNING_SECRET": s.Slack.SigningSecret.Reveal(),
		"LOOP_STATUS_TOKEN": s.Common.Status.Token.Reveal(), "LOOP_ADMIN_TOKEN": s.Common.Status.AdminToken.Reveal(),
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
	if s.GitHub.EnvelopeKey.IsSet() {
		return []byte(s.GitHub.EnvelopeKey.Reveal()), nil
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

// provisionAttempt bounds one attempt at provisioning.
const provisionAttempt = 20 * time.Second

// provision provisions topo within 30 seconds a replica: each replica of a
// replicated topology is a raft group per stream and consumer, formed
// through the meta leader while every other service provisions the same.
// On a cluster a JetStream API request sent while a leader is being elected
// can go unanswered and would hold the call to its deadline, so an attempt
// that runs out of time is made again: provisioning is idempotent, and what
// the last attempt created is found.
func provision(ctx context.Context, log *slog.Logger, c *bus.Conn, topo bus.Topology) error {
	deadline := time.Now().Add(time.Duration(max(1, topo.Replicas)) * 30 * time.Second)
	for attempt := 1; ; attempt++ {
		end := time.Now().Add(provisionAttempt)
		if end.After(deadline) {
			end = deadline
		}
		actx, cancel := context.WithDeadline(ctx, end)
		err := c.Provision(actx, topo)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) || !time.Now().Before(deadline) {
			return err
		}
		log.Warn("provisioning streams and consumers again", "attempt", attempt, "err", err)
	}
}
