package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// cmdServe runs one service against LOOP_NATS_URL: what each container runs.
func cmdServe(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	help := fs.Bool("help", false, "list the settings the service reads")
	if len(args) == 0 {
		return fmt.Errorf("%w: serve needs a service: %s", errUsage, quoteList(serviceNames()))
	}
	name := args[0]
	def, ok := lookupService(name)
	if !ok {
		return fmt.Errorf("%w: unknown service %q; services: %s", errUsage, name, quoteList(serviceNames()))
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if *help {
		fmt.Fprintf(stdout, "the-loop serve %s reads these settings from the environment:\n\n", name)
		return config.Usage(stdout, &config.Common{}, &config.GitHub{}, &config.Slack{}, &config.Dispatcher{})
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	if s.Common.NATSURL == "" {
		return fmt.Errorf("LOOP_NATS_URL is not set: 'serve' connects to an external NATS server ('the-loop up' runs an embedded one)")
	}
	var key []byte
	if def.needsKey {
		if key, err = envelopeKey(s, ""); err != nil {
			return err
		}
		if err := s.GitHub.RequireEnvelopeKey(); err != nil {
			return err
		}
	}
	log := newLogger(stderr, s.Common.LogLevel)
	hostname, _ := os.Hostname()
	conn, err := bus.Connect(ctx, bus.Options{URL: s.Common.NATSURL, Name: name + "/" + hostname, Logger: log})
	if err != nil {
		return fmt.Errorf("connect to NATS: %w", err)
	}
	fmt.Fprintf(stdout, "the-loop serve %s: NATS %s\n", name, bus.RedactURL(s.Common.NATSURL))
	h := &host{name: "the-loop serve " + name, settings: s, log: log, conn: conn, stdout: stdout, defs: []serviceDef{def}, envelopeKey: key, serve: true}
	runErr := h.run(ctx)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := conn.Drain(dctx); err != nil {
		log.Warn("drain NATS connection", "err", err)
	}
	return runErr
}
