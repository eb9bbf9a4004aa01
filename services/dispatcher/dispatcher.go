// Package dispatcher is the dispatcher service, "the loop": it consumes the
// recorded events (loop.ev.>) meant for agent sessions and turns them into
// prompts typed into a work item's terminal session, starts and stops those
// sessions, and obeys control commands (docs/requirements.md K6, K11, K12).
//
// Per event, in the original's order: a control command in a comment (or in a
// relayed control record) is executed — after the named-actor check, which a
// relayed command passes through exactly like a typed one (abuse 5) — and not
// delivered, except execute, which is recorded and delivered; a close of the
// work item closes its session; with no live session the unmatched policy
// decides between spawning (the label arms, a start command starts) and a
// drop; a paused session receives nothing; anything else is rendered with the
// event template and pasted into the session, respawning it (resuming the
// harness conversation when it can) if its terminal is gone.
//
// Order per work item comes from the partition: the bus hands this service
// one event of a partition at a time, and the handler returns only when the
// paste (not the agent's turn) is done. The session registry is the KV bucket
// "sessions" (package pkg/sessions), changed only by compare-and-set.
//
// Hosts. A session runs in the tmux server of the dispatcher replica that
// spawned it, recorded as its host; no other machine can see it. Each replica
// renews a lease in the registry. An event for a session hosted elsewhere is
// retried (ordered redelivery) while that host's lease is fresh — the pin of
// the partition normally returns to it — and once the lease has expired the
// replica takes the session over and respawns it here with resume: the host,
// and with it its tmux server, is gone (in Kubernetes the sessions live in
// the pod). At start a replica kills its own loop-* tmux sessions that the
// registry says are closed or hosted elsewhere, so one work item never has
// two live sessions after a takeover.
//
// Exactly once. A session's document records the id of the event being typed
// (Pending) before the paste and moves it to Delivered after; a redelivery of
// a delivered event is dropped as already-processed. Typing into a terminal is
// not transactional: a crash after the paste and before that second write
// leaves Pending set, with the prompt's "- delivery: <id>" line as its
// marker. The pane settles it: the line there means the harness got it
// (recorded as delivered), a live pane without it means it never did (typed).
// The host that began the paste reads its pane, on the redelivery or at its
// next start (panes.settle); another replica that gets the redelivery waits
// for that host while its lease is fresh. Only when nothing can tell — the
// pane is gone, the host does not come back, a custom template has no
// $delivery_id — is the event dropped as delivery-uncertain rather than typed
// twice (decision 024).
//
// Without tmux or the harness binary the service keeps running, consumes
// nothing (events wait in the stream), reports why on /readyz and in its log,
// and starts consuming once both are found.
package dispatcher

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/proc"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
)

// Name is the service name used for consumers, logs and `serve`.
const Name = bus.ServiceDispatcher

// DefaultLabel is the auto-execute label (routing.autoExecuteLabel): the
// default of LOOP_GITHUB_POLL_LABEL, read from where it is declared.
var DefaultLabel = DefaultConfig().Label

// Spawn policies (routing.spawnOnUnmatched).
const (
	SpawnNever   = "never"
	SpawnLabeled = "labeled"
	SpawnAlways  = "always"
)

// Settings are the dispatcher's own settings. The zero value is the default
// deployment: Claude Code in a tmux server per session, labeled policy.
type Settings struct {
	// Harness is the agent harness (default agent.Claude()).
	Harness agent.Harness
	// HarnessFor builds the harness from the operator config in force
	// (routing.defaultHarness, routing.harnessArgs); nil: Harness.
	HarnessFor func(*config.Config) (agent.Harness, error)
	// Runner hosts the sessions: RunnerTmux (default) or RunnerProcess.
	Runner string
	// TmuxBinary is the tmux binary (default "tmux").
	TmuxBinary string
	// TmuxDir is the directory of the sessions' tmux servers' sockets,
	// one server per session, each socket named after its session
	// (default: the-loop/tmux under XDG_RUNTIME_DIR, else .the-loop/tmux
	// under the workspace root).
	TmuxDir string
	// TmuxSocket is LOOP_TMUX_SOCKET, deprecated: with TmuxDir unset it
	// names the default directory's last element, tmux-<name>.
	TmuxSocket string
	// Host names this replica in the registry (default os.Hostname()).
	Host string
	// Workdir is the sessions' working directory (default ".").
	Workdir string
	// Label is the auto-execute label (default DefaultLabel).
	Label string
	// SpawnOnUnmatched is never, labeled or always (default labeled).
	SpawnOnUnmatched string
	// InteractionMode is work-item (default) or cli.
	InteractionMode string
	// EventTemplate and SpawnTemplate are template files; "" keeps the
	// built-in text.
	EventTemplate, SpawnTemplate string
	// ResumeProbe is how long a resumed harness must stay up to count as
	// resumed (default 2s: an unknown id makes `claude --resume` exit).
	ResumeProbe time.Duration
	// Lease is how long a host's lease lasts without renewal (default 90s);
	// it is renewed every Lease/3.
	Lease time.Duration
	// ElsewhereRetry delays the redelivery of an event whose session is
	// hosted by a live replica elsewhere (default 15s).
	ElsewhereRetry time.Duration
	// RecheckEvery is how often a replica without tmux or harness looks
	// for them again (default 30s).
	RecheckEvery time.Duration
	// NewSessionID makes harness session ids (default random UUIDv4).
	NewSessionID func() string
	// SessionAddr is where the session endpoint listens (default
	// "127.0.0.1:0", any free port; a deployment keeps it fixed so that
	// tmux sessions outliving a restart still reach it).
	SessionAddr string
	// SessionEndpointHost is the host in the URL sessions reach the
	// endpoint at: "" the listener's (loopback when unspecified),
	// "hostname" this replica's hostname, else that name.
	SessionEndpointHost string
	// WorkspaceShared: sessions run as another user of this process's
	// group, so what it creates is made group-writable (umask 0002).
	WorkspaceShared bool
	// SessionEnv is the environment every session starts with, besides the
	// harness's own and its endpoint: an allow-list of the dispatcher's
	// (SessionBaseEnv). Nothing else of the dispatcher's environment
	// reaches a session.
	SessionEnv map[string]string
	// Scrub masks secrets in text a session sends toward GitHub or Slack
	// (default redact.FromOS().Scrub).
	Scrub func(string) string
	// SessionPerPR gives pull requests their own sessions whatever the
	// operator config says (routing.tmux.sessionPerPr; tests).
	SessionPerPR bool
	// Workspace is where each work item's checkouts are made (its Root
	// defaults to Workdir, its Strategy to worktree).
	Workspace workspace.Config
	// AgentGitCredentials is a git credential-store file agents fetch and
	// push with ("": git's own configuration).
	AgentGitCredentials string
	// PluginDir is where the loop's harness plugin is installed (default
	// .the-loop/plugin under the workspace root).
	PluginDir string
	// StopMaxAttempts bounds the Stop hook's blocks in a row (default 3).
	StopMaxAttempts int
	// LoopBinaryDir is put first on every session's PATH, so that the
	// agent and the plugin's hooks find `the-loop` (default: this
	// process's own directory when the process is the-loop). Its
	// the-loop confines sessions.
	LoopBinaryDir string
	// Sandbox confines every session (sandbox.go): SandboxLandlock, or
	// SandboxOff (default). Without LoopBinaryDir sessions start
	// unconfined, and the log says so.
	Sandbox string
	// SandboxPorts are the TCP ports a confined session may connect to
	// besides its endpoint's; SandboxWrite and SandboxRead the paths it may
	// also write, and read and execute ("~/": the sessions' HOME). Nil
	// takes the defaults of LOOP_SESSION_SANDBOX_PORTS, _WRITE and _READ.
	SandboxPorts              []uint16
	SandboxWrite, SandboxRead []string
	// SandboxHidden are paths no session's sandbox may give it, or give
	// anything inside of: `up` names its store. A sandbox that would is
	// refused, and the session does not start.
	SandboxHidden []string
}

func (c *Settings) setDefaults() {
	// The settings' defaults are Config's tags; a zero Settings (tests)
	// takes them too.
	d := DefaultConfig().settings()
	if c.Harness == nil {
		c.Harness = d.Harness
	}
	if c.Runner == "" {
		c.Runner = d.Runner
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
		if c.Host == "" {
			c.Host = "localhost"
		}
	}
	if c.Workdir == "" {
		c.Workdir = d.Workdir
	}
	if c.Label == "" {
		c.Label = d.Label
	}
	if c.SpawnOnUnmatched == "" {
		c.SpawnOnUnmatched = d.SpawnOnUnmatched
	}
	if c.ResumeProbe == 0 {
		c.ResumeProbe = 2 * time.Second
	}
	if c.Lease <= 0 {
		c.Lease = 90 * time.Second
	}
	if c.ElsewhereRetry <= 0 {
		c.ElsewhereRetry = 15 * time.Second
	}
	if c.RecheckEvery <= 0 {
		c.RecheckEvery = 30 * time.Second
	}
	if c.NewSessionID == nil {
		c.NewSessionID = uuid4
	}
	if c.SessionAddr == "" {
		c.SessionAddr = "127.0.0.1:0"
	}
	if c.SessionEnv == nil {
		c.SessionEnv = SessionBaseEnv(osEnv(), nil)
	}
	if c.Workspace.Root == "" {
		c.Workspace.Root = c.Workdir
	}
	if c.Workspace.Strategy == "" {
		c.Workspace.Strategy = d.Workspace.Strategy
	}
	if c.PluginDir == "" {
		c.PluginDir = filepath.Join(c.Workspace.Root, ".the-loop", "plugin")
	}
	if c.StopMaxAttempts <= 0 {
		c.StopMaxAttempts = 3
	}
	if c.LoopBinaryDir == "" {
		if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "the-loop" {
			c.LoopBinaryDir = filepath.Dir(exe)
		}
	}
	if c.AgentGitCredentials != "" {
		c.Workspace.Env = append(c.Workspace.Env, workspace.CredentialEnv(c.AgentGitCredentials)...)
	}
	if c.Sandbox == "" {
		c.Sandbox = d.Sandbox
	}
	if c.SandboxPorts == nil {
		c.SandboxPorts = d.SandboxPorts
	}
	if c.SandboxWrite == nil {
		c.SandboxWrite = d.SandboxWrite
	}
	if c.TmuxDir == "" {
		c.TmuxDir = defaultTmuxDir(c.Workspace.Root, c.TmuxSocket)
	}
}

// defaultTmuxDir is where the sessions' tmux sockets go when LOOP_TMUX_DIR
// is unset: the user's runtime directory, private and out of every
// session's sandbox, else beside the plugin under the workspace root, which
// no session writes either. Never the user's own tmux directory: the loop
// does not share the operator's server.
func defaultTmuxDir(root, socket string) string {
	name := "tmux"
	if socket != "" {
		name += "-" + socket
	}
	if run := os.Getenv("XDG_RUNTIME_DIR"); filepath.IsAbs(run) {
		return filepath.Join(run, "the-loop", name)
	}
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	return filepath.Join(root, ".the-loop", name)
}

// Option configures New.
type Option func(*Settings)

// WithSettings replaces the settings Config set (unset fields take their
// defaults): tests set what no environment variable does.
func WithSettings(s Settings) Option { return func(c *Settings) { *c = s } }

// WithSandboxHidden names paths no session's sandbox may give it (see
// Settings.SandboxHidden): `up` names its store.
func WithSandboxHidden(paths ...string) Option {
	return func(c *Settings) { c.SandboxHidden = append(c.SandboxHidden, paths...) }
}

// WithSessionEnv sets the environment every session starts with: the host
// picks it from its own with SessionBaseEnv and Config.SessionEnvNames.
func WithSessionEnv(env map[string]string) Option { return func(c *Settings) { c.SessionEnv = env } }

// Service is the dispatcher.
type Service struct {
	deps  service.Deps
	set   Settings
	tmux  terminal
	tmpl  templates
	m     *metrics
	store atomic.Pointer[sessions.Store]

	// The dispatcher's jobs besides the per-event pipeline (handle.go,
	// deliver.go, spawn.go), each with only what it needs (wire.go).
	gates    *gates
	endpoint *sessionEndpoint
	leases   *leases
	panes    *panes
	control  *controller
	records  recorder
	marks    *marker

	// unavailable is why sessions cannot run here ("" when they can).
	mu          sync.Mutex
	unavailable string
	// sessionURL is the session endpoint's URL, given to every session
	// started here (set before consuming starts).
	sessionURL string
	// workspaces makes each work item's checkouts (see workspace).
	wsMu       sync.Mutex
	workspaces *workspace.Manager
	// plugin is where the loop's plugin was installed (nil: not yet, or
	// not at all).
	plugin atomic.Pointer[string]
	// sandboxSupported stands in for sandbox.Supported in tests (nil: it).
	sandboxSupported func() error
	// servers are the sessions' tmux servers (RunnerTmux; nil otherwise);
	// launches holds, per target, the command its server is started
	// through (sandbox.go, serverLaunch).
	servers  *tmux.Servers
	launches sync.Map
	// stopRuns ends the verify-tests runs in flight when Run returns.
	stopRuns context.CancelFunc
}

// New returns the service with cfg's settings, adjusted by opts. It never
// fails for a missing tmux or harness: Run reports those and waits for them.
func New(deps service.Deps, cfg Config, opts ...Option) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	set := service.Apply(cfg.settings(), opts)
	set.setDefaults()
	m, err := newMetrics(deps.Registry)
	if err != nil {
		return nil, fmt.Errorf("%s: metrics: %w", Name, err)
	}
	s := &Service{deps: deps, set: set, m: m}
	switch set.Runner {
	case RunnerTmux:
		s.servers = &tmux.Servers{Binary: set.TmuxBinary, Dir: set.TmuxDir, RemainOnExit: true, Env: envList(set.SessionEnv),
			Launch: s.serverLaunch}
		s.tmux = s.servers
	case RunnerProcess:
		s.tmux = &proc.Server{}
	default:
		return nil, fmt.Errorf("%s: session runner %q: want %s or %s", Name, set.Runner, RunnerTmux, RunnerProcess)
	}
	s.tmux = tracedTerminal{s.tmux}
	s.wire()
	return s, nil
}

// Session runners (LOOP_DISPATCHER_RUNNER).
const (
	// RunnerTmux runs each session in a tmux session: it survives the
	// dispatcher's restarts and a person can attach to it.
	RunnerTmux = "tmux"
	// RunnerProcess runs each session as a child process of the
	// dispatcher, for hosts without tmux; sessions end with the process.
	RunnerProcess = "process"
)

// terminal is what hosts sessions: a tmux server or, with RunnerProcess,
// the dispatcher's child processes (package proc). The field keeps the name
// tmux: every call site means the same operation either way.
type terminal interface {
	Available() error
	Probe(ctx context.Context, target string) tmux.State
	Spawn(ctx context.Context, target, cwd string, env map[string]string, argv []string) error
	// Deliver types prompt into target; it fails with tmux.ErrMissing,
	// having typed nothing, when target is absent or dead (its own probe).
	Deliver(ctx context.Context, target, prompt string) error
	Kill(ctx context.Context, target string) error
	Sessions(ctx context.Context) ([]string, error)
	// Shows reports whether text stands in what target shows (tmux: the
	// pane and its scrollback), ending a line or followed by a space.
	Shows(ctx context.Context, target, text string) (bool, error)
	// Capture returns the last lines lines target shows: its transcript.
	Capture(ctx context.Context, target string, lines int) (string, error)
}

// check reports why sessions cannot run on this host, or nil.
func (s *Service) check() error {
	if err := s.tmux.Available(); err != nil {
		return err
	}
	if err := s.set.Harness.Available(); err != nil {
		return err
	}
	if err := s.sandboxProblem(); err != nil {
		return err
	}
	_, err := s.workspace()
	return err
}

// workspace returns the workspace manager, making it on first use (it
// checks that git runs, which may be installed while the replica waits).
func (s *Service) workspace() (*workspace.Manager, error) {
	s.wsMu.Lock()
	defer s.wsMu.Unlock()
	if s.workspaces == nil {
		ws, err := workspace.New(s.set.Workspace)
		if err != nil {
			return nil, fmt.Errorf("workspaces under %s: %w", s.set.Workspace.Root, err)
		}
		s.workspaces = ws
	}
	return s.workspaces, nil
}

// Run consumes the event stream until ctx is done, then drains. It returns
// an error only when the bus itself fails under it.
func (s *Service) Run(ctx context.Context) error {
	// Child-process sessions (RunnerProcess) must not outlive the service;
	// tmux sessions do, by design.
	if c, ok := s.tmux.(io.Closer); ok {
		defer func() {
			if err := c.Close(); err != nil {
				s.deps.Log.Warn("dispatcher: ending session processes", "err", err)
			}
		}()
	}
	// Registered under the service's own name so /readyz lists the
	// dispatcher (with the reason) while it waits; the consumer's check
	// replaces it once consuming starts.
	s.deps.Ready.Add(Name, func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.unavailable != "" {
			return errors.New(s.unavailable)
		}
		return nil
	})
	defer s.gates.serve()() // `the-loop graph` asks here, with or without sessions
	defer s.stopRuns()
	if s.set.Sandbox == SandboxLandlock && !s.sandboxed() {
		s.deps.Log.Warn("dispatcher: LOOP_SESSION_SANDBOX is landlock, but this process is not the-loop, whose binary confines sessions: sessions start unconfined")
	}
	if s.set.TmuxSocket != "" && s.servers != nil {
		s.deps.Log.Warn("dispatcher: LOOP_TMUX_SOCKET is deprecated: each session runs on a tmux server of its own, its socket in LOOP_TMUX_DIR",
			"tmux_dir", s.set.TmuxDir)
	}
	if !s.waitAvailable(ctx) {
		return nil
	}
	store, ok := s.openStore(ctx)
	if !ok {
		return nil
	}
	if s.set.WorkspaceShared {
		groupWritable()
	}
	s.installPlugin()
	s.store.Store(store)
	defer s.serveTranscripts(store)()
	// Sessions reach the loop through the endpoint only; it is up before
	// the first session is started.
	ln, url, err := s.endpoint.listen()
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	s.sessionURL = url
	s.deps.Log.Info("dispatcher: session endpoint listening", "url", url)
	s.panes.settle(ctx, store)
	s.panes.reconcile(ctx, store)
	hctx, stop := context.WithCancel(ctx)
	defer stop()
	go s.leases.renew(hctx, store, s.panes.reconcile)
	served := make(chan error, 1)
	go func() { served <- s.endpoint.serve(hctx, ln) }()
	// This replica is a member of the dispatcher's replicas under its
	// session host's name: the partitions it owns are the work items whose
	// sessions run here.
	deps := s.deps
	deps.Replica = s.set.Host
	err = service.Consume(ctx, deps, Name, bus.StreamEvents, s.handle)
	stop()
	if serr := <-served; serr != nil && err == nil {
		err = fmt.Errorf("%s: session endpoint: %w", Name, serr)
	}
	return err
}

// waitAvailable blocks until tmux and the harness are found (true) or ctx
// ends (false), saying why on /readyz and, once per reason, in the log.
func (s *Service) waitAvailable(ctx context.Context) bool {
	last := ""
	for {
		err := s.check()
		s.mu.Lock()
		if err == nil {
			s.unavailable = ""
		} else {
			s.unavailable = "agent sessions unavailable: " + err.Error()
		}
		s.mu.Unlock()
		if err == nil {
			if last != "" {
				s.deps.Log.Info("dispatcher: agent sessions available; consuming")
			}
			return true
		}
		if err.Error() != last {
			last = err.Error()
			s.deps.Log.Warn("dispatcher: agent sessions unavailable; not consuming until this is fixed (events wait in the stream)", "err", err)
		}
		t := time.NewTimer(s.set.RecheckEvery)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
}

// openStore opens the registry, retrying while the bus is unreachable.
func (s *Service) openStore(ctx context.Context) (*sessions.Store, bool) {
	for attempt := 0; ; attempt++ {
		store, err := sessions.Open(ctx, s.deps.Conn)
		if err == nil {
			return store, true
		}
		if attempt == 0 {
			s.deps.Log.Warn("dispatcher: session registry unavailable; retrying", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-time.After(time.Second):
		}
	}
}

// envList is env as KEY=value lines, for exec.
func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// uuid4 returns a random RFC 4122 version 4 UUID.
func uuid4() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// eventAttrs are the ids every record about ev carries.
func eventAttrs(in *input) []slog.Attr {
	return []slog.Attr{
		slog.String("work_item", in.ref),
		slog.String("event_id", in.ev.GetId()),
		slog.String("event_type", in.ev.GetType()),
		slog.String("gh_event", in.ghEvent),
		slog.String("action", in.action),
		slog.String("delivery_id", in.deliveryID),
	}
}
