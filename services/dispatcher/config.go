package dispatcher

import (
	"errors"
	"fmt"
	"strings"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
)

// Config is the dispatcher's settings, read from the environment by its
// host: where agent sessions run and how they reach the loop. The tags are
// the one place their names, defaults and descriptions are declared; New
// turns them into Settings.
type Config struct {
	// AutoExecute is the label the labeled spawn policy looks for, shared
	// with ingress-github.
	config.AutoExecute
	Runner        string `envconfig:"DISPATCHER_RUNNER" default:"tmux" desc:"what hosts agent sessions: tmux (sessions survive restarts; attach to watch) or process (child processes of the dispatcher, for hosts without tmux; they end with it)"`
	TmuxBinary    string `envconfig:"TMUX_BINARY" default:"tmux" desc:"tmux binary the dispatcher runs sessions in"`
	TmuxSocket    string `envconfig:"TMUX_SOCKET" desc:"private tmux server name (tmux -L); empty: the user's default server"`
	HarnessBinary string `envconfig:"HARNESS_BINARY" default:"claude" desc:"agent harness binary (Claude Code: spawned with --session-id, resumed with --resume)"`
	Host          string `envconfig:"DISPATCHER_HOST" desc:"this dispatcher replica's name in the session registry; empty: the hostname (use the pod name on Kubernetes)"`
	Workdir       string `envconfig:"DISPATCHER_WORKDIR" default:"." desc:"working directory of agent sessions"`
	Spawn         string `envconfig:"DISPATCHER_SPAWN" default:"labeled" desc:"when an event for a work item without a session spawns one: never, labeled (carries the auto-execute label, LOOP_GITHUB_POLL_LABEL) or always"`
	// SessionAddr is where agent sessions reach the loop: sessions run on
	// the dispatcher's host, so loopback.
	SessionAddr string `envconfig:"SESSION_ADDR" default:"127.0.0.1:8790" desc:"listen address of the session endpoint agent sessions ask and complete through (loopback: sessions run on this host); keep the port fixed so sessions that outlive a restart still reach it"`
	// SessionEnv names variables of the dispatcher's environment an agent
	// session also gets, besides the allow-list (PATH, HOME, TERM, locale…).
	SessionEnv string `envconfig:"SESSION_ENV" desc:"comma-separated names of further variables agent sessions inherit (the harness's own settings, e.g. ANTHROPIC_API_KEY); LOOP_* never"`
}

// DefaultConfig is the settings of an empty environment.
func DefaultConfig() Config { return config.DefaultsOf[Config]() }

// SessionEnvNames is LOOP_SESSION_ENV as a list.
func (c Config) SessionEnvNames() []string { return config.List(c.SessionEnv) }

// Validate checks the values the environment reader cannot check by type.
func (c Config) Validate() error {
	var errs []error
	switch c.Spawn {
	case SpawnNever, SpawnLabeled, SpawnAlways:
	default:
		errs = append(errs, fmt.Errorf("LOOP_DISPATCHER_SPAWN is %q: it must be never, labeled or always", c.Spawn))
	}
	switch c.Runner {
	case RunnerTmux, RunnerProcess:
	default:
		errs = append(errs, fmt.Errorf("LOOP_DISPATCHER_RUNNER is %q: it must be tmux or process", c.Runner))
	}
	errs = append(errs, config.CheckAddr("LOOP_SESSION_ADDR", c.SessionAddr))
	for _, n := range c.SessionEnvNames() {
		if strings.HasPrefix(n, config.Prefix+"_") {
			errs = append(errs, fmt.Errorf("LOOP_SESSION_ENV names %s: the-loop's own settings never reach an agent session", n))
		}
	}
	return errors.Join(errs...)
}

// settings are the Settings c sets; the rest take their defaults.
func (c Config) settings() Settings {
	s := Settings{
		Runner: c.Runner, TmuxBinary: c.TmuxBinary, TmuxSocket: c.TmuxSocket, Host: c.Host, Workdir: c.Workdir,
		Label: c.Label, SpawnOnUnmatched: c.Spawn, SessionAddr: c.SessionAddr,
	}
	if c.HarnessBinary != "" {
		s.Harness = agent.Claude().WithBinary(c.HarnessBinary)
	}
	return s
}
