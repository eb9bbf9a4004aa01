package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/services/dispatcher"
)

// cmdUp runs all five services in one process on an embedded JetStream server
// whose store lives under LOOP_STORE_DIR. Authorization is on: every service
// connects as its own identity, and a client without a credential (an agent
// session among them) is refused. It provisions the streams and consumers as
// the operator, whose seed it keeps, before the services start. Ctrl-C drains every consumer, stops the
// server and exits 0.
func cmdUp(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("up", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	if err := s.Up.Validate(); err != nil {
		return err
	}
	log := newLogger(stderr, s.Common.LogLevel, s.Common.LogFormat)
	if s.Common.NATSURL != "" {
		return fmt.Errorf("%w: LOOP_NATS_URL is set; 'up' runs its own embedded server — use 'the-loop serve <service>' against an external one", errUsage)
	}
	store, err := storeDir(s, env)
	if err != nil {
		return err
	}
	if env["LOOP_ADMIN_ADDR"] == "" {
		// On a laptop the admin server (metrics, the status page) is for
		// this machine: loopback unless the operator says otherwise.
		s.Common.AdminAddr = "127.0.0.1:9090"
	}
	if s.Dispatcher.WorkspaceRoot == "" && env["LOOP_DISPATCHER_WORKDIR"] == "" {
		if s.Dispatcher.WorkspaceRoot, err = config.DefaultWorkspaceRoot(env); err != nil {
			return err
		}
	}
	if err := checkSessionWorkdir(s, store); err != nil {
		return err
	}
	if env["LOOP_SESSION_SANDBOX"] == "" && goruntime.GOOS == "linux" {
		// Sessions run as the operator's own user here: each is confined
		// to its own workspace, away from the store and the bus
		// (SECURITY.md, docs/agents.md "Sandbox").
		s.Dispatcher.SessionSandbox = dispatcher.SandboxLandlock
	}
	emb, err := startEmbedded(ctx, s, store, log)
	if err != nil {
		return err
	}
	defer emb.srv.Shutdown()
	if err := checkSandboxPorts(s, emb.srv.ClientURL()); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "the-loop up: NATS on %s (embedded JetStream, authorization on; store %s)\n", emb.srv.ClientURL(), store)
	fmt.Fprintf(stdout, "the-loop up: reading verbs (events, dlq list, sessions list, graph status) find the observer identity here; verbs that change something need LOOP_NATS_NKEY_FILE=%s\n",
		filepath.Join(store, identitiesDir, bus.IdentityOperator+".nk"))

	caps := checklist(s, operatorConfig(s), exec.LookPath)
	printChecklist(stdout, caps)
	if err := emb.provision(ctx, s); err != nil {
		return err
	}

	h := &host{name: "the-loop up", settings: s, log: log, stdout: stdout, defs: services, envelopeKey: config.NewSecret(string(emb.key)), connect: emb.connect,
		sandboxHidden: []string{store}, checklist: caps,
		operator: func(ctx context.Context) (*bus.Conn, error) { return emb.connect(ctx, bus.IdentityOperator) },
		observer: func(ctx context.Context) (*bus.Conn, error) { return emb.connect(ctx, bus.IdentityObserver) }}
	if err := h.run(ctx); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "the-loop up: drained and stopped")
	return nil
}

// embedded is the embedded JetStream server of `up` (and `demo`), the bus
// identities it admits, and the envelope key.
type embedded struct {
	srv  *bus.Embedded
	keys identityKeys
	key  []byte
	log  *slog.Logger
}

// startEmbedded starts the embedded JetStream server with its store under
// store and authorization on. The services' identities are new at every
// start and never leave the process (they connect in-process); the
// observer's and the operator's are kept in store/nats for the operator
// verbs. key is the envelope key: LOOP_ENVELOPE_KEY or the one kept in the
// store.
func startEmbedded(ctx context.Context, s settings, store string, log *slog.Logger) (*embedded, error) {
	if err := os.MkdirAll(store, 0o700); err != nil {
		return nil, fmt.Errorf("store dir: %w", err)
	}
	key, err := envelopeKey(s, store)
	if err != nil {
		return nil, err
	}
	keys, err := loadIdentities(filepath.Join(store, identitiesDir), topologyOf(s), func(id string) bool {
		return id == bus.IdentityObserver || id == bus.IdentityOperator
	})
	if err != nil {
		return nil, err
	}
	listenHost, port, err := splitListen(s.Up.NATSListen)
	if err != nil {
		return nil, err
	}
	if port > 0 {
		// A port in use is said at once, naming its setting, rather
		// than by the server's own log and a timeout.
		ln, err := httpserver.Listen("LOOP_NATS_LISTEN", s.Up.NATSListen)
		if err != nil {
			return nil, err
		}
		ln.Close()
	}
	srv, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{
		StoreDir: filepath.Join(store, "jetstream"), Host: listenHost, Port: port, Logger: log, Users: keys.users,
	})
	if err != nil {
		return nil, fmt.Errorf("embedded JetStream: %w", err)
	}
	return &embedded{srv: srv, keys: keys, key: key, log: log}, nil
}

// connect opens an in-process connection as identity.
func (e *embedded) connect(ctx context.Context, identity string) (*bus.Conn, error) {
	return e.srv.Connect(ctx, bus.Options{Name: "up/" + identity, Logger: e.log, Credentials: e.keys.credentials(identity), Identity: identity})
}

// provision provisions the topology the settings ask for as the operator
// identity, before any service starts: services wait for it and never
// provision (docs/decisions/098-provisioning-is-the-operators.md).
func (e *embedded) provision(ctx context.Context, s settings) error {
	op, err := e.connect(ctx, bus.IdentityOperator)
	if err != nil {
		return fmt.Errorf("provision as the operator: %w", err)
	}
	defer op.Close()
	topo := topologyOf(s)
	// The identities' public keys, which the services check every
	// event's signature against.
	topo.Signers = e.keys.publicKeys()
	if err := provision(ctx, e.log, op, topo); err != nil {
		return fmt.Errorf("provision streams and consumers: %w", err)
	}
	return nil
}

// checkSandboxPorts refuses a session sandbox that lets sessions connect
// to the bus's port (natsURL's): the sandbox is what keeps them off it.
func checkSandboxPorts(s settings, natsURL string) error {
	if s.Dispatcher.SessionSandbox != dispatcher.SandboxLandlock {
		return nil
	}
	u, err := url.Parse(natsURL)
	if err != nil {
		return nil
	}
	port := u.Port()
	for _, p := range config.List(s.Dispatcher.SessionSandboxPorts) {
		if p == port {
			return fmt.Errorf("LOOP_SESSION_SANDBOX_PORTS holds %s, the port of the bus (LOOP_NATS_LISTEN): sandboxed sessions could reach it; take it out, or move the bus", port)
		}
	}
	return nil
}

// checkSessionWorkdir refuses a session working directory that holds the
// store, a credential or the envelope key: an agent session works there with
// a shell, and must find no secret of the loop's (docs/architecture.md,
// trust boundaries).
func checkSessionWorkdir(s settings, store string) error {
	wd, wdName := s.Dispatcher.WorkspaceRoot, "LOOP_WORKSPACE_ROOT"
	if wd == "" {
		wd, wdName = s.Dispatcher.Workdir, "LOOP_DISPATCHER_WORKDIR"
	}
	secrets := map[string]string{"LOOP_STORE_DIR": store, "LOOP_NATS_NKEY_FILE": s.Common.NATS.NkeyFile, "LOOP_NATS_CREDS_FILE": s.Common.NATS.CredsFile,
		"LOOP_STATUS_NKEY_FILE": s.Common.Status.ObserverNkeyFile, "LOOP_ADMIN_NKEY_FILE": s.Common.Status.AdminNkeyFile,
		"LOOP_NATS_SIGNING_SEED_FILE": s.Common.NATS.SigningSeedFile}
	for _, name := range []string{"LOOP_STORE_DIR", "LOOP_NATS_NKEY_FILE", "LOOP_NATS_CREDS_FILE", "LOOP_NATS_SIGNING_SEED_FILE", "LOOP_STATUS_NKEY_FILE", "LOOP_ADMIN_NKEY_FILE"} {
		if p := secrets[name]; p != "" && within(p, wd) {
			return fmt.Errorf("%s (%s) is inside %s (%s), where agent sessions work with a shell: keep the loop's secrets outside it (move one of the two)", name, p, wdName, wd)
		}
	}
	if store != "" && within(wd, store) {
		return fmt.Errorf("%s (%s) is inside LOOP_STORE_DIR (%s), which holds the loop's seeds and key: agent sessions must work outside it (move one of the two)", wdName, wd, store)
	}
	return nil
}
