package standin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/agent/plugin"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// A paste is the text between the bracketed-paste markers, submitted by the
// carriage return that follows; tmux's CRs inside it come back as newlines,
// and each record is echoed.
func TestRunRecordsPastes(t *testing.T) {
	dir := t.TempDir()
	in := strings.NewReader("\x1b[200~first\rsecond\x1b[201~\r" + "\x1b[200~third; x\x1b[201~\r")
	var out bytes.Buffer
	if err := Run(dir, []string{"--resume", "S9", "--flag", "the boot prompt"}, in, &out); err != nil {
		t.Fatal(err)
	}
	boots, err := ReadBoots(dir)
	if err != nil || len(boots) != 1 || boots[0].Mode != "resume" || boots[0].SessionID != "S9" || boots[0].Prompt != "the boot prompt" {
		t.Fatalf("boots = %+v, %v", boots, err)
	}
	inputs, err := ReadInputs(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Input{{SessionID: "S9", Text: "first\nsecond"}, {SessionID: "S9", Text: "third; x"}}
	same := func(a, b Input) bool { return a.SessionID == b.SessionID && a.Text == b.Text && !a.At.IsZero() }
	if len(inputs) != len(want) || !same(inputs[0], want[0]) || !same(inputs[1], want[1]) {
		t.Errorf("inputs = %+v, want %+v", inputs, want)
	}
	for _, s := range []string{"the boot prompt", "first\r\nsecond", "third; x"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("%q not echoed:\n%q", s, out.String())
		}
	}
	if err := RecordInput(dir, Input{SessionID: "boot:S9", Text: "marked"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := ReadInputs(dir); len(got) != 3 || got[2].Text != "marked" {
		t.Errorf("after RecordInput: %+v", got)
	}
}

// Claude Code's argv: the stand-in reads --session-id/--resume and
// --plugin-dir, keeps every other flag with its value, and takes the
// prompt last.
func TestBootArgv(t *testing.T) {
	b := bootOf([]string{
		"--session-id", "S1", "--plugin-dir", "/p/one", "--permission-mode", "acceptEdits",
		"--verbose", "--plugin-dir=/p/two", "--model=opus", "--dangerously-skip-permissions", "the prompt",
	})
	if b.Mode != "spawn" || b.SessionID != "S1" || b.Prompt != "the prompt" {
		t.Errorf("boot = %+v", b)
	}
	if !slices.Equal(b.PluginDirs, []string{"/p/one", "/p/two"}) {
		t.Errorf("plugin dirs = %q", b.PluginDirs)
	}
	want := []string{"--permission-mode", "acceptEdits", "--verbose", "--model=opus", "--dangerously-skip-permissions"}
	if !slices.Equal(b.Args, want) {
		t.Errorf("args = %q, want %q", b.Args, want)
	}
	if b := bootOf([]string{"--resume", "S2", "--flag", "prompt"}); b.Mode != "resume" || !slices.Equal(b.Args, []string{"--flag"}) || b.Prompt != "prompt" {
		t.Errorf("resume boot = %+v", b)
	}
}

// writePlugin writes a plugin directory: its manifest named name, its hooks
// file, and each command of commands as commands/<command>.md.
func writePlugin(t *testing.T, name, hooks string, commands ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), name)
	files := map[string]string{
		plugin.ManifestPath: `{"name": "` + name + `", "version": "1.2.3"}`,
		plugin.HooksPath:    hooks,
	}
	for _, c := range commands {
		files["commands/"+c+".md"] = "---\ndescription: " + c + "\n---\nDo " + c + ".\n"
	}
	for p, text := range files {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tinyHooks: a SessionStart hook for startup and one for resume, and a Stop
// hook that blocks its first two calls (exit 2, a reason on stderr) and
// then allows, keeping its count and each input beside the plugin.
const tinyHooks = `{"hooks": {
  "SessionStart": [
    {"matcher": "startup", "hooks": [{"type": "command", "command": "echo 'root ${CLAUDE_PLUGIN_ROOT}'; echo \"project $CLAUDE_PROJECT_DIR\"; cat > \"$CLAUDE_PLUGIN_ROOT/start-input\""}]},
    {"matcher": "resume", "hooks": [{"type": "command", "command": "echo resumed"}]}
  ],
  "Stop": [
    {"hooks": [{"type": "command", "timeout": 5, "command": "cat >> \"$CLAUDE_PLUGIN_ROOT/stop-inputs\"; echo >> \"$CLAUDE_PLUGIN_ROOT/stop-inputs\"; n=$(cat \"$CLAUDE_PLUGIN_ROOT/count\" 2>/dev/null || echo 0); n=$((n+1)); echo $n > \"$CLAUDE_PLUGIN_ROOT/count\"; if [ $n -le 2 ]; then echo \"not done yet ($n)\" >&2; exit 2; fi"}]}
  ]
}}`

// A plugin's hooks run as the harness runs them: SessionStart by its
// matcher, with the plugin's root expanded and in the environment; a Stop
// hook that blocks twice is tried again at once with stop_hook_active set,
// and the third try is allowed. Slash commands of the boot prompt resolve
// to the plugin's command files.
func TestPluginHooks(t *testing.T) {
	plug := writePlugin(t, "tiny", tinyHooks, "go")
	project := t.TempDir()
	t.Chdir(project)
	dir := t.TempDir()
	var out bytes.Buffer
	prompt := "Start by running `/tiny:go now`, then /tiny:go again, not /tiny:missing nor (/other:thing); see https://example.test/x:y."
	if err := Run(dir, []string{"--session-id", "S1", "--plugin-dir", plug, "--verbose", prompt}, strings.NewReader(""), &out); err != nil {
		t.Fatal(err)
	}
	boots, err := ReadBoots(dir)
	if err != nil || len(boots) != 1 {
		t.Fatalf("boots = %+v, %v", boots, err)
	}
	b := boots[0]
	if len(b.Plugins) != 1 || b.Plugins[0].Name != "tiny" || b.Plugins[0].Version != "1.2.3" || b.Plugins[0].Error != "" {
		t.Errorf("plugins = %+v", b.Plugins)
	}
	wantCommands := []Command{
		{Slash: "/tiny:go", File: filepath.Join(plug, "commands", "go.md"), Found: true},
		{Slash: "/tiny:missing"},
		{Slash: "/other:thing"},
	}
	if !slices.Equal(b.Commands, wantCommands) {
		t.Errorf("commands = %+v\nwant       %+v", b.Commands, wantCommands)
	}
	if !slices.Equal(b.Args, []string{"--verbose"}) {
		t.Errorf("args = %q", b.Args)
	}

	hooks, err := ReadHooks(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(hooks) != 4 {
		t.Fatalf("hook runs = %+v", hooks)
	}
	start := hooks[0]
	if start.Event != "SessionStart" || start.Matcher != "startup" || start.Exit != 0 || start.SessionID != "S1" ||
		start.Stdout != "root "+plug+"\nproject "+project+"\n" {
		t.Errorf("SessionStart = %+v", start)
	}
	var startIn map[string]any
	if b, err := os.ReadFile(filepath.Join(plug, "start-input")); err != nil || json.Unmarshal(b, &startIn) != nil ||
		startIn["hook_event_name"] != "SessionStart" || startIn["source"] != "startup" || startIn["session_id"] != "S1" {
		t.Errorf("SessionStart input: %s %v", b, err)
	}
	for i, want := range []Hooked{
		{Attempt: 1, Exit: 2, Blocked: true, Stderr: "not done yet (1)\n"},
		{Attempt: 2, Exit: 2, Blocked: true, Stderr: "not done yet (2)\n", StopHookActive: true},
		{Attempt: 3, Exit: 0, StopHookActive: true},
	} {
		got := hooks[1+i]
		if got.Event != "Stop" || got.Turn != 0 || got.Attempt != want.Attempt || got.Exit != want.Exit || got.Blocked != want.Blocked ||
			got.Stderr != want.Stderr || got.StopHookActive != want.StopHookActive || got.Plugin != plug {
			t.Errorf("stop %d = %+v, want %+v", i+1, got, want)
		}
	}
	inputs, _ := os.ReadFile(filepath.Join(plug, "stop-inputs"))
	var actives []any
	for line := range strings.SplitSeq(strings.TrimSpace(string(inputs)), "\n") {
		var in map[string]any
		if err := json.Unmarshal([]byte(line), &in); err != nil || in["hook_event_name"] != "Stop" || in["session_id"] != "S1" {
			t.Errorf("stop input %q: %v", line, err)
		}
		actives = append(actives, in["stop_hook_active"])
	}
	if !slices.Equal(actives, []any{false, true, true}) {
		t.Errorf("stop_hook_active = %v", actives)
	}
	if !strings.Contains(out.String(), "not done yet (1)") {
		t.Errorf("the blocked stop was not echoed:\n%s", out.String())
	}

	// Resumed: only the resume hook runs; a typed prompt is a turn of its
	// own (the Stop hook allows now).
	dir2 := t.TempDir()
	in := strings.NewReader("\x1b[200~next\x1b[201~\r")
	if err := Run(dir2, []string{"--resume", "S1", "--plugin-dir", plug, "again"}, in, &out); err != nil {
		t.Fatal(err)
	}
	hooks, _ = ReadHooks(dir2)
	if len(hooks) != 3 || hooks[0].Event != "SessionStart" || hooks[0].Stdout != "resumed\n" ||
		hooks[1].Turn != 0 || hooks[1].Blocked || hooks[2].Turn != 1 || hooks[2].Event != "Stop" || hooks[2].Blocked {
		t.Errorf("resumed: %+v", hooks)
	}
}

// A Stop hook that never allows is tried maxStopTries times, then the
// turn ends anyway; a hook out of time is recorded as such; a plugin that
// does not load is recorded and skipped.
func TestPluginStopGuard(t *testing.T) {
	always := writePlugin(t, "always", `{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo no >&2; exit 2"}]}]}}`)
	slow := writePlugin(t, "slow", `{"hooks": {"SessionStart": [{"hooks": [{"type": "command", "timeout": 1, "command": "sleep 30"}]}]}}`)
	broken := t.TempDir()
	dir := t.TempDir()
	start := time.Now()
	if err := Run(dir, []string{"--session-id", "S", "--plugin-dir", always, "--plugin-dir", slow, "--plugin-dir", broken, "p"}, strings.NewReader(""), io.Discard); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %s", d)
	}
	hooks, _ := ReadHooks(dir)
	if len(hooks) != 1+maxStopTries {
		t.Fatalf("%d hook runs: %+v", len(hooks), hooks)
	}
	if hooks[0].Event != "SessionStart" || hooks[0].Exit != -1 || !strings.Contains(hooks[0].Error, "timed out") {
		t.Errorf("slow hook: %+v", hooks[0])
	}
	for i, h := range hooks[1:] {
		if !h.Blocked || h.Attempt != i+1 {
			t.Errorf("stop %d: %+v", i+1, h)
		}
	}
	boots, _ := ReadBoots(dir)
	if len(boots) != 1 || len(boots[0].Plugins) != 3 || boots[0].Plugins[2].Error == "" {
		t.Errorf("plugins: %+v", boots)
	}
}

// The real plugin, installed, with a the-loop built from ./cmd/the-loop on
// PATH. Outside a session: the SessionStart hook runs and says nothing,
// /the-loop:work-on resolves to the installed command file, and the Stop
// hook allows at once. In a session whose node blocks: SessionStart tells
// the session where it stands, and the Stop hook blocks the bounded number
// of times, then allows.
func TestRealPlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the-loop")
	}
	root := t.TempDir()
	plug := filepath.Join(root, "plugin")
	if err := plugin.Install(plug); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "the-loop"), "github.com/the-loop/bus/cmd/the-loop")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, k := range []string{"LOOP_SESSION_URL", "LOOP_SESSION_TOKEN", "LOOP_STOP_MAX_ATTEMPTS"} {
		t.Setenv(k, "")
		os.Unsetenv(k)
	}
	const prompt = "This work item was armed for autonomous execution. Start by running `/the-loop:work-on github:o/r#1`."
	const stopCommand = "the-loop hook stop --harness claude"

	t.Run("outside a session", func(t *testing.T) {
		dir := t.TempDir()
		in := strings.NewReader("\x1b[200~a review comment\x1b[201~\r")
		if err := Run(dir, []string{"--session-id", "S1", "--plugin-dir", plug, prompt}, in, io.Discard); err != nil {
			t.Fatal(err)
		}
		boots, _ := ReadBoots(dir)
		if len(boots) != 1 || !slices.Equal(boots[0].Commands, []Command{{Slash: "/the-loop:work-on", File: filepath.Join(plug, "commands", "work-on.md"), Found: true}}) {
			t.Fatalf("boot: %+v", boots)
		}
		if p := boots[0].Plugins; len(p) != 1 || p[0].Name != plugin.Name || p[0].Version != plugin.Version() {
			t.Errorf("plugins: %+v", p)
		}
		hooks, _ := ReadHooks(dir)
		want := []Hooked{
			{Event: "SessionStart", Matcher: "startup|resume", Command: "the-loop hook session-start --harness claude"},
			{Event: "Stop", Turn: 0, Attempt: 1, Command: stopCommand},
			{Event: "Stop", Turn: 1, Attempt: 1, Command: stopCommand},
		}
		if len(hooks) != len(want) {
			t.Fatalf("hook runs: %+v", hooks)
		}
		for i, w := range want {
			h := hooks[i]
			if h.Event != w.Event || h.Matcher != w.Matcher || h.Command != w.Command || h.Turn != w.Turn || h.Attempt != w.Attempt ||
				h.Exit != 0 || h.Blocked || h.Stdout != "" || h.Stderr != "" || h.Error != "" {
				t.Errorf("run %d = %+v, want %+v, exit 0 and silent", i, h, w)
			}
		}
	})

	t.Run("in a session", func(t *testing.T) {
		const token = "lst1.Z2l0aHViOm8vciMx.BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"
		endpoint := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+token || r.URL.Path != sessionapi.PathCheck {
				http.Error(w, `{"error":"refused"}`, http.StatusUnauthorized)
				return
			}
			_ = json.NewEncoder(w).Encode(sessionapi.CheckReport{
				Ref: "github:o/r#1", Graph: "work-item", CurrentNode: "requirements", Status: sessionapi.CheckBlock,
				Messages: []string{"no requirements.md or bugfix.md in docs/specs/issue-1"},
			})
		}))
		defer endpoint.Close()
		t.Setenv("LOOP_SESSION_URL", endpoint.URL)
		t.Setenv("LOOP_SESSION_TOKEN", token)
		t.Setenv("LOOP_STOP_MAX_ATTEMPTS", "2")
		t.Setenv("TMPDIR", t.TempDir())
		dir := t.TempDir()
		if err := Run(dir, []string{"--session-id", "S2", "--plugin-dir", plug, prompt}, strings.NewReader(""), io.Discard); err != nil {
			t.Fatal(err)
		}
		hooks, _ := ReadHooks(dir)
		if len(hooks) != 4 {
			t.Fatalf("hook runs: %+v", hooks)
		}
		if h := hooks[0]; h.Event != "SessionStart" || h.Exit != 0 || !strings.Contains(h.Stdout, "Current node: requirements; status: block.") {
			t.Errorf("SessionStart: %+v", h)
		}
		for i, h := range hooks[1:3] {
			if h.Event != "Stop" || h.Exit != 2 || !h.Blocked || !strings.Contains(h.Stderr, fmt.Sprintf("(attempt %d of 2)", i+1)) ||
				!strings.Contains(h.Stderr, "no requirements.md or bugfix.md") {
				t.Errorf("stop %d: %+v", i+1, h)
			}
		}
		if h := hooks[3]; h.Exit != 0 || h.Blocked || !h.StopHookActive || !strings.Contains(h.Stderr, "still incomplete after 2 attempts") {
			t.Errorf("stop 3: %+v", h)
		}
		for _, h := range hooks {
			if strings.Contains(h.Stdout+h.Stderr, token) {
				t.Errorf("the token is in a hook's output: %+v", h)
			}
		}
	})
}
