package observability

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// theLoopBinary builds the-loop once, from the repository root so that the
// workspace (go.work) selects the product module as `go run` does.
func theLoopBinary(t *testing.T) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "the-loop-observability-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "the-loop")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/the-loop")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = errors.New(err.Error() + "\n" + string(out))
		}
	})
	if binErr != nil {
		t.Fatalf("build the-loop: %v", binErr)
	}
	return binPath
}

// running is a `the-loop up` process.
type running struct {
	cmd      *exec.Cmd
	out, err *testkit.SyncBuffer
	done     chan error
	stopOnce sync.Once
}

var (
	adminRE = regexp.MustCompile(`admin on (http://\S+) `)
	natsRE  = regexp.MustCompile(`NATS on (nats://\S+)`)
)

// startUp runs `the-loop up` with env over this process's environment less
// its LOOP_ settings, and stops it (SIGINT, then a kill) when the test ends.
func startUp(t *testing.T, env map[string]string) *running {
	t.Helper()
	cmd := exec.Command(theLoopBinary(t), "up")
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOOP_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	r := &running{cmd: cmd, out: &testkit.SyncBuffer{}, err: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = r.out, r.err
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- cmd.Wait() }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop ends up as Ctrl-C does, once; on a failed test it logs up's output.
func (r *running) stop(t *testing.T) {
	r.stopOnce.Do(func() {
		_ = r.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-r.done:
		case <-time.After(40 * time.Second):
			t.Error("up did not stop on SIGINT")
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("up's output:\n%s\n%s", r.out.String(), tail(r.err.String(), 8000))
		}
	})
}

// printed waits for re in up's output and returns its first group.
func (r *running) printed(t *testing.T, what string, re *regexp.Regexp) string {
	t.Helper()
	var v string
	testkit.WaitWithin(t, 60*time.Second, what, func() bool {
		if m := re.FindStringSubmatch(r.out.String()); m != nil {
			v = m[1]
			return true
		}
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("up exited (%v) before printing %s:\n%s\n%s", err, what, r.out.String(), tail(r.err.String(), 8000))
		default:
		}
		return false
	})
	return v
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
