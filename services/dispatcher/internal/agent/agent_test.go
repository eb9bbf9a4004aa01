package agent

import (
	"slices"
	"strings"
	"testing"
)

func TestClaudeArgv(t *testing.T) {
	t.Parallel()
	h := Claude("--model", "opus")
	if got, want := h.SpawnArgv("do it", "id-1"), []string{"--session-id", "id-1", "--model", "opus", "do it"}; !slices.Equal(got, want) {
		t.Errorf("spawn argv = %q, want %q", got, want)
	}
	got, ok := h.ResumeArgv("{prompt} $x", "id-1")
	if want := []string{"--resume", "id-1", "--model", "opus", "{prompt} $x"}; !ok || !slices.Equal(got, want) {
		t.Errorf("resume argv = %q, %v, want %q", got, ok, want)
	}
	if _, ok := h.ResumeArgv("p", "-rf /"); ok {
		t.Error("an unsafe session id reached a resume argv")
	}
	if _, ok := (&Command{HarnessName: "cursor", Binary: "cursor-agent", Spawn: []string{"{prompt}"}}).ResumeArgv("p", "id"); ok {
		t.Error("a harness without resume resumed")
	}
}

// TestKinds: each kind's spawn and resume argv, where the operator's
// arguments go, which id and prompt it is handed, its plugin flag and its
// hook protocol.
func TestKinds(t *testing.T) {
	t.Parallel()
	extra := []string{"--x", "y z"}
	tests := []struct {
		kind, binary    string
		spawn, resume   []string // nil resume: cannot resume
		choosesID, boot bool
		plugin          []string
		hooks           string
		resumeWithoutID bool // resume needs no id
		spawnIgnoresID  bool
	}{
		{kind: KindClaude, binary: "claude",
			spawn:  []string{"--session-id", "sid", "--x", "y z", "P"},
			resume: []string{"--resume", "sid", "--x", "y z", "P"},
			boot:   true,
			plugin: []string{"--plugin-dir", "/plug"},
			hooks:  HookClaude,
		},
		{kind: KindCursor, binary: "cursor-agent",
			spawn:     []string{"--x", "y z", "P"},
			resume:    []string{"--resume", "sid", "--x", "y z", "P"},
			choosesID: true, boot: true, hooks: HookCursor, spawnIgnoresID: true,
		},
		{kind: KindAider, binary: "aider",
			spawn:           []string{"--x", "y z"},
			resume:          []string{"--restore-chat-history", "--x", "y z"},
			resumeWithoutID: true, spawnIgnoresID: true,
		},
		{kind: KindGeneric, binary: "my-agent",
			spawn: []string{"--x", "y z", "P"},
			boot:  true, spawnIgnoresID: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			t.Parallel()
			bin := ""
			if tt.kind == KindGeneric {
				bin = tt.binary
			}
			h, err := ByName(tt.kind, bin, extra)
			if err != nil {
				t.Fatal(err)
			}
			var _ Harness = h
			if h.Name() != tt.kind || h.Command() != tt.binary {
				t.Errorf("name %q binary %q", h.Name(), h.Command())
			}
			if got := h.SpawnArgv("P", "sid"); !slices.Equal(got, tt.spawn) {
				t.Errorf("spawn argv = %q, want %q", got, tt.spawn)
			}
			got, ok := h.ResumeArgv("P", "sid")
			if ok != (tt.resume != nil) || !slices.Equal(got, tt.resume) {
				t.Errorf("resume argv = %q %v, want %q", got, ok, tt.resume)
			}
			if h.ChoosesSessionID() != tt.choosesID || h.BootPromptInArgv() != tt.boot || h.HookProtocol() != tt.hooks {
				t.Errorf("chooses id %v, boot prompt in argv %v, hooks %q", h.ChoosesSessionID(), h.BootPromptInArgv(), h.HookProtocol())
			}
			if got := h.PluginArgv("/plug"); !slices.Equal(got, tt.plugin) {
				t.Errorf("plugin argv = %q, want %q", got, tt.plugin)
			}
			if h.PluginArgv("") != nil {
				t.Error("plugin argv without a directory")
			}
			// A hostile id never reaches an argv: the spawn of a harness
			// handed the id is refused, resume by id is refused.
			for _, bad := range []string{"", "-rf", "--dangerously-skip-permissions", "a b", "a;b", "x\n", strings.Repeat("a", 200), "{prompt}"} {
				argv := h.SpawnArgv("P", bad)
				if tt.spawnIgnoresID {
					if !slices.Equal(argv, tt.spawn) {
						t.Errorf("spawn with id %q = %q", bad, argv)
					}
				} else if argv != nil {
					t.Errorf("spawn with id %q = %q, want refused", bad, argv)
				}
				argv, ok := h.ResumeArgv("P", bad)
				if tt.resumeWithoutID {
					if !ok || slices.Contains(argv, bad) {
						t.Errorf("resume with id %q = %q %v", bad, argv, ok)
					}
				} else if ok {
					t.Errorf("resume with id %q = %q, want refused", bad, argv)
				}
			}
			// The prompt is one element whatever it holds, and the
			// extra arguments are never the operator's to lose.
			if tt.boot {
				argv := h.SpawnArgv("-x {session_id} $(rm -rf /)", "sid")
				if argv[len(argv)-1] != "-x {session_id} $(rm -rf /)" {
					t.Errorf("prompt not passed as given: %q", argv)
				}
			}
		})
	}
}

func TestByNameRefusesUnknown(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"", "Claude", "codex", "claude "} {
		_, err := ByName(name, "", nil)
		if err == nil || !strings.Contains(err.Error(), "claude, cursor, aider, generic") {
			t.Errorf("ByName(%q) = %v, want an error listing the kinds", name, err)
		}
	}
	if _, err := ByName(KindGeneric, "", nil); err == nil {
		t.Error("a generic harness without a command was built")
	}
	h, err := ByName(KindClaude, "/opt/claude", nil)
	if err != nil || h.Command() != "/opt/claude" {
		t.Errorf("binary not taken: %v %v", h, err)
	}
}

func TestGenericTemplates(t *testing.T) {
	t.Parallel()
	h, err := Generic("agent", []string{"chat", "--id={session_id}", "--ask={prompt}"}, []string{"chat", "--continue={session_id}", "{prompt}"}, []string{"-v"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.SpawnArgv("hi there", "s1"), []string{"chat", "--id=s1", "-v", "--ask=hi there"}; !slices.Equal(got, want) {
		t.Errorf("spawn = %q, want %q", got, want)
	}
	if got, ok := h.ResumeArgv("next", "s1"); !ok || !slices.Equal(got, []string{"chat", "--continue=s1", "-v", "next"}) {
		t.Errorf("resume = %q %v", got, ok)
	}
	if h.ChoosesSessionID() || !h.BootPromptInArgv() {
		t.Error("a template handing the id chooses none of its own")
	}
	// The prompt never brings a placeholder of its own into play.
	if got := h.SpawnArgv("{session_id}", "s1"); got[3] != "--ask={session_id}" {
		t.Errorf("a placeholder in the prompt was replaced: %q", got)
	}

	typed, err := Generic("agent", []string{"repl"}, []string{"repl", "--load", "{session_id}"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if typed.BootPromptInArgv() || !typed.ChoosesSessionID() {
		t.Error("a template without {prompt} or a spawn id: the prompt is typed and the id registered")
	}
	if _, err := Generic("agent", []string{"{prompt}"}, []string{"--resume"}, nil); err == nil {
		t.Error("spawn and resume disagreeing on the prompt were accepted")
	}
	if _, err := Generic("agent", nil, nil, nil); err == nil {
		t.Error("a generic harness without a spawn template was built")
	}
}

func TestWithExtra(t *testing.T) {
	t.Parallel()
	op := []string{"--permission-mode", "acceptEdits"}
	h := Claude(op...)
	p := h.WithExtra(h.PluginArgv("/plug")...)
	want := []string{"--session-id", "sid", "--plugin-dir", "/plug", "--permission-mode", "acceptEdits", "P"}
	if got := p.SpawnArgv("P", "sid"); !slices.Equal(got, want) {
		t.Errorf("spawn = %q, want %q", got, want)
	}
	if !slices.Equal(h.Extra, op) {
		t.Errorf("WithExtra changed the original: %q", h.Extra)
	}
	if h.WithExtra() != h {
		t.Error("WithExtra without arguments copied")
	}
}
