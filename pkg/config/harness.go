package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file holds the routing keys that say how agent sessions run: the
// harness and its arguments, what the-loop prepares in the harness's own
// configuration, the prompt templates, the interaction mode, the
// per-work-item workspace and the sessions of pull requests. They were the
// original's keys; here they are part of the 0.7.0 model, which the
// dispatcher reads from the config in force
// (docs/decisions/093-harness-settings.md).

// Harness is how sessions run the agent harness: routing.defaultHarness,
// routing.harnessArgs, routing.genericHarness, routing.harnessTrust and
// routing.harnessPlugins.
type Harness struct {
	// Default is the harness kind sessions run (routing.defaultHarness).
	// It is also the process setting LOOP_HARNESS, applied at start where
	// the environment does not set it (ApplySettings).
	Default string
	// Args are the operator's extra arguments per harness kind
	// (routing.harnessArgs), passed as given before the prompt: the-loop
	// never widens them. A kind not named has none; LOOP_HARNESS_ARGS,
	// when set, replaces them for the harness the dispatcher runs.
	Args map[string][]string
	// Generic describes the generic harness (routing.genericHarness).
	Generic GenericHarness
	Trust   HarnessTrust
	Plugins HarnessPlugins
}

// ArgsFor is the extra arguments of harness kind (nil: none).
func (h Harness) ArgsFor(kind string) []string { return h.Args[kind] }

// Harness kinds (routing.defaultHarness, LOOP_HARNESS). The dispatcher's
// adapters implement each; a test keeps the two lists equal.
const (
	HarnessClaude  = "claude"
	HarnessCursor  = "cursor"
	HarnessAider   = "aider"
	HarnessGeneric = "generic"
)

// HarnessKinds are the harness kinds, in the order they are documented.
func HarnessKinds() []string {
	return []string{HarnessClaude, HarnessCursor, HarnessAider, HarnessGeneric}
}

// Placeholders of routing.genericHarness's templates.
const (
	PlaceholderPrompt    = "{prompt}"
	PlaceholderSessionID = "{session_id}"
)

// GenericHarness is routing.genericHarness: any agent CLI, described by
// argument templates in which {prompt} and {session_id} are replaced. Its
// binary is the process setting LOOP_HARNESS_BINARY.
type GenericHarness struct {
	// Spawn is the argv of a new session; nil: `command <args…> {prompt}`.
	Spawn []string
	// Resume is the argv that reopens a conversation; nil: no resume.
	Resume []string
}

// HarnessTrust is routing.harnessTrust: the first-run questions of Claude
// Code that the dispatcher answers in its configuration before a spawn.
type HarnessTrust struct {
	// Enabled: when false the harness's configuration is never touched.
	Enabled bool
	Scope   TrustScope
	// AcceptBypassPermissions says when the bypass-permissions disclaimer
	// is recorded as accepted.
	AcceptBypassPermissions BypassAcceptance
}

// TrustScope is routing.harnessTrust.scope.
type TrustScope string

// Trust scopes. The spawn directory is trusted under both; workspace-root
// also trusts routing.workspace.root, so that every checkout under it is.
const (
	TrustWorkspaceRoot TrustScope = "workspace-root"
	TrustDirectory     TrustScope = "directory"
)

// BypassAcceptance is routing.harnessTrust.acceptBypassPermissions.
type BypassAcceptance string

// Bypass acceptance: auto records it only when the harness's own arguments
// ask for bypass mode, so the-loop never widens what the operator asked for.
const (
	BypassAuto   BypassAcceptance = "auto"
	BypassAlways BypassAcceptance = "always"
	BypassNever  BypassAcceptance = "never"
)

// HarnessPlugins is routing.harnessPlugins.
type HarnessPlugins struct {
	// Enabled: sessions load the plugin shipped with the-loop (its skill,
	// commands and hooks) for themselves alone, with the harness's plugin
	// flag; nothing is written in the harness's configuration.
	Enabled bool
	// MarketplaceRepo is the key as read. The original registered a
	// marketplace from it; the-loop loads its own plugin instead, so any
	// value but OriginalMarketplace and "" is warned about.
	MarketplaceRepo string
}

// OriginalMarketplace is the original's default
// routing.harnessPlugins.marketplaceRepo.
const OriginalMarketplace = "MadaraUchiha-314/the-loop"

// Prompts are the operator's prompt templates (routing.promptTemplate,
// routing.spawnPromptTemplate): absolute paths, "" for the built-in text.
type Prompts struct {
	// Event is the template of a prompt typed into a running session,
	// Spawn the boot prompt's.
	Event, Spawn string
}

// InteractionMode is routing.interaction.mode: where a session takes its
// answers from.
type InteractionMode string

// Interaction modes. An unknown one is work-item, never cli: a tmux session
// is attachable, not attended.
const (
	InteractionWorkItem InteractionMode = "work-item"
	InteractionCLI      InteractionMode = "cli"
)

// Workspace is routing.workspace: per-work-item checkouts sessions run in.
type Workspace struct {
	// Root is where each work item's workspace is made (the process
	// setting LOOP_WORKSPACE_ROOT); "": LOOP_DISPATCHER_WORKDIR. A relative path is read from the config
	// file's directory; a leading ~/ is the dispatcher's home directory.
	Root     string
	Strategy WorkspaceStrategy
	// CloneProtocol is https or ssh.
	CloneProtocol string
	// DefaultHost is the host of a repository whose event names none.
	DefaultHost string
	// KeepCheckoutOnClose keeps a work item's checkout after it closes.
	KeepCheckoutOnClose bool
	// GitBinary is the git the checkouts are made with.
	GitBinary string
}

// WorkspaceStrategy is routing.workspace.strategy.
type WorkspaceStrategy string

// Workspace strategies.
const (
	// WorkspaceWorktree: one shared clone per repository, one git worktree
	// per work item.
	WorkspaceWorktree WorkspaceStrategy = "worktree"
	// WorkspaceClone: a full clone per work item.
	WorkspaceClone WorkspaceStrategy = "clone"
	// WorkspaceDir: an empty directory per work item, nothing checked out
	// (the session checks out what it needs).
	WorkspaceDir WorkspaceStrategy = "dir"
)

// PRSessions is routing.tmux.sessionPerPr: which pull requests of a work item
// get a session of their own.
type PRSessions string

// PR session modes; the original's booleans read true as cross-repository
// and false as never.
const (
	PRSessionsNever           PRSessions = "never"
	PRSessionsCrossRepository PRSessions = "cross-repository"
	PRSessionsAlways          PRSessions = "always"
)

// defaultHarness is Default's Harness.
func defaultHarness() Harness {
	return Harness{
		Default: HarnessClaude,
		Trust:   HarnessTrust{Enabled: true, Scope: TrustWorkspaceRoot, AcceptBypassPermissions: BypassAuto},
		Plugins: HarnessPlugins{Enabled: true},
	}
}

func defaultWorkspace() Workspace {
	return Workspace{Strategy: WorkspaceWorktree, CloneProtocol: "https", DefaultHost: "github.com", GitBinary: "git"}
}

// routingSessionFields adds the keys of this file to routing's fields.
func (p *parser) routingSessionFields(fields map[string]field) {
	r := &p.cfg.Routing
	fields["defaultHarness"] = p.defaultHarness
	fields["harnessArgs"] = p.harnessArgs
	fields["genericHarness"] = p.genericHarness
	fields["harnessTrust"] = func(v *yaml.Node, path string) {
		t := &r.Harness.Trust
		p.mapping(v, path, map[string]field{
			"enabled": p.boolean(&t.Enabled),
			// An unknown value takes the narrower choice, not the default.
			"scope": enumField(p, &t.Scope, TrustDirectory, TrustWorkspaceRoot, TrustDirectory),
			"acceptBypassPermissions": enumField(p, &t.AcceptBypassPermissions, BypassNever,
				BypassAuto, BypassAlways, BypassNever),
		})
	}
	fields["harnessPlugins"] = func(v *yaml.Node, path string) {
		pl := &r.Harness.Plugins
		p.mapping(v, path, map[string]field{
			"enabled": p.boolean(&pl.Enabled),
			"marketplaceRepo": func(v *yaml.Node, path string) {
				p.str(&pl.MarketplaceRepo)(v, path)
				if s := strings.TrimSpace(pl.MarketplaceRepo); s != "" && s != OriginalMarketplace {
					p.warn(v, path, "no marketplace is registered: sessions load the plugin shipped with the-loop for themselves (the harness's plugin flag), not %s's (docs/decisions/095-the-plugin-loaded-per-session.md)", clip(s))
				}
			},
		})
	}
	fields["promptTemplate"] = p.template(&r.Prompts.Event)
	fields["spawnPromptTemplate"] = p.template(&r.Prompts.Spawn)
	fields["interaction"] = func(v *yaml.Node, path string) {
		p.mapping(v, path, map[string]field{
			// Never cli by mistake: nobody may be at the terminal.
			"mode": enumField(p, &r.Interaction, InteractionWorkItem, InteractionWorkItem, InteractionCLI),
		})
	}
	fields["workspace"] = p.workspace
	fields["critics"] = p.critics
	// routing.tmux is the original's section: its other keys are read as
	// originalKeys says.
	fields["tmux"] = func(v *yaml.Node, path string) {
		tmux := map[string]field{"sessionPerPr": p.sessionPerPR}
		p.originalFields("routing.tmux", tmux)
		p.mapping(v, path, tmux)
	}
}

// enumField reads one of values into dst; anything else is warned about and
// read as fallback.
func enumField[T ~string](p *parser, dst *T, fallback T, values ...T) field {
	return func(v *yaml.Node, path string) {
		if v.Kind == yaml.ScalarNode && slices.Contains(values, T(v.Value)) {
			*dst = T(v.Value)
			return
		}
		*dst = fallback
		names := make([]string, len(values))
		for i, x := range values {
			names[i] = string(x)
		}
		p.warn(v, path, "%q is not %s; using %s", clip(v.Value), orList(names), fallback)
	}
}

// orList is "a, b or c".
func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

// defaultHarness refuses a kind the dispatcher has no adapter for: guessing
// would run another binary than the one the operator meant.
func (p *parser) defaultHarness(v *yaml.Node, path string) {
	if v.Kind != yaml.ScalarNode || !slices.Contains(HarnessKinds(), v.Value) {
		p.fail(v, path, ErrInvalid, "%q is not a harness; the harnesses are %s", clip(v.Value), strings.Join(HarnessKinds(), ", "))
		return
	}
	p.cfg.Routing.Harness.Default = v.Value
	p.setting(v, path, "LOOP_HARNESS", v.Value)
}

func (p *parser) harnessArgs(v *yaml.Node, path string) {
	args := map[string][]string{}
	fields := map[string]field{}
	for _, kind := range HarnessKinds() {
		fields[kind] = func(v *yaml.Node, path string) {
			if list, ok := p.argList(v, path); ok {
				args[kind] = list
			}
		}
	}
	p.mapping(v, path, fields)
	p.cfg.Routing.Harness.Args = args
}

// argList reads a list of command-line arguments: scalars, each taken as
// written (a number or yes is the argument "5" or "yes").
func (p *parser) argList(v *yaml.Node, path string) ([]string, bool) {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, ErrInvalid, "want a list of arguments")
		return nil, false
	}
	out := make([]string, 0, len(v.Content))
	for i, it := range v.Content {
		it = resolve(it)
		if it == nil || it.Kind != yaml.ScalarNode || it.ShortTag() == "!!null" {
			p.fail(v.Content[i], fmt.Sprintf("%s[%d]", path, i), ErrInvalid, "want an argument (a string)")
			return nil, false
		}
		out = append(out, it.Value)
	}
	return out, true
}

func (p *parser) genericHarness(v *yaml.Node, path string) {
	g := &p.cfg.Routing.Harness.Generic
	var spawnAt, resumeAt *yaml.Node
	p.mapping(v, path, map[string]field{
		"spawn": func(v *yaml.Node, path string) {
			if list, ok := p.argList(v, path); ok {
				g.Spawn, spawnAt = list, v
			}
		},
		"resume": func(v *yaml.Node, path string) {
			if list, ok := p.argList(v, path); ok {
				g.Resume, resumeAt = list, v
			}
		},
	})
	mentions := func(tmpl []string, ph string) bool {
		return slices.ContainsFunc(tmpl, func(a string) bool { return strings.Contains(a, ph) })
	}
	spawn := g.Spawn
	if spawnAt == nil {
		spawn = []string{PlaceholderPrompt}
	}
	if resumeAt != nil && mentions(spawn, PlaceholderPrompt) != mentions(g.Resume, PlaceholderPrompt) {
		p.fail(resumeAt, join(path, "resume"), ErrInvalid, "spawn and resume must both hold %s or both leave it out (the prompt is then typed)", PlaceholderPrompt)
	}
}

// template reads a prompt template's path, resolved against the config
// file's directory. A file that is not there is warned about and the built-in
// text kept: the original's default paths name files only its own
// repository had.
func (p *parser) template(dst *string) field {
	return func(v *yaml.Node, path string) {
		var name string
		p.str(&name)(v, path)
		if strings.TrimSpace(name) == "" {
			return
		}
		file := name
		if !filepath.IsAbs(file) && p.dir != "" {
			file = filepath.Join(p.dir, file)
		}
		file, err := filepath.Abs(file)
		if err == nil {
			var fi fs.FileInfo
			if fi, err = os.Stat(file); err == nil && !fi.Mode().IsRegular() {
				err = errors.New("not a regular file")
			}
		}
		if err != nil {
			p.warn(v, path, "%s: %s; the built-in text is used", clip(name), describeReadError(err, name, p.dir))
			return
		}
		*dst = file
	}
}

func (p *parser) workspace(v *yaml.Node, path string) {
	w := &p.cfg.Routing.Workspace
	p.mapping(v, path, map[string]field{
		"root": func(v *yaml.Node, path string) {
			var root string
			p.str(&root)(v, path)
			root = strings.TrimSpace(root)
			if root != "" && root != "~" && !strings.HasPrefix(root, "~/") && !filepath.IsAbs(root) && p.dir != "" {
				root = filepath.Join(p.dir, root)
			}
			if rest, ok := strings.CutPrefix(root, "~"); ok && (rest == "" || strings.HasPrefix(rest, "/")) {
				if home, err := os.UserHomeDir(); err == nil {
					root = filepath.Join(home, rest)
				}
			}
			w.Root = root
			if root != "" {
				// The dispatcher reads its workspace at start, as a process
				// setting: the environment's LOOP_WORKSPACE_ROOT wins.
				p.setting(v, path, "LOOP_WORKSPACE_ROOT", root)
			}
		},
		"strategy": func(v *yaml.Node, path string) {
			enumField(p, &w.Strategy, WorkspaceWorktree, WorkspaceWorktree, WorkspaceClone, WorkspaceDir)(v, path)
			p.setting(v, path, "LOOP_WORKSPACE_STRATEGY", string(w.Strategy))
		},
		"cloneProtocol": func(v *yaml.Node, path string) {
			enumField(p, &w.CloneProtocol, "https", "https", "ssh")(v, path)
			if w.CloneProtocol == "ssh" {
				p.setting(v, path, "LOOP_WORKSPACE_GIT_URL", "git@{host}:{owner}/{repo}.git")
			}
		},
		"defaultHost": func(v *yaml.Node, path string) {
			var host string
			p.str(&host)(v, path)
			if host = strings.TrimSpace(host); host == "" || strings.ContainsAny(host, "/ ") {
				p.fail(v, path, ErrInvalid, "%q is not a host name", clip(host))
				return
			}
			w.DefaultHost = host
		},
		"keepCheckoutOnClose": func(v *yaml.Node, path string) {
			p.boolean(&w.KeepCheckoutOnClose)(v, path)
			if w.KeepCheckoutOnClose {
				p.setting(v, path, "LOOP_WORKSPACE_KEEP", "true")
			}
		},
		"gitBinary": func(v *yaml.Node, path string) {
			var git string
			p.str(&git)(v, path)
			if git = strings.TrimSpace(git); git != "" {
				w.GitBinary = git
			}
		},
	})
}

// sessionPerPR reads routing.tmux.sessionPerPr, the original's booleans
// included.
func (p *parser) sessionPerPR(v *yaml.Node, path string) {
	r := &p.cfg.Routing
	if b, ok := yamlBool(v); ok {
		r.SessionPerPR = PRSessionsNever
		if b {
			r.SessionPerPR = PRSessionsCrossRepository
		}
		return
	}
	enumField(p, &r.SessionPerPR, PRSessionsNever, PRSessionsNever, PRSessionsCrossRepository, PRSessionsAlways)(v, path)
}

// sessionReference documents this file's keys for ReferenceMarkdown.
func sessionReference(d *Config) []refKey {
	h, w := d.Routing.Harness, d.Routing.Workspace
	code := func(s any) string { return fmt.Sprintf("`%v`", s) }
	kinds := "`" + strings.Join(HarnessKinds(), "`, `") + "`"
	return []refKey{
		{"routing.defaultHarness", kinds, code(h.Default), "The agent harness sessions run: Claude Code, cursor-agent, aider, or any CLI (`routing.genericHarness`). Applied at start as `LOOP_HARNESS` unless the environment sets it (the environment wins, with a warning); a change applies when the dispatcher restarts. Another value is refused at load."},
		{"routing.harnessArgs.<harness>", "list of strings", "`[]`", "Extra command-line arguments of that harness (" + kinds + "), passed as given before the prompt (permission flags, a model); the-loop never adds permissions of its own. Another harness name is refused. `LOOP_HARNESS_ARGS`, when set, replaces them for the harness the dispatcher runs."},
		{"routing.genericHarness.spawn", "list of strings", "`[\"{prompt}\"]`", "The generic harness (the CLI `LOOP_HARNESS_BINARY` names): its arguments for a new session: `{prompt}` is the boot prompt (without it, the prompt is typed as the first turn) and `{session_id}` the session's id (without it, the harness picks its own and the session registers it). The extra arguments go before the element holding `{prompt}`."},
		{"routing.genericHarness.resume", "list of strings", "none", "The generic harness's arguments that reopen a conversation, with the same placeholders; absent: a session whose terminal is gone starts a fresh conversation. It must agree with `spawn` on `{prompt}`."},
		{"routing.harnessTrust.enabled", "bool", code(h.Trust.Enabled), "Claude Code only: before each spawn, record the session directory as trusted in the harness's user config (`projects[<dir>].hasTrustDialogAccepted`, `hasCompletedProjectOnboarding`), honouring `CLAUDE_CONFIG_DIR`, so that an unattended session does not wait on the trust dialog. Writes only those keys, merged into the file, and never into a file that does not parse. A trusted checkout's own `.claude/settings.json` may grant permissions: trusting it trusts whoever can push to the repository. `false` leaves the harness's files alone."},
		{"routing.harnessTrust.scope", "`workspace-root`, `directory`", code(h.Trust.Scope), "The spawn directory is trusted either way; `workspace-root` also trusts `routing.workspace.root` (never `/` or the home directory), covering every checkout under it. Unknown: warning, `directory`."},
		{"routing.harnessTrust.acceptBypassPermissions", "`auto`, `always`, `never`", code(h.Trust.AcceptBypassPermissions), "When to record Claude Code's bypass-permissions disclaimer as accepted (account-wide): `auto` only when the harness's own arguments ask for bypass mode (`--dangerously-skip-permissions`, `--permission-mode bypassPermissions`). Unknown: warning, `never`."},
		{"routing.harnessPlugins.enabled", "bool", code(h.Plugins.Enabled), "Sessions load the plugin shipped with the-loop (its skill, commands and hooks) for themselves alone, with the harness's plugin flag (Claude Code: `--plugin-dir`); nothing is written in the harness's configuration. Harnesses without such a flag load none."},
		{"routing.harnessPlugins.marketplaceRepo", "`owner/repo`", "`\"" + OriginalMarketplace + "\"`", "Read for the original's files: no marketplace is registered, so any other non-empty value is warned about (the plugin shipped with the-loop is loaded instead)."},
		{"routing.promptTemplate", "path", "built in", "Template of the prompt typed into a running session (`$work_item`, `$event`, `$action`, `$repository`, `$delivery_id`, `$payload_excerpt`, `$interaction_directive`, `$graph_context`). A relative path is read from the config file's directory; a file that is not there is warned about and the built-in text used."},
		{"routing.spawnPromptTemplate", "path", "built in", "Template of a new session's boot prompt, read as `routing.promptTemplate` is."},
		{"routing.interaction.mode", "`work-item`, `cli`", code(d.Routing.Interaction), "Where a session takes its answers from: the work item (questions posted as comments) or a person attached to its terminal. Unknown: warning, `work-item` (never `cli`)."},
		{"routing.workspace.root", "path", "`\"\"`", "Where each work item's workspace is made (`LOOP_WORKSPACE_ROOT`, which wins when set); empty: `LOOP_DISPATCHER_WORKDIR`. A relative path is read from the config file's directory; `~/` is the dispatcher's home directory."},
		{"routing.workspace.strategy", "`worktree`, `clone`, `dir`", code(w.Strategy), "`worktree`: one clone per repository, a git worktree per work item; `clone`: a full clone per work item; `dir`: an empty directory per work item, nothing checked out. Unknown: warning, `worktree`."},
		{"routing.workspace.cloneProtocol", "`https`, `ssh`", code(w.CloneProtocol), "The clone URL scheme. Unknown: warning, `https`."},
		{"routing.workspace.defaultHost", "host name", code(w.DefaultHost), "The host of a repository whose event names none (GitHub Enterprise: its domain)."},
		{"routing.workspace.keepCheckoutOnClose", "bool", code(w.KeepCheckoutOnClose), "Keep a work item's checkout after it closes."},
		{"routing.workspace.gitBinary", "string", code(w.GitBinary), "The git checkouts are made with."},
		{"routing.tmux.sessionPerPr", "`never`, `cross-repository`, `always`", code(d.Routing.SessionPerPR), "Which pull requests of a work item get a session of their own: none, those in another repository than the work item's, or all. `true` reads as `cross-repository`, `false` as `never`. Unknown: warning, `never`."},
	}
}
