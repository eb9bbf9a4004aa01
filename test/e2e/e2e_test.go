//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
)

// TestMain makes this test binary the stand-in agent harness when the
// dispatcher starts it in tmux (package tmuxtest), the attacker program when
// an obedient session runs it (envAttack), and removes the built binaries
// after the run.
func TestMain(m *testing.M) {
	if mode := os.Getenv(envAttack); mode != "" {
		// Inside an agent session (so before the stand-in check: the
		// session's environment names the stand-in's directory).
		os.Exit(runAttacker(mode, os.Stdout))
	}
	if dir := os.Getenv(envBootMark); dir != "" {
		if err := markBoot(dir, os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "boot mark:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	tmuxtest.MaybeRunStandIn()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// envBootMark makes this binary write a boot marker and exit: the harness
// wrapper runs it so before the stand-in, so that boots and typed prompts
// share one file and one order.
const envBootMark = "E2E_BOOT_MARK"

// bootPrefix marks a boot line in the stand-in's inputs file.
const bootPrefix = "boot:"

// markBoot appends the boot prompt (the last argument) to the stand-in's
// inputs file as an Input whose session id starts with bootPrefix.
func markBoot(dir string, args []string) error {
	id := ""
	for i := 0; i+1 < len(args); i++ {
		if args[i] == "--session-id" || args[i] == "--resume" {
			id = args[i+1]
		}
	}
	prompt := ""
	if len(args) > 0 {
		prompt = args[len(args)-1]
	}
	return standin.RecordInput(dir, standin.Input{SessionID: bootPrefix + id, Text: prompt})
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestServiceProcessesAgainstNATSProcess starts a real nats-server process
// with JetStream and a ledger-writer process against it, checks the service
// becomes ready, is killed with SIGKILL and comes back, and that SIGTERM
// drains it with exit 0.
func TestServiceProcessesAgainstNATSProcess(t *testing.T) {
	dir := t.TempDir()
	loop, natsBin := binaries(t)

	port := freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q, sync_interval: always }\n", port, filepath.Join(dir, "js"))), 0o600)
	nats := exec.Command(natsBin, "-c", conf)
	var natsOut testkit.SyncBuffer
	nats.Stdout, nats.Stderr = &natsOut, &natsOut
	if err := nats.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nats.Process.Kill(); nats.Wait() })
	testkit.WaitWithin(t, 20*time.Second, "nats-server to listen", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	// The streams and consumers, as an operator provisions them.
	provision := exec.Command(loop, "provision")
	provision.Env = append(baseEnv(), fmt.Sprintf("LOOP_NATS_URL=nats://127.0.0.1:%d", port))
	if out, err := provision.CombinedOutput(); err != nil {
		t.Fatalf("the-loop provision: %v\n%s", err, out)
	}

	// The ledger-writer is ready only with a GitHub token to record with.
	gh := ghfake.New(t)
	gh.AddToken(ledgerToken, ledgerLogin)
	start := func() (*exec.Cmd, *testkit.SyncBuffer, string) {
		admin := freePort(t)
		cmd := exec.Command(loop, "serve", "ledger-writer")
		cmd.Env = append(baseEnv(),
			fmt.Sprintf("LOOP_NATS_URL=nats://127.0.0.1:%d", port),
			fmt.Sprintf("LOOP_ADMIN_ADDR=127.0.0.1:%d", admin),
			"LOOP_ENVELOPE_KEY="+strings.Repeat("e", 32),
			"LOOP_GITHUB_TOKEN="+ledgerToken,
			"LOOP_GITHUB_LOGIN="+ledgerLogin,
			"LOOP_GITHUB_API_URL="+gh.URL(),
		)
		var out testkit.SyncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", admin)
		deadline := time.Now().Add(120 * time.Second)
		for {
			resp, err := http.Get(url)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("ledger-writer /readyz answers %d: %s\n%s", resp.StatusCode, body, out.String())
				}
			} else if time.Now().After(deadline) {
				t.Fatalf("ledger-writer /readyz: %v\n%s", err, out.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		return cmd, &out, url
	}

	first, _, _ := start()
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()

	second, out, _ := start()
	if err := second.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- second.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("ledger-writer exited %v after SIGTERM\n%s", err, out.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("ledger-writer did not drain after SIGTERM")
	}
}
