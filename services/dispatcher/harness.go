package dispatcher

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/the-loop/bus/agent/plugin"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
)

// What a session's harness is given besides its prompt (docs/agents.md):
// the kind and arguments of the operator config in force, the loop's
// plugin (its commands, skill and hooks) loaded for the session alone, and
// — for Claude Code — its first-run questions answered for the session's
// checkout, so that a session nobody watches starts working.

// harness is the harness a session starts with now: routing.defaultHarness
// and routing.harnessArgs of the config in force (the environment's
// LOOP_HARNESS and LOOP_HARNESS_ARGS winning), with the loop's plugin
// flag. A config whose harness does not build keeps the one the process
// started with, and says so.
func (s *Service) harness() agent.Harness {
	h := s.set.Harness
	cfg := s.deps.Config()
	if s.set.HarnessFor != nil {
		built, err := s.set.HarnessFor(cfg)
		if err != nil {
			s.deps.Log.Warn("dispatcher: the configured harness does not build; sessions start with the one the dispatcher started with",
				"harness", h.Name(), "err", err)
		} else {
			h = built
		}
	}
	if dir := s.plugin.Load(); dir != nil && *dir != "" && pluginsEnabled(cfg) {
		if c, ok := h.(*agent.Command); ok {
			h = c.WithExtra(c.PluginArgv(*dir)...)
		}
	}
	return h
}

// installPlugin writes the loop's plugin where sessions load it from
// (Settings.PluginDir). An image may ship it there already, read-only: an
// identical tree is left as it is. A plugin that cannot be installed is
// logged, and sessions start without it.
func (s *Service) installPlugin() {
	dir := s.set.PluginDir
	if err := plugin.Install(dir); err != nil {
		s.deps.Log.Error("dispatcher: the loop's plugin could not be installed; sessions start without its commands and hooks",
			"dir", dir, "err", err)
		return
	}
	s.plugin.Store(&dir)
	s.deps.Log.Info("dispatcher: the loop's plugin is installed for sessions", "dir", dir, "version", plugin.Version())
}

func pluginsEnabled(cfg *config.Config) bool {
	return cfg == nil || cfg.Routing.Harness.Plugins.Enabled
}

// prepareHarness answers the harness's first-run questions for a session
// that works in cwd (routing.harnessTrust). Best effort: a harness that
// stops on its question is seen in its pane, and the failure is logged.
func (s *Service) prepareHarness(ctx context.Context, in *input, h agent.Harness, cwd string) {
	cfg := s.deps.Config()
	if h.Name() != agent.KindClaude || cfg == nil || !cfg.Routing.Harness.Trust.Enabled {
		return
	}
	t := cfg.Routing.Harness.Trust
	opts := agent.TrustOptions{AcceptBypass: agent.BypassWanted(string(t.AcceptBypassPermissions), argsOf(h))}
	if t.Scope == config.TrustWorkspaceRoot {
		if root, err := filepath.Abs(s.set.Workspace.Root); err == nil {
			opts.Root = root
		}
	}
	home := s.set.SessionEnv["HOME"]
	changed, err := agent.TrustClaude(home, s.set.SessionEnv["CLAUDE_CONFIG_DIR"], []string{cwd}, opts)
	if err != nil {
		s.deps.Log.Warn("dispatcher: the harness's first-run questions were not answered; the session may wait on its trust dialog",
			"work_item", in.ref, "harness", h.Name(), "err", err)
		return
	}
	if changed {
		s.deps.Events.Emit(ctx, "session.workspace_trusted", slog.String("work_item", in.ref), slog.String("harness", h.Name()),
			slog.Bool("bypass_accepted", opts.AcceptBypass))
	}
}

// argsOf is the arguments a harness adds to every argv (the operator's).
func argsOf(h agent.Harness) []string {
	if c, ok := h.(*agent.Command); ok {
		return c.Extra
	}
	return nil
}
