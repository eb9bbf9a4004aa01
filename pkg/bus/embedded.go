package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configures an in-process nats-server.
type EmbeddedOptions struct {
	// StoreDir is the JetStream store directory. Required: the server's
	// default lives in the OS temp dir and is shared by every instance on the
	// host.
	StoreDir string
	// Host and Port are where the server listens for TCP clients (the CLI
	// verbs and agent sessions use it). Defaults 127.0.0.1 and 4222; Port -1
	// picks a free port (tests).
	Host string
	Port int
	// ServerName names the server (default "the-loop").
	ServerName string
	// MaxStore and MaxMemory cap JetStream storage in bytes; 0 keeps the
	// server defaults (75% of free disk / of RAM).
	MaxStore, MaxMemory int64
	// Logger receives the server's own log lines at Warn and above (Info with
	// Debug). nil silences the server.
	Logger *slog.Logger
	// Debug forwards the server's notices too.
	Debug bool
	// ReadyTimeout bounds the wait for the server to accept clients
	// (default 10s).
	ReadyTimeout time.Duration
	// Users, when set, turns authorization on: only these NKey users may
	// connect, each with its grant; a client without a credential is
	// refused.
	Users []User
	// SyncInterval, when set, syncs the store to disk on that interval
	// instead of on every write, as a JetStream cluster's nodes do (they
	// recover from each other). Benchmarks that measure something other
	// than the disk of a shared machine set it; a single node in production
	// never does.
	SyncInterval time.Duration
}

// User is one NKey user of a server: its public key and what it may do.
type User struct {
	Public string
	Grant  Grant
}

// serverPermissions is g in nats-server's own terms.
func (g Grant) serverPermissions() *server.Permissions {
	p := &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: slices.Clone(g.Publish)},
		Subscribe: &server.SubjectPermission{Allow: slices.Clone(g.Subscribe)},
	}
	if g.Responses {
		p.Response = &server.ResponsePermission{MaxMsgs: 1, Expires: time.Minute}
	}
	return p
}

// Embedded is a running in-process nats-server with JetStream.
type Embedded struct {
	srv  *server.Server
	opts EmbeddedOptions
}

// StartEmbedded starts an in-process nats-server with JetStream on a file
// store in opts.StoreDir. It fsyncs every write (SyncAlways: a single node has
// no replica to recover acked messages from after a host crash) and never
// installs signal handlers (NoSigs: otherwise SIGTERM would os.Exit the whole
// process and bypass the service's graceful drain).
func StartEmbedded(ctx context.Context, opts EmbeddedOptions) (*Embedded, error) {
	if opts.StoreDir == "" {
		return nil, errors.New("bus: embedded: StoreDir is required")
	}
	dir, err := filepath.Abs(opts.StoreDir)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded: store dir: %w", err)
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.Port == 0 {
		opts.Port = 4222
	}
	if opts.ServerName == "" {
		opts.ServerName = "the-loop"
	}
	if opts.ReadyTimeout <= 0 {
		opts.ReadyTimeout = 10 * time.Second
	}
	sopts := &server.Options{
		ServerName:         opts.ServerName,
		Host:               opts.Host,
		Port:               opts.Port,
		JetStream:          true,
		StoreDir:           dir,
		JetStreamMaxStore:  opts.MaxStore,
		JetStreamMaxMemory: opts.MaxMemory,
		SyncAlways:         opts.SyncInterval <= 0,
		SyncInterval:       opts.SyncInterval,
		NoSigs:             true,
		NoLog:              opts.Logger == nil,
	}
	for _, u := range opts.Users {
		sopts.Nkeys = append(sopts.Nkeys, &server.NkeyUser{Nkey: u.Public, Permissions: u.Grant.serverPermissions()})
	}
	srv, err := server.NewServer(sopts)
	if err != nil {
		return nil, fmt.Errorf("bus: embedded: %w", err)
	}
	if opts.Logger != nil {
		srv.SetLoggerV2(&serverLogger{log: opts.Logger.With("component", "nats-server"), debug: opts.Debug}, false, false, false)
	}
	go srv.Start()
	deadline := time.Now().Add(opts.ReadyTimeout)
	for !srv.ReadyForConnections(25 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			srv.Shutdown()
			return nil, fmt.Errorf("bus: embedded: %w", err)
		}
		if time.Now().After(deadline) {
			srv.Shutdown()
			return nil, fmt.Errorf("bus: embedded: server not ready after %s", opts.ReadyTimeout)
		}
	}
	opts.StoreDir = dir
	return &Embedded{srv: srv, opts: opts}, nil
}

// ClientURL is the TCP URL clients outside the process use.
func (e *Embedded) ClientURL() string { return e.srv.ClientURL() }

// Port is the TCP port the server listens on (useful after Port -1).
func (e *Embedded) Port() int {
	if a, ok := e.srv.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// StoreDir is the absolute JetStream store directory.
func (e *Embedded) StoreDir() string { return e.opts.StoreDir }

// Connect opens a client connection over an in-process pipe: no TCP, no
// port. Such a connection cannot outlive this server (it does not reconnect
// to a restarted one); use Connect with ClientURL for that. opts.URL is
// ignored.
func (e *Embedded) Connect(ctx context.Context, opts Options) (*Conn, error) {
	opts.URL = e.ClientURL()
	return connect(ctx, opts, nats.InProcessServer(e.srv))
}

// Shutdown stops the server and waits until it has stopped.
func (e *Embedded) Shutdown() {
	e.srv.Shutdown()
	e.srv.WaitForShutdown()
}

// serverLogger adapts slog to nats-server's Logger.
type serverLogger struct {
	log   *slog.Logger
	debug bool
}

func (l *serverLogger) Noticef(format string, v ...any) {
	if l.debug {
		l.log.Info(fmt.Sprintf(format, v...))
	}
}
func (l *serverLogger) Warnf(format string, v ...any)  { l.log.Warn(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Fatalf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Errorf(format string, v ...any) { l.log.Error(fmt.Sprintf(format, v...)) }
func (l *serverLogger) Debugf(format string, v ...any) {
	if l.debug {
		l.log.Debug(fmt.Sprintf(format, v...))
	}
}
func (l *serverLogger) Tracef(string, ...any) {}
