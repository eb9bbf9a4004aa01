package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestHarnessDefaults(t *testing.T) {
	t.Parallel()
	cfg, ws, err := Parse([]byte("version: 0.7.0\n"))
	if err != nil || len(ws) != 0 {
		t.Fatalf("Parse: %v %v", err, ws)
	}
	r := cfg.Routing
	if r.Harness.Default != HarnessClaude || r.Harness.Args != nil || r.Harness.ArgsFor(HarnessCursor) != nil ||
		r.Harness.Trust != (HarnessTrust{Enabled: true, Scope: TrustWorkspaceRoot, AcceptBypassPermissions: BypassAuto}) ||
		r.Harness.Plugins != (HarnessPlugins{Enabled: true}) || r.Harness.Generic.Spawn != nil {
		t.Errorf("harness defaults: %+v", r.Harness)
	}
	if r.Interaction != InteractionWorkItem || r.SessionPerPR != PRSessionsNever || r.Prompts != (Prompts{}) ||
		r.Workspace != (Workspace{Strategy: WorkspaceWorktree, CloneProtocol: "https", DefaultHost: "github.com", GitBinary: "git"}) {
		t.Errorf("routing defaults: %+v", r)
	}
	if len(cfg.Settings) != 0 {
		t.Errorf("an empty file sets %v", cfg.Settings)
	}
}

// TestHarnessKeys: each key read, and what is warned about or refused.
func TestHarnessKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		in    string
		check func(t *testing.T, c *Config)
		warns []string // paths warned about, in order
		errs  []string
	}{
		{name: "every harness's arguments", in: "routing:\n  defaultHarness: aider\n  harnessArgs:\n    claude: [--model, opus]\n    cursor: [--force]\n    aider: [--yes-always, 5, \"\"]\n    generic: []\n",
			check: func(t *testing.T, c *Config) {
				h := c.Routing.Harness
				if h.Default != HarnessAider || !slices.Equal(h.ArgsFor(HarnessAider), []string{"--yes-always", "5", ""}) ||
					!slices.Equal(h.Args[HarnessClaude], []string{"--model", "opus"}) || !slices.Equal(h.Args[HarnessCursor], []string{"--force"}) ||
					h.Args[HarnessGeneric] == nil {
					t.Errorf("harness = %+v", h)
				}
				if s := c.Settings; len(s) != 1 || s[0].Name != "LOOP_HARNESS" || s[0].Value != "aider" || s[0].Path != "routing.defaultHarness" || s[0].Line != 3 {
					t.Errorf("settings = %+v", c.Settings)
				}
			}},
		{name: "an unknown harness's arguments", in: "routing:\n  harnessArgs:\n    codex: [--full-auto]\n",
			errs: []string{"routing.harnessArgs.codex (line 4): unknown key; routing.harnessArgs accepts aider, claude, cursor, generic"}},
		{name: "arguments not a list", in: "routing:\n  harnessArgs: {claude: --model}\n", errs: []string{"routing.harnessArgs.claude (line 3): want a list of arguments"}},
		{name: "an argument not a string", in: "routing:\n  harnessArgs: {claude: [[a]]}\n", errs: []string{"routing.harnessArgs.claude[0] (line 3): want an argument"}},
		{name: "an unknown harness", in: "routing: {defaultHarness: codex}\n",
			errs: []string{`routing.defaultHarness (line 2): "codex" is not a harness; the harnesses are claude, cursor, aider, generic`}},
		{name: "generic", in: "routing:\n  defaultHarness: generic\n  genericHarness:\n    spawn: [run, --id, \"{session_id}\", \"{prompt}\"]\n    resume: [run, --resume, \"{session_id}\", \"{prompt}\"]\n",
			check: func(t *testing.T, c *Config) {
				g := c.Routing.Harness.Generic
				if len(g.Spawn) != 4 || g.Resume[2] != PlaceholderSessionID {
					t.Errorf("generic = %+v", g)
				}
			}},
		{name: "generic templates disagreeing on the prompt", in: "routing:\n  genericHarness: {resume: [--continue]}\n",
			errs: []string{"routing.genericHarness.resume (line 3): spawn and resume must both hold {prompt}"}},
		{name: "trust and plugins", in: "routing:\n  harnessTrust: {enabled: no, scope: directory, acceptBypassPermissions: always}\n  harnessPlugins: {enabled: false, marketplaceRepo: MadaraUchiha-314/the-loop}\n",
			check: func(t *testing.T, c *Config) {
				h := c.Routing.Harness
				if h.Trust != (HarnessTrust{Enabled: false, Scope: TrustDirectory, AcceptBypassPermissions: BypassAlways}) || h.Plugins.Enabled {
					t.Errorf("trust %+v plugins %+v", h.Trust, h.Plugins)
				}
			}},
		{name: "unknown trust values take the narrower choice", in: "routing:\n  harnessTrust: {scope: everything, acceptBypassPermissions: maybe}\n",
			warns: []string{"routing.harnessTrust.scope", "routing.harnessTrust.acceptBypassPermissions"},
			check: func(t *testing.T, c *Config) {
				if tr := c.Routing.Harness.Trust; tr.Scope != TrustDirectory || tr.AcceptBypassPermissions != BypassNever {
					t.Errorf("trust = %+v", tr)
				}
			}},
		{name: "another marketplace", in: "routing:\n  harnessPlugins: {marketplaceRepo: octo/fork}\n", warns: []string{"routing.harnessPlugins.marketplaceRepo"}},
		{name: "no marketplace", in: "routing:\n  harnessPlugins: {marketplaceRepo: \"\"}\n"},
		{name: "interaction cli", in: "routing:\n  interaction: {mode: cli}\n",
			check: func(t *testing.T, c *Config) {
				if c.Routing.Interaction != InteractionCLI {
					t.Errorf("interaction = %s", c.Routing.Interaction)
				}
			}},
		{name: "an unknown interaction is never cli", in: "routing:\n  interaction: {mode: CLI}\n", warns: []string{"routing.interaction.mode"},
			check: func(t *testing.T, c *Config) {
				if c.Routing.Interaction != InteractionWorkItem {
					t.Errorf("interaction = %s", c.Routing.Interaction)
				}
			}},
		{name: "workspace", in: "routing:\n  workspace: {root: ~/ws, strategy: dir, cloneProtocol: ssh, defaultHost: ghe.example.com, keepCheckoutOnClose: true, gitBinary: /opt/git}\n",
			check: func(t *testing.T, c *Config) {
				home, _ := os.UserHomeDir()
				want := Workspace{Root: filepath.Join(home, "ws"), Strategy: WorkspaceDir, CloneProtocol: "ssh", DefaultHost: "ghe.example.com", KeepCheckoutOnClose: true, GitBinary: "/opt/git"}
				if c.Routing.Workspace != want {
					t.Errorf("workspace = %+v", c.Routing.Workspace)
				}
				// What the dispatcher reads at start: process settings the
				// environment may override.
				var got []string
				for _, s := range c.Settings {
					got = append(got, s.Name+"="+s.Value)
				}
				wantSettings := []string{"LOOP_WORKSPACE_ROOT=" + want.Root, "LOOP_WORKSPACE_STRATEGY=dir",
					"LOOP_WORKSPACE_GIT_URL=git@{host}:{owner}/{repo}.git", "LOOP_WORKSPACE_KEEP=true"}
				if !slices.Equal(got, wantSettings) {
					t.Errorf("settings %v, want %v", got, wantSettings)
				}
			}},
		{name: "workspace values unknown", in: "routing:\n  workspace: {strategy: sideways, cloneProtocol: ftp}\n",
			warns: []string{"routing.workspace.strategy", "routing.workspace.cloneProtocol"}},
		{name: "workspace host", in: "routing:\n  workspace: {defaultHost: \"https://x/\"}\n", errs: []string{"routing.workspace.defaultHost (line 3)"}},
		{name: "sessionPerPr false", in: "routing:\n  tmux: {sessionPerPr: false}\n",
			check: func(t *testing.T, c *Config) {
				if c.Routing.SessionPerPR != PRSessionsNever {
					t.Errorf("sessionPerPr = %s", c.Routing.SessionPerPR)
				}
			}},
		{name: "sessionPerPr always", in: "routing:\n  tmux: {sessionPerPr: always}\n",
			check: func(t *testing.T, c *Config) {
				if c.Routing.SessionPerPR != PRSessionsAlways {
					t.Errorf("sessionPerPr = %s", c.Routing.SessionPerPR)
				}
			}},
		{name: "sessionPerPr unknown", in: "routing:\n  tmux: {sessionPerPr: sometimes}\n", warns: []string{"routing.tmux.sessionPerPr"}},
		{name: "a tmux typo", in: "routing:\n  tmux: {sessionPerPR: true}\n", errs: []string{"routing.tmux.sessionPerPR (line 3): unknown key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, ws, err := Parse([]byte("version: 0.7.0\n" + tt.in))
			var warns []string
			for _, w := range ws {
				warns = append(warns, w.Path)
			}
			if !slices.Equal(warns, tt.warns) {
				t.Errorf("warned %v, want %v\n%v", warns, tt.warns, ws)
			}
			for _, e := range tt.errs {
				if err == nil || !strings.Contains(err.Error(), e) || !errors.Is(err, ErrUnknownKey) && !errors.Is(err, ErrInvalid) {
					t.Errorf("error %v, want it to contain %q", err, e)
				}
			}
			if len(tt.errs) > 0 {
				return
			}
			if err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tt.check != nil {
				tt.check(t, cfg)
			}
		})
	}
}

// Prompt templates and a relative workspace root are read from the config
// file's directory, as graph files are; a template that is not there is a
// warning, and the built-in text stays.
func TestHarnessPathsFromTheConfigDirectory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "event.md", []byte("$work_item\n"))
	path := writeFile(t, dir, "cli-config.yaml", []byte("version: 0.7.0\nrouting:\n  promptTemplate: event.md\n  spawnPromptTemplate: prompts/spawn.md\n  workspace: {root: ws}\n"))
	cfg, ws, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Routing.Prompts.Event != filepath.Join(dir, "event.md") || cfg.Routing.Prompts.Spawn != "" {
		t.Errorf("prompts = %+v", cfg.Routing.Prompts)
	}
	if cfg.Routing.Workspace.Root != filepath.Join(dir, "ws") {
		t.Errorf("workspace root = %s", cfg.Routing.Workspace.Root)
	}
	if len(ws) != 1 || ws[0].Path != "routing.spawnPromptTemplate" || !strings.Contains(ws[0].Message, "prompts/spawn.md: no such file") ||
		!strings.Contains(ws[0].Message, "the built-in text is used") {
		t.Errorf("warnings = %v", ws)
	}
	// A directory is not a template.
	writeFile(t, dir, "cli-config.yaml", []byte("version: 0.7.0\nrouting:\n  promptTemplate: .\n"))
	if cfg, ws, err := LoadFile(path); err != nil || cfg.Routing.Prompts.Event != "" || len(ws) != 1 {
		t.Errorf("a directory as template: %+v %v %v", cfg.Routing.Prompts, ws, err)
	}
}

func TestHarnessReference(t *testing.T) {
	t.Parallel()
	ref := ReferenceMarkdown()
	for _, k := range []string{"routing.defaultHarness", "routing.harnessArgs.<harness>", "routing.genericHarness.spawn", "routing.harnessTrust.scope",
		"routing.harnessPlugins.marketplaceRepo", "routing.promptTemplate", "routing.interaction.mode", "routing.workspace.strategy", "routing.tmux.sessionPerPr"} {
		if strings.Count(ref, "| `"+k+"` |") != 1 {
			t.Errorf("the reference lists %s other than once", k)
		}
	}
}
