package tmux

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
)

// envDump, set in a process's environment, makes this test binary write
// its environment (a JSON object) to the file it names and exit: the
// command of a session whose environment a test checks.
const envDump = "TMUX_TEST_ENV_DUMP"

func TestMain(m *testing.M) {
	tmuxtest.MaybeRunStandIn()
	if path := os.Getenv(envDump); path != "" {
		env := map[string]string{}
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			env[k] = v
		}
		b, _ := json.Marshal(env)
		if err := os.WriteFile(path+".tmp", b, 0o600); err == nil {
			_ = os.Rename(path+".tmp", path)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestTarget(t *testing.T) {
	for ref, want := range map[string]string{
		"github:octo/repo#15":                 "loop-github-octo-repo-15",
		"github:octo/foo.js#15":               "loop-github-octo-foo_js-15",
		"github:ghe.corp.example/octo/repo#7": "loop-github-ghe_corp_example-octo-repo-7",
		"github:o w/r$x#1":                    "loop-github-o-w-r-x-1",
		"github:ghe.corp.example:8443/o/r#2":  "loop-github-ghe_corp_example-8443-o-r-2",
	} {
		if got := Target(ref); got != want {
			t.Errorf("Target(%q) = %q, want %q", ref, got, want)
		}
	}
}

// TestProbeSpawnKill runs the protocol against a private tmux server: a
// prefix never matches another session, a live name is never replaced, a
// dead pane is cleared by a spawn.
func TestProbeSpawnKill(t *testing.T) {
	s := &Server{Socket: tmuxtest.Socket(t), RemainOnExit: true}
	ctx := context.Background()
	if st := s.Probe(ctx, "loop-x-1"); st != Absent {
		t.Fatalf("no server: %v, want absent", st)
	}
	if err := s.Spawn(ctx, "loop-x-10", t.TempDir(), map[string]string{"A": "1"}, []string{"sleep", "600"}); err != nil {
		t.Fatal(err)
	}
	if st := s.Probe(ctx, "loop-x-1"); st != Absent {
		t.Errorf("loop-x-1 probed %v: a prefix of loop-x-10 matched", st)
	}
	if st := s.Probe(ctx, "loop-x-10"); st != Live {
		t.Errorf("loop-x-10: %v, want live", st)
	}
	if err := s.Spawn(ctx, "loop-x-10", "", nil, []string{"sleep", "600"}); !errors.Is(err, ErrOccupied) {
		t.Errorf("spawn over a live session: %v, want ErrOccupied", err)
	}
	if err := s.Spawn(ctx, "loop-x-2", "", nil, []string{"true"}); err != nil {
		t.Fatal(err)
	}
	deadline := 0
	for s.Probe(ctx, "loop-x-2") != Dead && deadline < 500 {
		_ = exec.Command("sleep", "0.02").Run()
		deadline++
	}
	if st := s.Probe(ctx, "loop-x-2"); st != Dead {
		t.Fatalf("exited harness with remain-on-exit: %v, want dead", st)
	}
	if err := s.Deliver(ctx, "loop-x-2", "hi"); !errors.Is(err, ErrMissing) {
		t.Errorf("deliver to a dead pane: %v, want ErrMissing", err)
	}
	if err := s.Spawn(ctx, "loop-x-2", "", nil, []string{"sleep", "600"}); err != nil {
		t.Errorf("spawn over a dead pane: %v", err)
	}
	if err := s.Kill(ctx, "loop-x-10"); err != nil {
		t.Fatal(err)
	}
	if err := s.Kill(ctx, "loop-x-10"); err != nil {
		t.Errorf("killing an absent session: %v", err)
	}
	names, err := s.Sessions(ctx)
	if err != nil || len(names) != 1 || names[0] != "loop-x-2" {
		t.Errorf("Sessions = %v, %v", names, err)
	}
}

// TestDeliverPastesInOneSequence: a prompt of several lines arrives whole
// and is submitted once, by one tmux command sequence; a dead pane is
// refused as missing and the server, with its other sessions, lives on
// (tmux 3.3 exits when asked to paste into a dead pane); an absent session
// is missing; no buffer is left behind.
func TestDeliverPastesInOneSequence(t *testing.T) {
	s := &Server{Socket: tmuxtest.Socket(t), RemainOnExit: true}
	ctx := context.Background()
	dir := t.TempDir()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Spawn(ctx, "loop-d-1", "", map[string]string{tmuxtest.EnvDir: dir, "PATH": os.Getenv("PATH")}, []string{exe}); err != nil {
		t.Fatal(err)
	}
	if err := s.Spawn(ctx, "loop-d-2", "", nil, []string{"true"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 10*time.Second, "the pane of loop-d-2 to die", func() bool { return s.Probe(ctx, "loop-d-2") == Dead })
	testkit.WaitWithin(t, 10*time.Second, "the stand-in to boot", func() bool { return len(tmuxtest.Boots(t, dir)) > 0 })
	prompt := "first line\nsecond; line;\n  third"
	if err := s.Deliver(ctx, "loop-d-1", prompt); err != nil {
		t.Fatalf("deliver to a live session: %v", err)
	}
	if err := s.Deliver(ctx, "loop-d-2", "lost?"); !errors.Is(err, ErrMissing) {
		t.Errorf("deliver to a dead pane: %v, want ErrMissing", err)
	}
	if err := s.Deliver(ctx, "loop-d-3", "nobody"); !errors.Is(err, ErrMissing) {
		t.Errorf("deliver to an absent session: %v, want ErrMissing", err)
	}
	if err := s.Deliver(ctx, "loop-d-1", "again"); err != nil {
		t.Fatalf("deliver after the refusals: %v (did the server survive the dead pane?)", err)
	}
	var got []string
	testkit.WaitWithin(t, 10*time.Second, "the stand-in to read two prompts", func() bool {
		got = got[:0]
		for _, in := range tmuxtest.Inputs(t, dir) {
			got = append(got, in.Text)
		}
		return len(got) >= 2
	})
	if diff := cmp.Diff([]string{prompt, "again"}, got); diff != "" {
		t.Errorf("what the session read (-want +got):\n%s", diff)
	}
	out, _, err := s.run(ctx, nil, "list-buffers", "-F", "#{buffer_name}")
	if err != nil || strings.TrimSpace(out) != "" {
		t.Errorf("buffers left behind: %q (%v)", out, err)
	}
}

// TestArgumentsEndingInSemicolon: tmux reads an argument ending in ';' as a
// command separator; a prompt ending in one must still arrive whole.
func TestArgumentsEndingInSemicolon(t *testing.T) {
	s := &Server{Socket: tmuxtest.Socket(t), RemainOnExit: true}
	out := filepath.Join(t.TempDir(), "argv")
	ctx := context.Background()
	err := s.Spawn(ctx, "loop-semi-1", "", nil, []string{"sh", "-c", `printf '%s|%s' "$0" "$1" > ` + out + `.tmp && mv ` + out + `.tmp ` + out + ` && sleep 600`, `end;`, `x\;`})
	if err != nil {
		t.Fatal(err)
	}
	var got []byte
	for i := 0; i < 1000; i++ {
		if got, err = os.ReadFile(out); err == nil {
			break
		}
		_ = exec.Command("sleep", "0.02").Run()
	}
	if string(got) != `end;|x\;` {
		t.Errorf("argv arrived as %q", got)
	}
}

func TestContains(t *testing.T) {
	const screen = "── typed ──\n- delivery: gh:abc-10\nmore   \n- delivery: slack:C1:1.2 \nend"
	for _, tt := range []struct {
		text string
		want bool
	}{
		{"- delivery: gh:abc-10", true},
		{"- delivery: gh:abc-1", false}, // a prefix of another id
		{"- delivery: slack:C1:1.2", true},
		{"end", true},
		{"more", true},
		{"- delivery: gh:abc", false},
		{"", false},
	} {
		if got := Contains(screen, tt.text); got != tt.want {
			t.Errorf("Contains(%q) = %v, want %v", tt.text, got, tt.want)
		}
	}
}

// waitFile waits for path to exist and returns its contents.
func waitFile(t *testing.T, path string) []byte {
	t.Helper()
	for i := 0; i < 3000; i++ {
		if b, err := os.ReadFile(path); err == nil {
			return b
		}
		_ = exec.Command("sleep", "0.02").Run()
	}
	t.Fatalf("%s was never written", path)
	return nil
}

// TestSpawnEnvironmentIsExactlyItsOwn: a session's command starts with the
// environment Spawn is given and nothing else, even on a tmux server an
// operator started from a shell full of secrets (a pane otherwise inherits
// the server's global environment).
func TestSpawnEnvironmentIsExactlyItsOwn(t *testing.T) {
	socket := tmuxtest.Socket(t)
	op := exec.Command("tmux", "-L", socket, "new-session", "-d", "-s", "operator", "--", "sleep", "600")
	op.Env = append(os.Environ(), "OPERATOR_SECRET=operator-secret-19ab")
	if out, err := op.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	if out, err := exec.Command("tmux", "-L", socket, "set-environment", "-g", "DIRTY_GLOBAL", "dirty").CombinedOutput(); err != nil {
		t.Fatalf("tmux set-environment: %v: %s", err, out)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "env.json")
	want := map[string]string{envDump: out, "PLAIN": "1", "SPACED": "a b", "TRAILING": "ends;", "EQUALS": "k=v"}
	s := &Server{Socket: socket, RemainOnExit: true}
	if err := s.Spawn(context.Background(), "loop-env-1", t.TempDir(), want, []string{exe}); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(waitFile(t, out), &got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the session's environment (-want +got):\n%s", diff)
	}
}

// TestServerStartsWithItsOwnEnvironment: a tmux server started by a
// Server's command keeps Server.Env as its global environment, not the
// caller's (the dispatcher's, with its bus credential).
func TestServerStartsWithItsOwnEnvironment(t *testing.T) {
	t.Setenv("DISPATCHER_SECRET", "dispatcher-secret-77c1")
	s := &Server{Socket: tmuxtest.Socket(t), Env: []string{"PATH=" + os.Getenv("PATH"), "KEEP=1"}}
	ctx := context.Background()
	if err := s.Spawn(ctx, "loop-env-2", "", nil, []string{"sleep", "600"}); err != nil {
		t.Fatal(err)
	}
	global, _, err := s.run(ctx, nil, "show-environment", "-g")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(global, "KEEP=1\n") || strings.Contains(global, "DISPATCHER_SECRET") {
		t.Errorf("the server's global environment:\n%s", global)
	}
}

func TestPasteable(t *testing.T) {
	for _, tt := range []struct{ name, in, want string }{
		{"plain text", "Please look at the parser.", "Please look at the parser."},
		{"tabs and newlines", "a\tb\nc\r\nd", "a\tb\nc\r\nd"},
		{"ordinary Unicode", "ünïcode — 日本語 🎉 \u00a0nbsp", "ünïcode — 日本語 🎉 \u00a0nbsp"},
		{"ESC", "a\x1bb", "ab"},
		{"the end of a bracketed paste", "text\x1b[201~rm -rf ~\r", "text[201~rm -rf ~\r"},
		{"an OSC title with BEL", "\x1b]0;pwned\x07x", "]0;pwnedx"},
		{"C1 CSI in UTF-8", "\u009b31mred", "31mred"},
		{"C1 NEL and OSC", "a\u0085b\u009dc", "abc"},
		{"a raw C1 byte", "a\x9b1m", "a\uFFFD1m"},
		{"DEL", "a\x7fb", "ab"},
		{"NUL", "a\x00b", "ab"},
		{"backspace, ^C, ^D, vertical tab, form feed", "a\bb\x03c\x04d\ve\ff", "abcdef"},
	} {
		if got := Pasteable(tt.in); got != tt.want {
			t.Errorf("%s: Pasteable(%q) = %q, want %q", tt.name, tt.in, got, tt.want)
		}
	}
}

// FuzzPasteable: whatever the text, what is pasted is valid UTF-8 with no
// control character a terminal acts on but tab, newline and carriage
// return; it is stable; and text without such characters is untouched.
func FuzzPasteable(f *testing.F) {
	for _, s := range []string{"", "plain", "a\x1b[201~b", "\u009b2J", "\x9b", "\x7f\x00\t\n\r", "ünï\u0085", "\xff\xfe\x1b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		out := Pasteable(in)
		if !utf8.ValidString(out) {
			t.Fatalf("Pasteable(%q) = %q: not valid UTF-8", in, out)
		}
		for _, r := range out {
			if r == '\t' || r == '\n' || r == '\r' {
				continue
			}
			if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f {
				t.Fatalf("Pasteable(%q) = %q keeps %U", in, out, r)
			}
		}
		if Pasteable(out) != out {
			t.Fatalf("Pasteable is not stable on %q", in)
		}
		clean := utf8.ValidString(in)
		for _, r := range in {
			if r != '\t' && r != '\n' && r != '\r' && (r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f) {
				clean = false
			}
		}
		if clean && out != in {
			t.Fatalf("Pasteable changed clean text %q to %q", in, out)
		}
	})
}

// TestLaunchStartsAndMarksTheServer: with a Launch, the spawn that starts
// the server runs tmux through it and marks the server, and later spawns
// use it; a server already running without the mark — started otherwise,
// so not confined — is refused (ErrUnconfined), and nothing is started in
// it.
func TestLaunchStartsAndMarksTheServer(t *testing.T) {
	ctx := context.Background()
	launched := filepath.Join(t.TempDir(), "launched")
	// The launcher records that it ran, then runs tmux as given.
	launcher := []string{"sh", "-c", `echo x >> "$0"; exec "$@"`, launched}
	s := &Server{Socket: tmuxtest.Socket(t), RemainOnExit: true, Launch: func() ([]string, error) { return launcher, nil }}
	for _, target := range []string{"loop-a-1", "loop-a-2"} {
		if err := s.Spawn(ctx, target, "", nil, []string{"sleep", "30"}); err != nil {
			t.Fatalf("spawn %s: %v", target, err)
		}
	}
	if b, _ := os.ReadFile(launched); strings.Count(string(b), "x") != 2 {
		t.Errorf("the launcher ran %d times, want once per spawn", strings.Count(string(b), "x"))
	}
	if out, _, err := s.run(ctx, nil, "show-options", "-gqv", sealOption); err != nil || strings.TrimSpace(out) != sealed {
		t.Errorf("the server's mark: %q (%v)", out, err)
	}

	plain := &Server{Socket: tmuxtest.Socket(t)}
	if err := plain.Spawn(ctx, "loop-b-1", "", nil, []string{"sleep", "30"}); err != nil {
		t.Fatal(err)
	}
	other := &Server{Socket: plain.Socket, Launch: s.Launch}
	err := other.Spawn(ctx, "loop-b-2", "", nil, []string{"sleep", "30"})
	if !errors.Is(err, ErrUnconfined) || !strings.Contains(err.Error(), "tmux -L "+plain.Socket+" kill-server") {
		t.Fatalf("a spawn into an unmarked server: %v, want ErrUnconfined naming how to end it", err)
	}
	if st := other.Probe(ctx, "loop-b-2"); st != Absent {
		t.Errorf("the refused session is %s", st)
	}
}

// TestServersPerSession: each target gets its own server on the socket
// named after it, in a directory Prepare makes private; a socket path too
// long for a unix socket is refused before tmux is asked.
func TestServersPerSession(t *testing.T) {
	dir := tmuxtest.Dir(t)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := &Servers{Dir: dir, RemainOnExit: true}
	ctx := context.Background()
	for _, target := range []string{"loop-x-1", "loop-x-2"} {
		if err := p.Spawn(ctx, target, "", nil, []string{"sleep", "600"}); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the socket directory after a spawn: %v (%v), want mode 700", fi.Mode(), err)
	}
	for _, target := range []string{"loop-x-1", "loop-x-2"} {
		names, err := (&Server{Path: filepath.Join(dir, target)}).Sessions(ctx)
		if err != nil || len(names) != 1 || names[0] != target {
			t.Errorf("the server on %s holds %v (%v)", target, names, err)
		}
	}
	if err := p.Kill(ctx, "loop-x-1"); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Sessions(ctx); err != nil || len(got) != 1 || got[0] != "loop-x-2" {
		t.Errorf("sessions after one was killed: %v (%v)", got, err)
	}
	long := "loop-" + strings.Repeat("x", 120)
	if err := p.Spawn(ctx, long, "", nil, []string{"sleep", "600"}); err == nil || !strings.Contains(err.Error(), "longer than") && !strings.Contains(err.Error(), "more than") {
		t.Errorf("a socket path too long: %v", err)
	}
}
