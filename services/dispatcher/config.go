package dispatcher

import (
	"errors"
	"fmt"
	"strings"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
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
	Workdir       string `envconfig:"DISPATCHER_WORKDIR" default:"." desc:"the workspace root when LOOP_WORKSPACE_ROOT is empty (kept for routing.spawnWorkdir)"`
	// The work items' workspaces (docs/agents.md): each work item's
	// session works in a checkout of its own.
	WorkspaceRoot     string `envconfig:"WORKSPACE_ROOT" desc:"where each work item gets its own workspace (a checkout of every repository it touches) and the shared mirrors live; empty: LOOP_DISPATCHER_WORKDIR (the-loop up: the-loop/workspaces under XDG_DATA_HOME)"`
	WorkspaceStrategy string `envconfig:"WORKSPACE_STRATEGY" default:"worktree" desc:"worktree (a git worktree of a shared mirror per work item), clone (a full clone per work item) or dir (an empty directory per work item, no git)"`
	WorkspaceGitURL   string `envconfig:"WORKSPACE_GIT_URL" default:"https://{host}/{owner}/{repo}.git" desc:"a repository's upstream, {host}, {owner} and {repo} replaced; never with credentials in it"`
	WorkspaceKeep     bool   `envconfig:"WORKSPACE_KEEP" desc:"keep a work item's checkouts when its session is cleaned up or its work item closes (routing.workspace.keepCheckoutOnClose)"`
	// AgentGitCredentials are the credentials agents push with: the
	// operator's grant to agents, never the ledger's token.
	AgentGitCredentials string `envconfig:"AGENT_GIT_CREDENTIALS" desc:"a git credential-store file (lines like https://USER:TOKEN@github.com) with the credentials agents fetch and push with; the ledger's token never goes there"`
	PluginDir           string `envconfig:"HARNESS_PLUGIN_DIR" desc:"where the loop's harness plugin is installed for sessions; empty: .the-loop/plugin under the workspace root"`
	StopMaxAttempts     int    `envconfig:"STOP_MAX_ATTEMPTS" default:"3" desc:"how many times in a row the Stop hook keeps an agent working on an incomplete node before it lets the turn end"`
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
	switch workspace.Strategy(c.WorkspaceStrategy) {
	case workspace.Worktree, workspace.Clone, workspace.Dir:
	default:
		errs = append(errs, fmt.Errorf("LOOP_WORKSPACE_STRATEGY is %q: it must be worktree, clone or dir", c.WorkspaceStrategy))
	}
	if c.StopMaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("LOOP_STOP_MAX_ATTEMPTS is %d: it must be at least 1", c.StopMaxAttempts))
	}
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
		Workspace: workspace.Config{Root: c.WorkspaceRoot, Strategy: workspace.Strategy(c.WorkspaceStrategy),
			URLTemplate: c.WorkspaceGitURL, Keep: c.WorkspaceKeep},
		AgentGitCredentials: c.AgentGitCredentials, PluginDir: c.PluginDir, StopMaxAttempts: c.StopMaxAttempts,
	}
	if c.HarnessBinary != "" {
		s.Harness = agent.Claude().WithBinary(c.HarnessBinary)
	}
	return s
}
