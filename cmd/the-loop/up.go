package main

import (
	"context"
	"fmt"
	"io"
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
	if err := os.MkdirAll(s.Up.StoreDir, 0o700); err != nil {
		return fmt.Errorf("store dir: %w", err)
	}
	key, err := envelopeKey(s, s.Up.StoreDir)
	if err != nil {
		return err
	}
	listenHost, port, err := splitListen(s.Up.NATSListen)
	if err != nil {
		return err
	}
	storeDir := filepath.Join(s.Up.StoreDir, "jetstream")
	srv, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StoreDir: storeDir, Host: listenHost, Port: port, Logger: log})
	if err != nil {
		return fmt.Errorf("embedded JetStream: %w", err)
	}
	defer srv.Shutdown()
	fmt.Fprintf(stdout, "the-loop up: NATS on %s (embedded JetStream, store %s)\n", srv.ClientURL(), storeDir)

	conn, err := srv.Connect(ctx, bus.Options{Name: "the-loop-up", Logger: log})
	if err != nil {
		return fmt.Errorf("connect to the embedded server: %w", err)
	}
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
