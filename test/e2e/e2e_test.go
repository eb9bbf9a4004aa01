//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

func build(t *testing.T, dir, out, pkg string) string {
	t.Helper()
	bin := filepath.Join(dir, out)
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, b)
	}
	return bin
}

// TestServiceProcessesAgainstNATSProcess starts a real nats-server process
// with JetStream and a ledger-writer process against it, checks the service
// becomes ready, is killed with SIGKILL and comes back, and that SIGTERM
// drains it with exit 0.
func TestServiceProcessesAgainstNATSProcess(t *testing.T) {
	dir := t.TempDir()
	loop := build(t, dir, "the-loop", "./cmd/the-loop")
	natsBin := build(t, dir, "nats-server", "github.com/nats-io/nats-server/v2")

	port := freePort(t)
	conf := filepath.Join(dir, "nats.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream { store_dir: %q, sync_interval: always }\n", port, filepath.Join(dir, "js"))), 0o600)
	nats := exec.Command(natsBin, "-c", conf)
	var natsOut buffer
	nats.Stdout, nats.Stderr = &natsOut, &natsOut
	if err := nats.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nats.Process.Kill(); nats.Wait() })
	waitFor(t, 20*time.Second, "nats-server to listen", func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	start := func() (*exec.Cmd, *buffer, string) {
		admin := freePort(t)
		cmd := exec.Command(loop, "serve", "ledger-writer")
		cmd.Env = append(os.Environ(),
			fmt.Sprintf("LOOP_NATS_URL=nats://127.0.0.1:%d", port),
			fmt.Sprintf("LOOP_ADMIN_ADDR=127.0.0.1:%d", admin),
			"LOOP_ENVELOPE_KEY="+strings.Repeat("e", 32),
		)
		var out buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		url := fmt.Sprintf("http://127.0.0.1:%d/readyz", admin)
		waitFor(t, 30*time.Second, "ledger-writer /readyz", func() bool {
			resp, err := http.Get(url)
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == 200
		})
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
