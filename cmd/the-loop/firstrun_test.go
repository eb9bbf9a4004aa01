package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/sandbox"
	"github.com/the-loop/bus/services/dispatcher"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

// theLoopBinary builds the-loop once for the tests that run it as an
// operator would.
func theLoopBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "the-loop-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "the-loop")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("build: %v", binErr)
	}
	return binPath
}

// TestServeHelpListsItsOwnSettings: `serve <service> --help` lists what that
// service reads, and not the others' settings.
func TestServeHelpListsItsOwnSettings(t *testing.T) {
	for _, c := range []struct {
		service    string
		has, lacks []string
	}{
		{"ledger-writer", []string{"LOOP_GITHUB_TOKEN", "LOOP_ENVELOPE_KEY", "LOOP_GITHUB_APP_ID", "LOOP_NATS_URL"}, []string{"LOOP_SLACK_BOT_TOKEN", "LOOP_GITHUB_WEBHOOK_SECRET", "LOOP_TMUX_BINARY"}},
		{"slack-renderer", []string{"LOOP_SLACK_BOT_TOKEN", "LOOP_SLACK_POST_INTERVAL", "LOOP_ADMIN_ADDR"}, []string{"LOOP_GITHUB_TOKEN", "LOOP_ENVELOPE_KEY", "LOOP_SLACK_SIGNING_SECRET"}},
		{"ingress-github", []string{"LOOP_GITHUB_WEBHOOK_SECRET", "LOOP_GITHUB_MODE"}, []string{"LOOP_SLACK_BOT_TOKEN", "LOOP_GITHUB_WRITES_PER_HOUR"}},
		{"ingress-slack", []string{"LOOP_SLACK_SIGNING_SECRET", "LOOP_SLACK_APP_TOKEN"}, []string{"LOOP_GITHUB_TOKEN", "LOOP_SLACK_POST_INTERVAL"}},
		{"dispatcher", []string{"LOOP_TMUX_BINARY", "LOOP_HARNESS_BINARY", "LOOP_SESSION_ADDR", "LOOP_GITHUB_POLL_LABEL"}, []string{"LOOP_GITHUB_TOKEN", "LOOP_SLACK_BOT_TOKEN"}},
	} {
		code, out, stderr := runVerb(t, config.Env{}, "serve", c.service, "--help")
		if code != 0 || !strings.Contains(out, "Usage: the-loop serve "+c.service) {
			t.Errorf("serve %s --help: %d %s\n%s", c.service, code, stderr, out)
		}
		for _, k := range c.has {
			if !strings.Contains(out, k+" ") {
				t.Errorf("serve %s --help lacks %s", c.service, k)
			}
		}
		for _, k := range c.lacks {
			if strings.Contains(out, k+" ") {
				t.Errorf("serve %s --help lists %s, which it does not read", c.service, k)
			}
		}
	}
}

// TestUpOnATerminal runs `the-loop up` on a pseudo-terminal, as a new user
// would with nothing set up: its checklist names each missing setting or
// install step, and its logs are text, not JSON.
func TestUpOnATerminal(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := theLoopBinary(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "up")
	cmd.Dir = dir
	cmd.Env = append(filteredEnviron(), "LOOP_NATS_LISTEN=127.0.0.1:0", "LOOP_ADMIN_ADDR=127.0.0.1:0",
		"LOOP_SESSION_ADDR=127.0.0.1:0", "LOOP_STORE_DIR="+filepath.Join(dir, "store"), "LOOP_DISPATCHER_WORKDIR="+t.TempDir(),
		"LOOP_TMUX_BINARY="+filepath.Join(dir, "no-tmux-here"), "LOOP_HARNESS_BINARY="+filepath.Join(dir, "no-harness-here"))
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 200})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	defer cmd.Process.Kill()
	var mu sync.Mutex
	var out bytes.Buffer
	go func() {
		r := bufio.NewReader(tty)
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			mu.Lock()
			out.Write(buf[:n])
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	text := func() string { mu.Lock(); defer mu.Unlock(); return out.String() }
	testkit.WaitWithin(t, 60*time.Second, "up to start and log on the terminal", func() bool {
		s := text()
		return strings.Contains(s, "running ledger-writer") && strings.Contains(s, "level=")
	})
	s := text()
	for _, want := range []string{
		"✗ GitHub intake", "LOOP_GITHUB_WEBHOOK_SECRET",
		"✗ ledger writes", "LOOP_GITHUB_TOKEN", "LOOP_GITHUB_APP_ID",
		"✗ Slack", "LOOP_CONFIG",
		"✗ agent sessions", "LOOP_TMUX_BINARY", "LOOP_HARNESS_BINARY", "LOOP_DISPATCHER_RUNNER=process",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the checklist does not name %q", want)
		}
	}
	if strings.Contains(s, `{"time":`) {
		t.Error("up logged JSON on a terminal")
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("up after Ctrl-C: %v", err)
		}
	case <-time.After(40 * time.Second):
		t.Error("up did not stop after Ctrl-C")
	}
	if t.Failed() {
		t.Logf("terminal:\n%s", text())
	}
}

// TestChecklistReady: with everything set, every capability is ticked.
func TestChecklistReady(t *testing.T) {
	cfgPath := filepath.Join(t.TempDir(), "loop.yaml")
	if err := os.WriteFile(cfgPath, []byte("version: \"0.7.0\"\nchannels:\n  slack:\n    enabled: true\n    channel: C1\n    read:\n      mode: socket\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := loadSettings(config.Env{"LOOP_GITHUB_TOKEN": "t", "LOOP_GITHUB_WEBHOOK_SECRET": "s", "LOOP_CONFIG": cfgPath,
		"LOOP_SLACK_BOT_TOKEN": "xoxb-1", "LOOP_SLACK_APP_TOKEN": "xapp-1"})
	if err != nil {
		t.Fatal(err)
	}
	found := func(string) (string, error) { return "/bin/true", nil }
	var b bytes.Buffer
	printChecklist(&b, checklist(s, operatorConfig(s), found))
	if strings.Contains(b.String(), "✗") || strings.Count(b.String(), "✓") != 4 {
		t.Errorf("checklist with everything set:\n%s", b.String())
	}
	s.IngressSlack.AppToken = config.Secret{}
	b.Reset()
	printChecklist(&b, checklist(s, operatorConfig(s), found))
	if !strings.Contains(b.String(), "✗ Slack") || !strings.Contains(b.String(), "LOOP_SLACK_APP_TOKEN") {
		t.Errorf("checklist without the Slack app token:\n%s", b.String())
	}
}

// TestChecklistSandbox: under the session sandbox, a kernel that cannot
// confine sessions is a missing piece of "agent sessions", saying how to
// run them unconfined; with the sandbox off nothing is said of it.
func TestChecklistSandbox(t *testing.T) {
	found := func(string) (string, error) { return "/bin/true", nil }
	defer func(f func() error) { sandboxSupported = f }(sandboxSupported)
	sandboxSupported = func() error { return sandbox.ErrUnsupported }
	for _, c := range []struct {
		value string
		want  bool
	}{{dispatcher.SandboxLandlock, true}, {dispatcher.SandboxOff, false}} {
		s, err := loadSettings(config.Env{"LOOP_SESSION_SANDBOX": c.value})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		printChecklist(&b, checklist(s, operatorConfig(s), found))
		says := strings.Contains(b.String(), "✗ agent sessions") && strings.Contains(b.String(), "this kernel cannot confine sessions") &&
			strings.Contains(b.String(), "LOOP_SESSION_SANDBOX=off")
		if says != c.want {
			t.Errorf("LOOP_SESSION_SANDBOX=%s on a kernel without Landlock:\n%s", c.value, b.String())
		}
	}
}

// TestUpRefusesSandboxPortsWithTheBus: a sandbox that would let sessions
// connect to the bus's port is refused.
func TestUpRefusesSandboxPortsWithTheBus(t *testing.T) {
	s, err := loadSettings(config.Env{"LOOP_SESSION_SANDBOX": "landlock", "LOOP_SESSION_SANDBOX_PORTS": "443,4222"})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSandboxPorts(s, "nats://127.0.0.1:4222"); err == nil || !strings.Contains(err.Error(), "LOOP_SESSION_SANDBOX_PORTS holds 4222") {
		t.Errorf("the bus's port among the sandbox's: %v", err)
	}
	if err := checkSandboxPorts(s, "nats://127.0.0.1:4333"); err != nil {
		t.Errorf("another port: %v", err)
	}
	s.Dispatcher.SessionSandbox = dispatcher.SandboxOff
	if err := checkSandboxPorts(s, "nats://127.0.0.1:4222"); err != nil {
		t.Errorf("sandbox off: %v", err)
	}
}
