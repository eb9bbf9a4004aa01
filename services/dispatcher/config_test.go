package dispatcher

import (
	"slices"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
)

// The settings' defaults come from the tags, and a zero Settings takes them.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if c.Runner != RunnerTmux || c.Workdir != "." || c.Spawn != SpawnLabeled || c.Label != "the-loop: auto-execute" ||
		c.SessionAddr != "127.0.0.1:8790" || c.Harness != "claude" || c.HarnessCommand() != "claude" || DefaultLabel != c.Label {
		t.Errorf("defaults: %+v", c)
	}
	var s Settings
	s.setDefaults()
	if s.Runner != c.Runner || s.Workdir != c.Workdir || s.SpawnOnUnmatched != c.Spawn || s.Label != c.Label {
		t.Errorf("a zero Settings did not take Config's defaults: %+v", s)
	}
}

func TestConfigRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  config.Env
		want string
	}{
		{config.Env{"LOOP_DISPATCHER_SPAWN": "sometimes"}, `LOOP_DISPATCHER_SPAWN is "sometimes"`},
		{config.Env{"LOOP_DISPATCHER_RUNNER": "docker"}, `LOOP_DISPATCHER_RUNNER is "docker"`},
		{config.Env{"LOOP_SESSION_ADDR": "8790"}, `LOOP_SESSION_ADDR is "8790"`},
		{config.Env{"LOOP_SESSION_ENV": "ANTHROPIC_API_KEY, LOOP_NATS_NKEY_SEED"}, "LOOP_SESSION_ENV names LOOP_NATS_NKEY_SEED"},
		{config.Env{"LOOP_HARNESS": "codex"}, `LOOP_HARNESS: harness "codex" is not a harness kind: the kinds are claude, cursor, aider, generic`},
		{config.Env{"LOOP_HARNESS": "generic"}, "LOOP_HARNESS is generic: set LOOP_HARNESS_BINARY"},
		{config.Env{"LOOP_HARNESS_ARGS": "--api-key=sk-secret"}, "LOOP_HARNESS_ARGS is not a JSON array of strings"},
		{config.Env{"LOOP_HARNESS_ARGS": `{"a": 1}`}, "LOOP_HARNESS_ARGS is not a JSON array of strings"},
		{config.Env{"LOOP_SESSION_SANDBOX": "on"}, `LOOP_SESSION_SANDBOX is "on": it must be landlock or off`},
		{config.Env{"LOOP_SESSION_SANDBOX_PORTS": "443,0"}, `LOOP_SESSION_SANDBOX_PORTS names "0"`},
		{config.Env{"LOOP_SESSION_SANDBOX_PORTS": "https"}, `LOOP_SESSION_SANDBOX_PORTS names "https"`},
		{config.Env{"LOOP_SESSION_SANDBOX_WRITE": ".claude"}, `LOOP_SESSION_SANDBOX_WRITE names ".claude": a path must be absolute or start with ~/`},
		{config.Env{"LOOP_SESSION_SANDBOX_READ": "~user/bin"}, `LOOP_SESSION_SANDBOX_READ names "~user/bin"`},
		{config.Env{"LOOP_TMUX_DIR": "tmux"}, `LOOP_TMUX_DIR is "tmux": it must be an absolute path`},
		{config.Env{"LOOP_TMUX_SOCKET": "../x"}, `LOOP_TMUX_SOCKET is "../x": it must be a name`},
	} {
		var c Config
		err := config.Process(tt.env, &c)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Process(%v) = %v, want %q", tt.env, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "sk-secret") {
			t.Errorf("an error quotes LOOP_HARNESS_ARGS: %v", err)
		}
	}
}

// The harness: its kind, binary and arguments from the environment, the
// operator config's arguments and generic templates where the environment
// sets none (docs/decisions/093-harness-settings.md).
func TestConfigHarness(t *testing.T) {
	t.Parallel()
	if !slices.Equal(config.HarnessKinds(), agent.Kinds()) {
		t.Fatalf("the config's harness kinds %v differ from the adapters' %v", config.HarnessKinds(), agent.Kinds())
	}
	file, _, err := config.Parse([]byte(`version: 0.7.0
routing:
  harnessArgs:
    claude: [--permission-mode, acceptEdits]
    cursor: [--force]
  genericHarness:
    spawn: [chat, "{prompt}"]
    resume: [chat, --resume, "{session_id}", "{prompt}"]
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		env       config.Env
		file      *config.Config
		kind, bin string
		spawn     []string
	}{
		{name: "defaults", env: config.Env{}, kind: "claude", bin: "claude", spawn: []string{"--session-id", "S", "P"}},
		{name: "the file's arguments", env: config.Env{}, file: file, kind: "claude", bin: "claude",
			spawn: []string{"--session-id", "S", "--permission-mode", "acceptEdits", "P"}},
		{name: "the environment's arguments win", env: config.Env{"LOOP_HARNESS_ARGS": `["--model", "opus"]`}, file: file, kind: "claude", bin: "claude",
			spawn: []string{"--session-id", "S", "--model", "opus", "P"}},
		{name: "an empty list is set too", env: config.Env{"LOOP_HARNESS_ARGS": `[]`}, file: file, kind: "claude", bin: "claude",
			spawn: []string{"--session-id", "S", "P"}},
		{name: "cursor", env: config.Env{"LOOP_HARNESS": "cursor", "LOOP_HARNESS_BINARY": "/opt/cursor-agent"}, file: file, kind: "cursor", bin: "/opt/cursor-agent",
			spawn: []string{"--force", "P"}},
		{name: "aider", env: config.Env{"LOOP_HARNESS": "aider"}, file: file, kind: "aider", bin: "aider", spawn: []string{}},
		{name: "generic without templates", env: config.Env{"LOOP_HARNESS": "generic", "LOOP_HARNESS_BINARY": "my-agent"}, kind: "generic", bin: "my-agent",
			spawn: []string{"P"}},
		{name: "generic with the file's", env: config.Env{"LOOP_HARNESS": "generic", "LOOP_HARNESS_BINARY": "my-agent"}, file: file, kind: "generic", bin: "my-agent",
			spawn: []string{"chat", "P"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var c Config
			if err := config.Process(tt.env, &c); err != nil {
				t.Fatal(err)
			}
			h, err := c.HarnessWith(tt.file)
			if err != nil {
				t.Fatal(err)
			}
			if h.Name() != tt.kind || h.Command() != tt.bin || c.HarnessCommand() != tt.bin {
				t.Errorf("harness %s %s (command %s), want %s %s", h.Name(), h.Command(), c.HarnessCommand(), tt.kind, tt.bin)
			}
			if got := h.SpawnArgv("P", "S"); !slices.Equal(got, tt.spawn) {
				t.Errorf("spawn argv %q, want %q", got, tt.spawn)
			}
			if tt.file == nil {
				if s := c.settings(); s.Harness.Name() != tt.kind || !slices.Equal(s.Harness.SpawnArgv("P", "S"), tt.spawn) {
					t.Errorf("settings' harness = %+v", s.Harness)
				}
			}
		})
	}
}
