package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/the-loop/bus/internal/demo"
	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/services/dispatcher"
)

// cmdDemo plays the-loop's story on this machine with no credentials: the
// five services of `up`, on an embedded JetStream server, against built-in
// GitHub and Slack stand-ins (package demo). `demo agent` is the stand-in
// agent harness the demo's dispatcher runs.
func cmdDemo(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "agent" {
		return cmdDemoAgent(args[1:], stdout, stderr)
	}
	fs := newFlags("demo", stderr)
	keep := fs.Bool("keep-running", false, "leave the services and stand-ins up after the story, until Ctrl-C")
	dir := fs.String("dir", "", "directory for the demo's store, workspace and logs (default: a temporary one, removed at the end)")
	runner := fs.String("runner", "", "session runner: tmux or process (default: tmux when installed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: demo [--keep-running] [--dir DIR] [--runner tmux|process]", errUsage)
	}
	switch *runner {
	case "", demo.RunnerTmux, demo.RunnerProcess:
	default:
		return fmt.Errorf("%w: --runner %q: want tmux or process", errUsage, *runner)
	}
	return runDemo(ctx, demoRun{dir: *dir, runner: *runner, keep: *keep}, env, stdout)
}

// demoRun is one demo: its flags.
type demoRun struct {
	dir, runner string
	keep        bool
}

func runDemo(ctx context.Context, o demoRun, env config.Env, stdout io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("demo: find the-loop's binary: %w", err)
	}
	removeDir, err := o.ensureDir()
	if err != nil {
		return err
	}
	defer removeDir()
	start := time.Now()
	stage, err := demo.NewStage(demo.Options{Dir: o.dir, Exe: exe, Runner: o.runner})
	if err != nil {
		return err
	}
	defer stage.Close()
	s, err := demoSettings(stage, env)
	if err != nil {
		return err
	}
	// The services' own logs go to a file: the transcript is the demo's
	// output.
	logPath := filepath.Join(o.dir, "services.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer logFile.Close()
	log := newLogger(logFile, s.Common.LogLevel)
	emb, err := startEmbedded(ctx, s, s.Up.StoreDir, log)
	if err != nil {
		return err
	}
	defer emb.srv.Shutdown()
	// The demo plays the people and the GitHub and Slack stand-ins: it
	// reads and writes as the operator.
	conn, err := emb.connect(ctx, bus.IdentityOperator)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if err := emb.provision(ctx, s); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	var adminAddr string
	run := startDemoHost(ctx, s, log, emb, &adminAddr)
	shutdown := func() error {
		stage.StopDeliveries()
		err := run.stop()
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if derr := conn.Drain(dctx); derr != nil {
			log.Warn("drain NATS connection", "err", derr)
		}
		return err
	}
	fmt.Fprintf(stdout, "the-loop demo: five services on an embedded JetStream server (%s), GitHub and Slack stand-ins, a stand-in agent (%s runner)\n",
		emb.srv.ClientURL(), stage.Runner())
	if err := awaitServices(ctx, run.ready, run.done); err != nil {
		_ = shutdown()
		return err
	}
	sum, playErr := stage.Play(ctx, conn, stdout)
	if playErr != nil {
		_ = shutdown()
		return fmt.Errorf("demo: %w (service logs: %s)", playErr, logPath)
	}
	fmt.Fprintf(stdout, "\nAll seven steps in %.1fs; %d prompts reached the session.\n", time.Since(start).Seconds(), sum.Prompts)
	if o.keep {
		printKeepRunning(stdout, stage, emb.srv, o.dir, logPath, adminAddr)
		<-ctx.Done()
	} else {
		printWhereNext(stdout)
	}
	return shutdown()
}

// ensureDir makes the demo's directory when none was given: a temporary one,
// which the returned function removes unless the demo keeps running.
func (o *demoRun) ensureDir() (func(), error) {
	if o.dir != "" {
		return func() {}, nil
	}
	tmp, err := os.MkdirTemp("", "the-loop-demo-")
	if err != nil {
		return nil, fmt.Errorf("demo: %w", err)
	}
	o.dir = tmp
	if o.keep {
		return func() {}, nil
	}
	return func() { os.RemoveAll(tmp) }, nil
}

// demoSettings are the settings of the stage's environment.
func demoSettings(stage *demo.Stage, env config.Env) (settings, error) {
	s, err := loadSettings(config.Env(stage.Env()))
	if err != nil {
		return s, fmt.Errorf("demo settings: %w", err)
	}
	// The stand-in agent runs with this shell's allow-listed environment
	// (PATH, HOME…), as a real session would with the operator's.
	s.sessionEnv = dispatcher.SessionBaseEnv(env, nil)
	return s, nil
}

// demoHost is the five services of `up`, running for the demo.
type demoHost struct {
	// ready hears the readiness once every service was started; done, how
	// the host ended.
	ready chan *httpserver.Readiness
	done  chan error
	stop  func() error
}

// startDemoHost runs the five services on emb in the background, and sets
// *adminAddr to the admin address once it listens.
func startDemoHost(ctx context.Context, s settings, log *slog.Logger, emb *embedded, adminAddr *string) demoHost {
	d := demoHost{ready: make(chan *httpserver.Readiness, 1), done: make(chan error, 1)}
	h := &host{name: "the-loop demo", settings: s, log: log, stdout: io.Discard, defs: services,
		envelopeKey: config.NewSecret(string(emb.key)), connect: emb.connect, started: func(r *httpserver.Readiness) { d.ready <- r },
		operator: func(ctx context.Context) (*bus.Conn, error) { return emb.connect(ctx, bus.IdentityOperator) },
		observer: func(ctx context.Context) (*bus.Conn, error) { return emb.connect(ctx, bus.IdentityObserver) },
		adminAt:  func(addr string) { *adminAddr = addr }}
	hctx, stopServices := context.WithCancel(ctx)
	go func() { d.done <- h.run(hctx) }()
	d.stop = func() error {
		stopServices()
		return <-d.done
	}
	return d
}

// printWhereNext is the end of a demo that does not keep running.
func printWhereNext(w io.Writer) {
	fmt.Fprintf(w, "\nWhere to look next: run it with --keep-running, then\n")
	fmt.Fprintf(w, "  LOOP_NATS_URL=<its NATS URL> LOOP_NATS_NKEY_FILE=<its dir>/store/nats/observer.nk the-loop events --follow --last 50\n")
	fmt.Fprintf(w, "                                       every record that crossed the bus\n")
	fmt.Fprintf(w, "  LOOP_CONFIG=<its dir>/the-loop.yaml the-loop channels status     the Slack channel's grants\n")
	fmt.Fprintf(w, "and for the real thing, README.md \"Your first hour\".\n")
}

// awaitServices waits until every service reports ready.
func awaitServices(ctx context.Context, readyc <-chan *httpserver.Readiness, hostDone <-chan error) error {
	var ready *httpserver.Readiness
	deadline := time.After(60 * time.Second)
	select {
	case ready = <-readyc:
	case err := <-hostDone:
		return fmt.Errorf("demo: the services stopped: %w", err)
	case <-deadline:
		return errors.New("demo: the services did not start")
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		problems := ready.Check()
		if len(problems) == 0 {
			return nil
		}
		select {
		case err := <-hostDone:
			return fmt.Errorf("demo: the services stopped: %w", err)
		case <-deadline:
			return fmt.Errorf("demo: services not ready: %v", problems)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(25 * time.Millisecond):
		}
	}
}

func printKeepRunning(w io.Writer, stage *demo.Stage, srv *bus.Embedded, dir, logPath, adminAddr string) {
	fmt.Fprintf(w, "\nStill running; Ctrl-C stops. Look around:\n")
	fmt.Fprintf(w, "  http://%s/status   the status page: the work item, its gates and approvals, sessions, the bus\n", adminAddr)
	fmt.Fprintf(w, "  LOOP_NATS_URL=%s LOOP_NATS_NKEY_FILE=%s the-loop events --follow --last 50\n", srv.ClientURL(),
		filepath.Join(dir, "store", identitiesDir, bus.IdentityObserver+".nk"))
	fmt.Fprintf(w, "  LOOP_CONFIG=%s the-loop channels status\n", filepath.Join(dir, "the-loop.yaml"))
	fmt.Fprintf(w, "  curl -H 'Authorization: Bearer %s' %srepos/%s/issues/1/comments   the stand-in GitHub\n", demo.GitHubToken, stage.GitHub.URL(), demo.Repo)
	fmt.Fprintf(w, "  curl -d token=%s -d channel=%s %sconversations.history   the stand-in Slack\n", demo.SlackToken, demo.Channel, stage.Slack.URL())
	fmt.Fprintf(w, "  webhook: POST %s, signed (X-Hub-Signature-256) with this run's throwaway secret %s\n", stage.WebhookURL(), stage.WebhookSecret())
	if stage.Runner() == demo.RunnerTmux {
		for _, sock := range stage.TmuxSockets() {
			fmt.Fprintf(w, "  tmux -S %s attach   the session (the stand-in agent echoes what it is told)\n", sock)
		}
	}
	fmt.Fprintf(w, "  files: %s; service logs: %s\n", dir, logPath)
}

// cmdDemoAgent is the stand-in agent harness: `the-loop demo agent --dir D
// <Claude Code's argv>`. It records its boot prompt and everything typed into
// it in D, and echoes each to its terminal.
func cmdDemoAgent(args []string, stdout, stderr io.Writer) error {
	// Not a FlagSet: everything after --dir D is the harness's argv, which
	// the stand-in reads as Claude Code's.
	if len(args) < 2 || args[0] != "--dir" || args[1] == "" {
		return fmt.Errorf("%w: demo agent --dir DIR [--session-id ID|--resume ID] PROMPT", errUsage)
	}
	return standin.Run(args[1], args[2:], os.Stdin, stdout)
}
