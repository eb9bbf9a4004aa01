package dispatcher

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
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
	Runner     string `envconfig:"DISPATCHER_RUNNER" default:"tmux" desc:"what hosts agent sessions: tmux (sessions survive restarts; attach to watch) or process (child processes of the dispatcher, for hosts without tmux; they end with it)"`
	TmuxBinary string `envconfig:"TMUX_BINARY" default:"tmux" desc:"tmux binary the dispatcher runs sessions in"`
	// TmuxDir is the one place the sessions' tmux servers are reached
	// through: a dispatcher in another container shares it with them.
	TmuxDir    string `envconfig:"TMUX_DIR" desc:"directory of the sessions' tmux sockets: each session runs on a tmux server of its own whose socket is named after it (tmux -S DIR/loop-github-owner-repo-N attach to watch); made private (0700); never the user's own tmux server; empty: the-loop/tmux under XDG_RUNTIME_DIR, else .the-loop/tmux under the workspace root"`
	TmuxSocket string `envconfig:"TMUX_SOCKET" desc:"deprecated: sessions no longer share one tmux server (LOOP_TMUX_DIR); set while LOOP_TMUX_DIR is empty, the default socket directory ends in tmux-NAME instead of tmux"`
	// Harness, HarnessBinary and HarnessArgs choose the agent harness
	// (docs/decisions/093-harness-settings.md).
	Harness       string `envconfig:"HARNESS" default:"claude" desc:"agent harness sessions run: claude (Claude Code), cursor (cursor-agent), aider, or generic (any CLI: LOOP_HARNESS_BINARY [args…] PROMPT, or the operator config's routing.genericHarness); the operator config's routing.defaultHarness applies when this is not set"`
	HarnessBinary string `envconfig:"HARNESS_BINARY" desc:"agent harness binary; empty: the harness's own (claude, cursor-agent, aider); the generic harness needs it"`
	HarnessArgs   string `envconfig:"HARNESS_ARGS" desc:"extra arguments of the harness, passed as given before the prompt, as a JSON array of strings (e.g. [\"--permission-mode\",\"acceptEdits\"]); set, it replaces the operator config's routing.harnessArgs"`
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
	Spawn               string `envconfig:"DISPATCHER_SPAWN" default:"labeled" desc:"when an event for a work item without a session spawns one: never, labeled (carries the auto-execute label, LOOP_GITHUB_POLL_LABEL) or always"`
	// SessionAddr is where agent sessions reach the loop: sessions run on
	// the dispatcher's host, so loopback.
	SessionAddr string `envconfig:"SESSION_ADDR" default:"127.0.0.1:8790" desc:"listen address of the session endpoint agent sessions ask and complete through (loopback: sessions run on this host); keep the port fixed so sessions that outlive a restart still reach it"`
	// SessionEndpointHost and WorkspaceShared serve sessions in a
	// container of their own (docs/decisions/101-sessions-in-their-own-container.md):
	// they reach the endpoint by the dispatcher's name, and write their
	// workspace as another user of its group.
	SessionEndpointHost string `envconfig:"SESSION_ENDPOINT_HOST" desc:"the host sessions are told to reach the session endpoint at (LOOP_SESSION_URL): empty: LOOP_SESSION_ADDR's host, loopback when it is unspecified; hostname: this replica's hostname, for sessions in another container (docs/deploy.md); else that name"`
	WorkspaceShared     bool   `envconfig:"WORKSPACE_SHARED" desc:"the sessions run as another user of the dispatcher's group (their own container, docs/deploy.md): the dispatcher makes what it creates in their workspace group-writable (umask 0002)"`
	// The session sandbox (docs/agents.md, "Sandbox"): what a session may
	// still read, write and reach.
	SessionSandbox      string `envconfig:"SESSION_SANDBOX" default:"off" desc:"landlock: every agent session runs under 'the-loop sandbox', confined by Landlock to its own workspace, its harness's files, the system's directories and a few TCP ports, never the store, other work items or the bus (docs/agents.md, Sandbox; sessions do not start on a kernel without Landlock ABI 6); off: sessions can read and reach what the dispatcher's user can. 'the-loop up' on Linux defaults to landlock"`
	SessionSandboxPorts string `envconfig:"SESSION_SANDBOX_PORTS" default:"22,80,443" desc:"comma-separated TCP ports a sandboxed session may connect to, on any host, besides its session endpoint's: git over SSH and HTTPS, package registries, the harness's API; add a proxy's. Never the bus's"`
	SessionSandboxWrite string `envconfig:"SESSION_SANDBOX_WRITE" default:"~/.claude,~/.claude.json,~/.config,~/.cache,~/.npm" desc:"comma-separated files and directories a sandboxed session may also read and write, besides its workspace, TMPDIR, its terminal and the usual devices (~ is the sessions' HOME): where its harness and tools keep their state; /dev/pts here lets it make pseudo-terminals, and open the user's other terminals"`
	SessionSandboxRead  string `envconfig:"SESSION_SANDBOX_READ" desc:"comma-separated files and directories a sandboxed session may also read and execute, besides the system's directories, the-loop's and the harness's (~ is the sessions' HOME): a toolchain installed elsewhere, ~/.ssh for git over SSH"`
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
	if strings.ContainsAny(c.TmuxSocket, "/\x00") || c.TmuxSocket == ".." {
		errs = append(errs, fmt.Errorf("LOOP_TMUX_SOCKET is %q: it must be a name, not a path (it is deprecated: set LOOP_TMUX_DIR)", c.TmuxSocket))
	}
	if c.TmuxDir != "" && !filepath.IsAbs(c.TmuxDir) {
		errs = append(errs, fmt.Errorf("LOOP_TMUX_DIR is %q: it must be an absolute path", c.TmuxDir))
	}
	if c.StopMaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("LOOP_STOP_MAX_ATTEMPTS is %d: it must be at least 1", c.StopMaxAttempts))
	}
	if _, err := c.HarnessWith(nil); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateSandbox())
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
		Runner: c.Runner, TmuxBinary: c.TmuxBinary, TmuxDir: c.TmuxDir, TmuxSocket: c.TmuxSocket, Host: c.Host, Workdir: c.Workdir,
		Label: c.Label, SpawnOnUnmatched: c.Spawn, SessionAddr: c.SessionAddr,
		SessionEndpointHost: c.SessionEndpointHost, WorkspaceShared: c.WorkspaceShared,
		Workspace: workspace.Config{Root: c.WorkspaceRoot, Strategy: workspace.Strategy(c.WorkspaceStrategy),
			URLTemplate: c.WorkspaceGitURL, Keep: c.WorkspaceKeep},
		AgentGitCredentials: c.AgentGitCredentials, PluginDir: c.PluginDir, StopMaxAttempts: c.StopMaxAttempts,
		Sandbox: c.SessionSandbox, SandboxWrite: listOf(c.SessionSandboxWrite), SandboxRead: listOf(c.SessionSandboxRead),
	}
	// Validate refuses ports that do not parse.
	s.SandboxPorts, _ = c.sandboxPorts()
	if s.SandboxPorts == nil {
		s.SandboxPorts = []uint16{}
	}
	// Validate refuses a Config whose harness does not build; a zero
	// Settings.Harness takes the default.
	if h, err := c.HarnessWith(nil); err == nil {
		s.Harness = h
	}
	s.HarnessFor = func(file *config.Config) (agent.Harness, error) { return c.HarnessWith(file) }
	return s
}

// validateSandbox checks the session sandbox's settings.
func (c Config) validateSandbox() error {
	var errs []error
	switch c.SessionSandbox {
	case SandboxLandlock, SandboxOff:
	default:
		errs = append(errs, fmt.Errorf("LOOP_SESSION_SANDBOX is %q: it must be landlock or off", c.SessionSandbox))
	}
	if _, err := c.sandboxPorts(); err != nil {
		errs = append(errs, err)
	}
	for name, list := range map[string]string{"LOOP_SESSION_SANDBOX_WRITE": c.SessionSandboxWrite, "LOOP_SESSION_SANDBOX_READ": c.SessionSandboxRead} {
		for _, p := range config.List(list) {
			if p != "~" && !strings.HasPrefix(p, "~/") && !filepath.IsAbs(p) {
				errs = append(errs, fmt.Errorf("%s names %q: a path must be absolute or start with ~/", name, p))
			}
		}
	}
	return errors.Join(errs...)
}

// listOf is a comma-separated list, empty (not nil) when v names nothing:
// a setting set empty is not a setting left unset.
func listOf(v string) []string {
	if l := config.List(v); l != nil {
		return l
	}
	return []string{}
}

// sandboxPorts is LOOP_SESSION_SANDBOX_PORTS as ports.
func (c Config) sandboxPorts() ([]uint16, error) {
	var out []uint16
	for _, p := range config.List(c.SessionSandboxPorts) {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("LOOP_SESSION_SANDBOX_PORTS names %q: it must be TCP ports (1-65535), comma-separated", p)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// HarnessWith is the harness c runs under the operator config in force (nil:
// none), rebuilt on each reload (docs/decisions/093-harness-settings.md):
//
//   - its kind is LOOP_HARNESS, which routing.defaultHarness has filled in at
//     start where the environment left it unset;
//   - its binary is LOOP_HARNESS_BINARY, else the kind's own;
//   - its extra arguments are LOOP_HARNESS_ARGS when set (the environment
//     wins), else routing.harnessArgs for that kind;
//   - a generic harness follows routing.genericHarness's templates when the
//     file has them, else runs `binary [args…] PROMPT`.
//
// The caller adds the-loop's own flags (PluginArgv) with WithExtra.
func (c Config) HarnessWith(file *config.Config) (*agent.Command, error) {
	args, err := c.harnessArgList()
	if err != nil {
		return nil, err
	}
	if args == nil && file != nil {
		args = file.Routing.Harness.ArgsFor(c.Harness)
	}
	if c.Harness == agent.KindGeneric && c.HarnessBinary == "" {
		return nil, errors.New("LOOP_HARNESS is generic: set LOOP_HARNESS_BINARY to the command it runs")
	}
	if g := genericOf(file); c.Harness == agent.KindGeneric && (g.Spawn != nil || g.Resume != nil) {
		spawn := g.Spawn
		if spawn == nil {
			spawn = []string{agent.PlaceholderPrompt}
		}
		h, err := agent.Generic(c.HarnessBinary, spawn, g.Resume, args)
		if err != nil {
			return nil, fmt.Errorf("routing.genericHarness: %w", err)
		}
		return h, nil
	}
	h, err := agent.ByName(c.Harness, c.HarnessBinary, args)
	if err != nil {
		return nil, fmt.Errorf("LOOP_HARNESS: %w", err)
	}
	return h, nil
}

func genericOf(file *config.Config) config.GenericHarness {
	if file == nil {
		return config.GenericHarness{}
	}
	return file.Routing.Harness.Generic
}

// HarnessCommand is the binary the harness runs: LOOP_HARNESS_BINARY, else
// the kind's own.
func (c Config) HarnessCommand() string {
	if h, err := c.HarnessWith(nil); err == nil {
		return h.Command()
	}
	return c.HarnessBinary
}

// harnessArgList is LOOP_HARNESS_ARGS as a list, nil when it is not set. The
// value is never quoted in an error: an argument may hold a secret.
func (c Config) harnessArgList() ([]string, error) {
	if strings.TrimSpace(c.HarnessArgs) == "" {
		return nil, nil
	}
	var args []string
	if err := json.Unmarshal([]byte(c.HarnessArgs), &args); err != nil || args == nil {
		return nil, errors.New(`LOOP_HARNESS_ARGS is not a JSON array of strings, such as ["--permission-mode","acceptEdits"]`)
	}
	return args, nil
}
