package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher"
)

// cmdServe runs one service against LOOP_NATS_URL: what each container runs.
func cmdServe(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("serve", stderr)
	if len(args) > 0 && isHelpFlag(args[0]) {
		// `serve --help`: the verb's help, the services' settings are
		// each one's own.
		fs.Usage = func() {
			writeHelp(fs.Output(), fs)
			fmt.Fprintln(fs.Output(), "\n'the-loop serve <service> --help' lists the settings that service reads.")
		}
		return parseFlags(fs, args)
	}
	if len(args) == 0 {
		return fmt.Errorf("%w: serve needs a service: %s", errUsage, quoteList(serviceNames()))
	}
	name := args[0]
	def, ok := lookupService(name)
	if !ok {
		return fmt.Errorf("%w: unknown service %q; services: %s", errUsage, name, quoteList(serviceNames()))
	}
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "Usage: the-loop serve %s\n\nIt reads these settings from the environment:\n\n", name)
		if err := config.Usage(w, &config.Common{}, def.config(&settings{})); err != nil {
			fmt.Fprintf(w, "the-loop: %v\n", err)
		}
	}
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: serve %s takes no arguments (unexpected %q)", errUsage, name, fs.Arg(0))
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	if s.Common.NATSURL == "" {
		return fmt.Errorf("LOOP_NATS_URL is not set: 'serve' connects to an external NATS server ('the-loop up' runs an embedded one)")
	}
	if err := requireSettings(def, &s); err != nil {
		return err
	}
	var key []byte
	if def.needsKey {
		if key, err = envelopeKey(s, ""); err != nil {
			return err
		}
	}
	if name == dispatcher.Name {
		if err := checkSessionWorkdir(s, ""); err != nil {
			return err
		}
	}
	creds := natsCredentials(s.Common.NATS)
	if err := creds.Validate(); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	log := newLogger(stderr, s.Common.LogLevel, s.Common.LogFormat)
	hostname, _ := os.Hostname()
	fmt.Fprintf(stdout, "the-loop serve %s: NATS %s (credential: %s)\n", name, bus.RedactURL(s.Common.NATSURL), creds.Kind())
	var operator func(ctx context.Context) (*bus.Conn, error)
	if f := s.Common.Status.AdminNkeyFile; f != "" {
		operator = func(ctx context.Context) (*bus.Conn, error) {
			return bus.Connect(ctx, bus.Options{URL: s.Common.NATSURL, Name: "status/" + hostname, Logger: log, Identity: bus.IdentityOperator,
				Credentials: bus.Credentials{SeedFile: f, Setting: "LOOP_ADMIN_NKEY_FILE"}})
		}
	}
	var observer func(ctx context.Context) (*bus.Conn, error)
	if f := s.Common.Status.ObserverNkeyFile; f != "" {
		observer = func(ctx context.Context) (*bus.Conn, error) {
			return bus.Connect(ctx, bus.Options{URL: s.Common.NATSURL, Name: "status-reads/" + hostname, Logger: log, Identity: bus.IdentityObserver,
				Credentials: bus.Credentials{SeedFile: f, Setting: "LOOP_STATUS_NKEY_FILE"}})
		}
	}
	h := &host{name: "the-loop serve " + name, settings: s, log: log, stdout: stdout, defs: []serviceDef{def}, envelopeKey: config.NewSecret(string(key)), serve: true,
		operator: operator, observer: observer,
		connect: func(ctx context.Context, identity string) (*bus.Conn, error) {
			return bus.Connect(ctx, bus.Options{URL: s.Common.NATSURL, Name: identity + "/" + hostname, Logger: log, Credentials: creds, Identity: identity})
		}}
	return h.run(ctx)
}

// requireSettings fails, in one line naming the service and each missing
// setting, unless what def cannot work without is set, judged by the
// operator config at LOOP_CONFIG: a container without its token exits at
// start (compose restarts it, Kubernetes shows CrashLoopBackOff with this
// line) rather than running unready (docs/deploy.md).
func requireSettings(def serviceDef, s *settings) error {
	if def.required == nil {
		return nil
	}
	op := config.Default()
	if path := s.Common.ConfigPath; path != "" {
		cfg, _, err := config.LoadFile(path)
		if err != nil {
			return fmt.Errorf("%s: operator config (LOOP_CONFIG): %w", def.name, err)
		}
		op = cfg
	}
	err := def.required(s, op)
	if err == nil {
		return nil
	}
	var missing []string
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			missing = append(missing, e.Error())
		}
	} else {
		missing = []string{err.Error()}
	}
	return fmt.Errorf("%s cannot start: %s", def.name, strings.Join(missing, "; "))
}
