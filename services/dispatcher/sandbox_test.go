package dispatcher

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/sandbox"
	"github.com/the-loop/bus/pkg/service"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
)

// maybeRunLoopVerb makes this test binary, installed as the-loop for a
// sandboxed session, answer the verbs such a session runs of it: sandbox
// (what the dispatcher wraps the harness in, as cmd/the-loop does), dial
// (a TCP connect, printing what came of it) and hook (the plugin's hooks:
// nothing to do here). Otherwise it returns.
func maybeRunLoopVerb() {
	if len(os.Args) < 2 || filepath.Base(os.Args[0]) != "the-loop" {
		return
	}
	switch os.Args[1] {
	case "sandbox":
		fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
		var p sandbox.Policy
		p.Flags(fs)
		if err := fs.Parse(os.Args[2:]); err != nil {
			os.Exit(2)
		}
		err := sandbox.Exec(p, fs.Args(), os.Environ())
		fmt.Fprintln(os.Stderr, "the-loop: sandbox:", err)
		os.Exit(1)
	case "dial":
		c, err := net.DialTimeout("tcp", os.Args[2], 5*time.Second)
		if err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
		c.Close()
		fmt.Println("connected")
		os.Exit(0)
	case "hook":
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
}

// TestSessionRunsSandboxed runs a session under LOOP_SESSION_SANDBOX=
// landlock for real: the dispatcher wraps the harness in `the-loop
// sandbox` and starts the tmux server confined. The obedient stand-in runs
// what a prompt-injected agent would try; it commits in its own worktree
// (git writing its mirror's objects and refs) and reaches its session
// endpoint, and is refused the store's operator seed, another work item's
// workspace, the other mirrors, the bus's port, another terminal of the
// user's, and the tmux server; which, asked from outside, is confined too.
func TestSessionRunsSandboxed(t *testing.T) {
	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v", sandbox.ABI(), err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	// the-loop: this test binary (maybeRunLoopVerb), copied where sessions
	// may run it, and the harness too (the stand-in).
	loopDir := t.TempDir()
	loop := filepath.Join(loopDir, "the-loop")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(loop, b, 0o755); err != nil {
		t.Fatal(err)
	}
	tmp, home, store := t.TempDir(), t.TempDir(), t.TempDir()
	records := filepath.Join(tmp, "standin")
	if err := os.MkdirAll(records, 0o700); err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(store, "nats", "operator.nk")
	if err := os.MkdirAll(filepath.Dir(seed), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(seed, []byte("SUAMOPERATORSEED\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	upstreams := t.TempDir()
	bareRepo(t, upstreams, "octo", "repo")
	// This package's tests read files of the repository as they start, the
	// stand-in (this binary) too: the operator's LOOP_SESSION_SANDBOX_READ.
	repo, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	var root, socket string
	e := newEnv(t, func(s *Settings) {
		root, socket = s.Workdir, filepath.Join(s.TmuxDir, tmux.Target("github:octo/repo#7"))
		h := standIn(t, records)
		h.Binary = loop
		h.Environment[standin.EnvObey] = "1"
		s.Harness = h
		s.LoopBinaryDir = loopDir
		s.Sandbox = SandboxLandlock
		s.SandboxHidden = []string{store}
		s.SandboxRead = []string{repo}
		s.SessionEnv = map[string]string{"PATH": "/usr/bin:/bin", "HOME": home, "TMPDIR": tmp}
		s.Workspace = WorkspaceConfig{Strategy: WorkspaceWorktree, URLTemplate: "file://" + upstreams + "/{owner}/{repo}.git"}
	})
	// Another work item's workspace, another repository's mirror.
	other := filepath.Join(root, "items", "github.com+octo+repo+999")
	for _, f := range []string{filepath.Join(other, "notes.md"), filepath.Join(root, "mirrors", "github.com", "octo", "secret.git", "config")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("not yours\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	natsAddr, err := url.Parse(e.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			pane, _ := exec.Command("tmux", "-S", socket, "capture-pane", "-p", "-S", "-", "-t", "="+tmux.Target("github:octo/repo#7")+":").CombinedOutput()
			t.Logf("the session's pane:\n%s\nthe dispatcher's log:\n%s", pane, e.logs.String())
		}
	})
	const ref = "github:octo/repo#7"
	e.publish(labeled(ref, "lab-7"), comment(ref, 70001, alice, "the-loop start"))
	e.waitRecord("session.spawned", map[string]any{"work_item": ref})
	endpoint, err := url.Parse(e.svc.sessionURL)
	if err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the sandboxed session's boot", func() bool {
		bs, _ := standin.ReadBoots(records)
		return len(bs) > 0
	})

	// A terminal of the user's, which a session must not read from or type
	// into.
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	// What the agent tries, each line printed with what came of it.
	script := fmt.Sprintf(`try() { name=$1; shift; if out=$("$@" 2>&1); then echo "$name: ok: $out"; else echo "$name: refused: $out"; fi; }
try "commit in its own worktree" sh -c 'echo probe > probe.txt && git add probe.txt && git -c user.name=a -c user.email=a@example.test commit -q -m probe && git log --oneline -1'
try "reach its session endpoint" the-loop dial %s
try "read the store's operator seed" cat %s
try "list another work item's workspace" ls %s
try "list the mirrors" ls %s
try "connect to the bus" the-loop dial %s
try "open another terminal of the user's" sh -c 'echo typed > %s'
try "have the tmux server read the seed" sh -c 'tmux -S %s run-shell "cat %s > %s 2>&1" && cat %s'
`, endpoint.Host, seed, other, filepath.Join(root, "mirrors"), natsAddr.Host, tty.Name(), socket, seed, filepath.Join(tmp, "leak"), filepath.Join(tmp, "leak"))
	probe := filepath.Join(loopDir, "probe.sh")
	if err := os.WriteFile(probe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	// "#": the rest of the line, as the prompt quotes it, is a comment.
	e.publish(comment(ref, 70002, alice, standin.RunMarker+"sh "+probe+" #"))
	var out string
	testkit.WaitFor(t, "the obedient session's attempts", func() bool {
		runs, _ := standin.ReadRuns(records)
		if len(runs) == 0 {
			return false
		}
		out = runs[0].Output
		return true
	})
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		name, result, _ := strings.Cut(l, ": ")
		got[name] = result
		t.Log(l)
	}
	for name, want := range map[string]string{
		"commit in its own worktree":          "ok: ",
		"reach its session endpoint":          "ok: connected",
		"read the store's operator seed":      "refused: cat: " + seed + ": Permission denied",
		"list another work item's workspace":  "refused: ls: cannot open directory '" + other + "': Permission denied",
		"list the mirrors":                    "refused: ls: cannot open directory",
		"connect to the bus":                  "connect: permission denied",
		"open another terminal of the user's": "refused: sh: 1: cannot create " + tty.Name() + ": Permission denied",
		"have the tmux server read the seed":  "refused: ",
	} {
		if !strings.HasPrefix(got[name], want) && !strings.Contains(got[name], want) {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	if strings.Contains(out, "SUAMOPERATORSEED") || strings.Contains(out, "not yours") {
		t.Errorf("the session read what is not its own:\n%s", out)
	}
	// The commit is on the work item's branch, in the shared mirror.
	sess := e.record(ref).Session
	if log := gitRun(t, "-C", sess.Cwd, "log", "--oneline", "-1"); !strings.Contains(log, "probe") {
		t.Errorf("the session's commit is not on its branch: %s", log)
	}
	// A session that reached the tmux server anyway (on a kernel before
	// Landlock ABI 9 no session can make a unix socket, from it Landlock
	// refuses the server's) would find it confined as well: asked here,
	// from outside every sandbox, it cannot read the seed either.
	leak := filepath.Join(tmp, "server-leak")
	if out, err := exec.Command("tmux", "-S", socket, "run-shell", "cat "+seed+" > "+leak+" 2>&1").CombinedOutput(); err != nil {
		t.Logf("tmux run-shell: %v %s", err, out)
	}
	if b, _ := os.ReadFile(leak); !strings.Contains(string(b), "Permission denied") {
		t.Errorf("the tmux server, asked to read the seed: %q", b)
	} else {
		t.Logf("the tmux server, asked to read the seed: %s", strings.TrimSpace(string(b)))
	}
	// The server sessions run in was started confined, and says so.
	mark, err := exec.Command("tmux", "-S", socket, "show-options", "-gqv", "@the-loop-sandbox").Output()
	if err != nil || strings.TrimSpace(string(mark)) != "confined" {
		t.Errorf("the tmux server's mark: %q (%v)", mark, err)
	}
	// And the argv the session runs is the harness's under the-loop sandbox.
	pane, err := exec.Command("tmux", "-S", socket, "list-panes", "-a", "-F", "#{pane_start_command}").Output()
	if err != nil || !strings.Contains(string(pane), loop+" sandbox --rw") {
		t.Errorf("the pane's command: %s (%v)", pane, err)
	}

	// A leftover in another work item's place, on a server not started in
	// the sandbox: reported, and never adopted — it would run unconfined.
	box := e.inbox()
	const left = "github:octo/repo#9"
	target := tmux.Target(left)
	if out, err := exec.Command("tmux", "-S", filepath.Join(filepath.Dir(socket), target), "new-session", "-d", "-s", target, "--", "sleep", "600").CombinedOutput(); err != nil {
		t.Fatalf("the leftover: %v %s", err, out)
	}
	e.publish(labeled(left, "lab-9"), comment(left, 70010, alice, "the-loop start"))
	e.waitRecord("dispatch.dropped", map[string]any{"work_item": left, "reason": DropSessionOccupied})
	e.inboxFind(box, "the unconfined leftover's report", func(ev *loopv1.Event) bool {
		return ev.GetSubject() == left && ev.GetType() == string(catalog.ConflictEscalated)
	})
	e.publish(comment(left, 70011, alice, "the-loop adopt"))
	e.waitRecord("control.rejected", map[string]any{"work_item": left, "command": "adopt", "reason": RejectLeftoverUnconfined})
}

// policyService is a Service with set's settings, enough to compute
// sessions' sandboxes without a bus.
func policyService(t *testing.T, set Settings) *Service {
	t.Helper()
	set.setDefaults()
	cfg := config.Default()
	return &Service{set: set, sessionURL: "http://127.0.0.1:8790",
		deps: service.Deps{Log: slog.New(slog.DiscardHandler), Config: func() *config.Config { return cfg }}}
}

// TestSessionSandboxPolicy: a session's sandbox gives it its own work
// item's directory, TMPDIR, /dev and its harness's state in HOME to write;
// the system's, the-loop's and the harness's directories to run; the
// plugin to read; the settings' ports and its endpoint's — and never the
// workspace root, the other work items' or the mirrors' parent, nor the
// store: a setting that would give it one of those is refused, and the
// session does not start. Off, or without the-loop's binary, argv is run
// as it is.
func TestSessionSandboxPolicy(t *testing.T) {
	root, home, tmp, loopDir := t.TempDir(), t.TempDir(), t.TempDir(), t.TempDir()
	store := filepath.Join(tmp, "store")
	env := map[string]string{"HOME": home, "TMPDIR": tmp, "PATH": "/usr/bin:/bin"}
	ws := &workspace.Workspace{Dir: filepath.Join(root, "items", "github.com+octo+repo+7")}
	set := Settings{Workdir: root, Workspace: WorkspaceConfig{Strategy: WorkspaceDir}, LoopBinaryDir: loopDir, Sandbox: SandboxLandlock,
		Harness: agent.Claude()}
	s := policyService(t, set)
	argv, err := s.confine([]string{"claude", "--session-id", "x", "prompt"}, env, ws)
	if err != nil {
		t.Fatal(err)
	}
	if argv[0] != filepath.Join(loopDir, "the-loop") || argv[1] != "sandbox" || !slices.Equal(argv[len(argv)-5:], []string{"--", "claude", "--session-id", "x", "prompt"}) {
		t.Fatalf("argv: %q", argv)
	}
	p, err := s.sessionPolicy(env, ws)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{ws.Dir, tmp, "/dev/null", "/dev/tty", filepath.Join(home, ".claude"), filepath.Join(home, ".claude.json"), filepath.Join(home, ".config")} {
		if !slices.Contains(p.ReadWrite, want) {
			t.Errorf("the session may not write %s: %q", want, p.ReadWrite)
		}
	}
	for _, want := range []string{"/usr", loopDir} {
		if !slices.Contains(p.Exec, want) {
			t.Errorf("the session may not run %s: %q", want, p.Exec)
		}
	}
	if !slices.Contains(p.ReadOnly, filepath.Join(root, ".the-loop", "plugin")) {
		t.Errorf("the session may not read its plugin: %q", p.ReadOnly)
	}
	if !slices.Equal(p.ConnectTCP, []uint16{22, 80, 443, 8790}) {
		t.Errorf("ports: %v, want the settings' and the endpoint's", p.ConnectTCP)
	}
	// The session's tmux server: that session's policy, its socket
	// directory and the terminals of its pane — never another workspace;
	// a socket directory a session could write is refused.
	sp, err := s.serverPolicy(env, ws)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sp.ReadWrite, ws.Dir) || !slices.Contains(sp.ReadWrite, s.set.TmuxDir) || !slices.Equal(sp.UnixSockets, []string{s.set.TmuxDir}) {
		t.Errorf("the server's policy: rw %q, unix %q", sp.ReadWrite, sp.UnixSockets)
	}
	for _, path := range sp.ReadWrite {
		if path == root || within(filepath.Join(root, "items"), path) && !within(path, ws.Dir) {
			t.Errorf("the session's server is given %s, which holds other work items", path)
		}
	}
	if _, err := policyService(t, Settings{Workdir: root, Workspace: WorkspaceConfig{Strategy: WorkspaceDir}, LoopBinaryDir: loopDir,
		Sandbox: SandboxLandlock, Harness: agent.Claude(), TmuxDir: filepath.Join(tmp, "tmux")}).serverPolicy(env, ws); err == nil {
		t.Error("a socket directory in TMPDIR, which sessions write, was accepted")
	}
	for _, set := range [][]string{p.ReadWrite, p.ReadOnly, p.Exec} {
		for _, path := range set {
			if within("/dev/pts", path) {
				t.Errorf("the session is given %s, which holds the user's other terminals", path)
			}
			if path == root || within(filepath.Join(root, "items"), path) || within(filepath.Join(root, "mirrors"), path) {
				t.Errorf("the session is given %s, which holds other work items", path)
			}
		}
	}

	for _, c := range []struct {
		name string
		mod  func(*Settings)
		env  map[string]string
		want string
	}{
		{"TMPDIR holds the store", func(s *Settings) { s.SandboxHidden = []string{store} }, env, "is the loop's own (its store)"},
		{"a write path inside the store", func(s *Settings) {
			s.SandboxHidden, s.SandboxWrite = []string{home}, []string{"~/.claude"}
		}, env, "is the loop's own"},
		{"HOME holds the workspace root", func(s *Settings) { s.SandboxWrite = []string{"~"} },
			map[string]string{"HOME": filepath.Dir(root), "TMPDIR": tmp}, "every work item's"},
	} {
		set := set
		c.mod(&set)
		_, err := policyService(t, set).confine([]string{"claude"}, c.env, ws)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}

	for name, mod := range map[string]func(*Settings){
		"off":                      func(s *Settings) { s.Sandbox = SandboxOff },
		"without the-loop":         func(s *Settings) { s.LoopBinaryDir = "" },
		"off, the store in TMPDIR": func(s *Settings) { s.Sandbox, s.SandboxHidden = SandboxOff, []string{store} },
	} {
		set := set
		mod(&set)
		argv, err := policyService(t, set).confine([]string{"claude", "x"}, env, ws)
		if err != nil || !slices.Equal(argv, []string{"claude", "x"}) {
			t.Errorf("%s: %q %v, want the argv as it is", name, argv, err)
		}
	}
}

// TestSandboxUnavailable: with landlock set, a kernel without Landlock, or
// the-loop's binary missing, keeps sessions from starting, and the reason
// (what /readyz and the log show) says how to run them anyway.
func TestSandboxUnavailable(t *testing.T) {
	loopDir := t.TempDir()
	s := policyService(t, Settings{Workdir: t.TempDir(), LoopBinaryDir: loopDir, Sandbox: SandboxLandlock})
	err := s.sandboxProblem()
	if err == nil || !strings.Contains(err.Error(), filepath.Join(loopDir, "the-loop")+", which is missing") {
		t.Errorf("without the-loop's binary: %v", err)
	}
	if err := os.WriteFile(filepath.Join(loopDir, "the-loop"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	s.sandboxSupported = func() error { return sandbox.ErrUnsupported }
	err = s.sandboxProblem()
	if err == nil || !strings.Contains(err.Error(), "this kernel cannot confine sessions") || !strings.Contains(err.Error(), "set LOOP_SESSION_SANDBOX=off") {
		t.Errorf("on a kernel without Landlock: %v", err)
	}
	s.set.Sandbox = SandboxOff
	if err := s.sandboxProblem(); err != nil {
		t.Errorf("off: %v", err)
	}
}
