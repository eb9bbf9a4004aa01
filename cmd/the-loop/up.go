package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// cmdUp runs all five services in one process on an embedded JetStream server
// whose store lives under LOOP_STORE_DIR. Ctrl-C drains every consumer, stops
// the server and exits 0.
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
	log := newLogger(stderr, s.Common.LogLevel)
	if s.Common.NATSURL != "" {
		return fmt.Errorf("%w: LOOP_NATS_URL is set; 'up' runs its own embedded server — use 'the-loop serve <service>' against an external one", errUsage)
	}
	srv, conn, key, err := startEmbedded(ctx, s, log, "the-loop-up")
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	fmt.Fprintf(stdout, "the-loop up: NATS on %s (embedded JetStream, store %s)\n", srv.ClientURL(), filepath.Join(s.Up.StoreDir, "jetstream"))

	h := &host{name: "the-loop up", settings: s, log: log, conn: conn, stdout: stdout, defs: services, envelopeKey: key}
	runErr := h.run(ctx)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := conn.Drain(dctx); err != nil {
		log.Warn("drain NATS connection", "err", err)
	}
	if runErr != nil {
		return runErr
	}
	fmt.Fprintln(stdout, "the-loop up: drained and stopped")
	return nil
}

// startEmbedded starts the embedded JetStream server of `up` (and `demo`)
// with its store under LOOP_STORE_DIR, and connects to it. key is the
// envelope key: LOOP_ENVELOPE_KEY or the one kept in the store.
func startEmbedded(ctx context.Context, s settings, log *slog.Logger, name string) (*bus.Embedded, *bus.Conn, []byte, error) {
	if err := os.MkdirAll(s.Up.StoreDir, 0o700); err != nil {
		return nil, nil, nil, fmt.Errorf("store dir: %w", err)
	}
	key, err := envelopeKey(s, s.Up.StoreDir)
	if err != nil {
		return nil, nil, nil, err
	}
	listenHost, port, err := splitListen(s.Up.NATSListen)
	if err != nil {
		return nil, nil, nil, err
	}
	storeDir := filepath.Join(s.Up.StoreDir, "jetstream")
	srv, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StoreDir: storeDir, Host: listenHost, Port: port, Logger: log})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("embedded JetStream: %w", err)
	}
	conn, err := srv.Connect(ctx, bus.Options{Name: name, Logger: log})
	if err != nil {
		srv.Shutdown()
		return nil, nil, nil, fmt.Errorf("connect to the embedded server: %w", err)
	}
	return srv, conn, key, nil
}
