package sessionhost

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink the host's goroutines and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startHost serves a Host for allowUID on a socket in a temporary
// directory, with real tmux; it returns the socket, the tmux directory and
// the host's log.
func startHost(t *testing.T, allowUID int) (sock, tmuxDir string, log *syncBuffer) {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	// Short paths: a unix socket's path is at most 107 bytes.
	dir, err := os.MkdirTemp("", "sh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock, tmuxDir = filepath.Join(dir, "host.sock"), filepath.Join(dir, "tmux")
	log = &syncBuffer{}
	h := &Host{Socket: sock, TmuxDir: tmuxDir, AllowUID: allowUID,
		Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TERM=xterm"},
		Log: slog.New(slog.NewJSONHandler(log, nil))}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	for range 100 {
		if _, err := os.Stat(sock); err == nil {
			return sock, tmuxDir, log
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the host never listened")
	return
}

func forward(t *testing.T, sock, client string, stdin []byte, args ...string) Response {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := Forward(ctx, sock, client, args, stdin)
	if err != nil {
		t.Fatalf("tmux %q: %v", args, err)
	}
	return resp
}

// The dispatcher's commands — new-session with a chained set-option, a
// probe, a paste from stdin, a capture, a listing, a kill — run on a real
// tmux server in this process's container, under the client's own
// directory, and come back with tmux's output and exit code.
func TestHostRunsTheDispatchersTmuxCommands(t *testing.T) {
	sock, tmuxDir, _ := startHost(t, os.Getuid())
	const client = "dispatcher-1"
	defer forward(t, sock, client, nil, "-L", "loop", "kill-server")

	if r := forward(t, sock, client, nil, "-L", "loop", "has-session", "-t", "=loop-x"); r.Exit == 0 {
		t.Fatalf("has-session of no server: exit 0")
	}
	r := forward(t, sock, client, nil, "-L", "loop", "new-session", "-d", "-s", "loop-x", "--",
		"env", "-i", "PATH="+os.Getenv("PATH"), "sh", "-c", `echo "started in $PWD"; exec cat`,
		";", "set-option", "-t", "=loop-x:", "-w", "remain-on-exit", "on")
	if r.Exit != 0 {
		t.Fatalf("new-session: exit %d: %s", r.Exit, r.Stderr)
	}
	if r := forward(t, sock, client, nil, "-L", "loop", "has-session", "-t", "=loop-x"); r.Exit != 0 {
		t.Fatalf("has-session after new-session: exit %d: %s", r.Exit, r.Stderr)
	}
	// The server's socket is under the client's own directory.
	if _, err := os.Stat(filepath.Join(tmuxDir, client, "tmux-"+itoa(os.Getuid()), "loop")); err != nil {
		t.Errorf("the tmux server's socket is not in the client's directory: %v", err)
	}
	// The dispatcher's Deliver: the pane read, then the paste as one sequence.
	if r := forward(t, sock, client, nil, "-L", "loop", "list-panes", "-t", "=loop-x:", "-F", "#{pane_active}:#{pane_dead}"); strings.TrimSpace(string(r.Stdout)) != "1:0" {
		t.Errorf("list-panes of a live pane: exit %d, %q", r.Exit, r.Stdout)
	}
	if r := forward(t, sock, client, []byte("hello through the host"), "-L", "loop", "load-buffer", "-b", "evt", "-", ";",
		"paste-buffer", "-p", "-d", "-b", "evt", "-t", "=loop-x:", ";", "set-buffer", "-b", "submit", "\r", ";",
		"paste-buffer", "-d", "-b", "submit", "-t", "=loop-x:"); r.Exit != 0 {
		t.Errorf("the paste: exit %d: %s", r.Exit, r.Stderr)
	}
	var screen string
	for range 100 {
		screen = string(forward(t, sock, client, nil, "-L", "loop", "capture-pane", "-p", "-J", "-S", "-", "-t", "=loop-x:").Stdout)
		if strings.Count(screen, "hello through the host") >= 2 { // typed, and cat's echo
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(screen, "started in") || strings.Count(screen, "hello through the host") < 2 {
		t.Errorf("the pane shows %q", screen)
	}
	if out := string(forward(t, sock, client, nil, "-L", "loop", "list-sessions", "-F", "#{session_name}").Stdout); strings.TrimSpace(out) != "loop-x" {
		t.Errorf("list-sessions: %q", out)
	}
	if r := forward(t, sock, client, nil, "-L", "loop", "kill-session", "-t", "=loop-x"); r.Exit != 0 {
		t.Errorf("kill-session: exit %d: %s", r.Exit, r.Stderr)
	}
}

// Two dispatcher replicas asking the same host get tmux servers of their
// own: neither lists the other's sessions (each kills what it finds that
// is not its own).
func TestHostKeepsReplicasApart(t *testing.T) {
	sock, _, _ := startHost(t, os.Getuid())
	for _, c := range []string{"replica-a", "replica-b"} {
		defer forward(t, sock, c, nil, "-L", "loop", "kill-server")
		if r := forward(t, sock, c, nil, "-L", "loop", "new-session", "-d", "-s", "loop-"+c, "--", "sleep", "60"); r.Exit != 0 {
			t.Fatalf("%s new-session: %s", c, r.Stderr)
		}
	}
	for _, c := range []string{"replica-a", "replica-b"} {
		out := strings.Fields(string(forward(t, sock, c, nil, "-L", "loop", "list-sessions", "-F", "#{session_name}").Stdout))
		if !slices.Equal(out, []string{"loop-" + c}) {
			t.Errorf("%s lists %q", c, out)
		}
	}
}

// A socket path (-S, one tmux server per session) names a path in the
// host's tmux directory; each replica's server is put under its own
// directory there, so two replicas naming the same path get one each.
func TestHostPutsSocketPathsUnderTheClient(t *testing.T) {
	sock, tmuxDir, _ := startHost(t, os.Getuid())
	path := filepath.Join(tmuxDir, "sessions", "loop-x.sock")
	for _, c := range []string{"replica-a", "replica-b"} {
		defer forward(t, sock, c, nil, "-S", path, "kill-server")
		if r := forward(t, sock, c, nil, "-S", path, "new-session", "-d", "-s", "loop-x", "--", "sleep", "60"); r.Exit != 0 {
			t.Fatalf("%s new-session -S %s: %s", c, path, r.Stderr)
		}
		if _, err := os.Stat(filepath.Join(tmuxDir, c, "sessions", "loop-x.sock")); err != nil {
			t.Errorf("%s's server is not under its own directory: %v", c, err)
		}
	}
	if _, err := os.Stat(path); err == nil {
		t.Errorf("a server listens at %s itself, shared by the replicas", path)
	}
}

// A connection from any user but the dispatcher's is refused unanswered,
// and logged with the peer's uid; tmux never runs.
func TestHostRefusesOtherUsers(t *testing.T) {
	sock, tmuxDir, log := startHost(t, os.Getuid()+1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := Forward(ctx, sock, "intruder", []string{"new-session", "-d", "-s", "x", "--", "true"}, nil)
	if !errors.Is(err, ErrUnanswered) {
		t.Fatalf("a user other than the allowed one: %v, want ErrUnanswered", err)
	}
	t.Logf("refused: %v", err)
	for range 50 {
		if strings.Contains(log.String(), "not the dispatcher's user") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(log.String(), `"peer_uid":`+itoa(os.Getuid())) {
		t.Errorf("the refusal is not logged with the peer's uid:\n%s", log)
	}
	if _, err := os.Stat(filepath.Join(tmuxDir, "intruder")); err == nil {
		t.Error("the refused request reached tmux")
	}
}

// A refused command comes back as an error naming why, and never runs.
func TestHostRefusesCommandsTheDispatcherNeverSends(t *testing.T) {
	sock, _, log := startHost(t, os.Getuid())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := Forward(ctx, sock, "d", []string{"run-shell", "touch /tmp/owned"}, nil)
	if err == nil || resp.Refused == "" || !strings.Contains(err.Error(), "run-shell") {
		t.Fatalf("run-shell: %+v %v", resp, err)
	}
	if _, err := Forward(ctx, sock, "../escape", []string{"list-sessions"}, nil); err == nil {
		t.Error("a client name with a path in it was served")
	}
	if !strings.Contains(log.String(), "refused a command") {
		t.Errorf("refusals are not logged:\n%s", log)
	}
}

func TestValidate(t *testing.T) {
	dir := "/run/the-loop/tmux"
	ok := [][]string{
		{"-L", "loop", "has-session", "-t", "=loop-x"},
		{"-S", dir + "/loop-x.sock", "list-panes", "-s", "-t", "=loop-x", "-F", "#{pane_dead}"},
		{"-L", "loop", "new-session", "-d", "-s", "x", "-c", "/workspace/items/x", "--", "env", "-i", "A=b", "sh", "-c", "echo #(not a format here)", "a\\;",
			";", "set-option", "-t", "=x:", "-w", "remain-on-exit", "on"},
		{"load-buffer", "-b", "evt", "-"},
		{"paste-buffer", "-p", "-d", "-b", "evt", "-t", "=x:"},
		{"list-panes", "-t", "=x:", "-F", "#{pane_active}:#{pane_dead}"},
		{"load-buffer", "-b", "evt", "-", ";", "paste-buffer", "-p", "-d", "-b", "evt", "-t", "=x:", ";",
			"set-buffer", "-b", "submit", "\r", ";", "paste-buffer", "-d", "-b", "submit", "-t", "=x:"},
		{"capture-pane", "-p", "-J", "-S", "-", "-t", "=x:"},
		{"list-sessions", "-F", "#{session_name}"},
		{"show-options", "-gqv", "@other"},
		{"show-options", "-gqv", "@the-loop-sandbox"},
		{"kill-session", "-t", "=x"},
		{"kill-server"},
	}
	for _, a := range ok {
		if err := Validate(a, dir); err != nil {
			t.Errorf("Validate(%q): %v", a, err)
		}
	}
	bad := map[string][]string{
		"shell flag":           {"-c", "touch /tmp/x"},
		"config file":          {"-f", "/tmp/evil.conf", "list-sessions"},
		"socket outside":       {"-S", "/tmp/other.sock", "list-sessions"},
		"socket escaping":      {"-S", dir + "/../x.sock", "list-sessions"},
		"socket name a path":   {"-L", "../x", "list-sessions"},
		"no command":           {"-L", "loop"},
		"run-shell":            {"run-shell", "id"},
		"chained run-shell":    {"has-session", "-t", "=x", ";", "run-shell", "id"},
		"joined separator":     {"has-session", "-t", "=x;", "run-shell", "id"},
		"if-shell":             {"if-shell", "true", "kill-server"},
		"source-file":          {"source-file", "/workspace/x.conf"},
		"load a file":          {"load-buffer", "-b", "x", "/etc/passwd"},
		"shell in a format":    {"list-sessions", "-F", "#(id)"},
		"shell before --":      {"new-session", "-d", "-s", "x", "-n", "#(id)", "--", "true"},
		"claims the sandbox":   {"set-option", "-g", "@the-loop-sandbox", "confined"},
		"chained seal":         {"new-session", "-d", "-s", "x", "--", "true", ";", "set-option", "-g", "@the-loop-sandbox", "confined"},
		"pipe-pane":            {"pipe-pane", "-t", "=x:", "cat > /tmp/x"},
		"attach (interactive)": {"attach-session", "-t", "=x"},
	}
	for name, a := range bad {
		if err := Validate(a, dir); err == nil {
			t.Errorf("%s: Validate(%q) accepted it", name, a)
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
