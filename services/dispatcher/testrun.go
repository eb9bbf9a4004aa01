package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/the-loop/bus/pkg/sessions"
)

// maxRunOutput bounds what of a test run's output is kept (its end).
const maxRunOutput = 64 << 10

// runTests runs a verify-tests command in sess's checkout with the session's
// own environment (less its endpoint and token: the tests are not the agent
// and have nothing to ask the loop), confined when sessions are sandboxed to
// what the session itself may reach: its workspace, the system, its harness's
// files and ports (docs/decisions/113-node-hooks.md). argv runs as it is, no
// shell. The run is its own process group, ended whole when ctx ends.
func (s *Service) runTests(ctx context.Context, sess *sessions.Session, argv []string, _ time.Duration) (string, error) {
	if sess == nil || sess.Cwd == "" || len(argv) == 0 {
		return "", errors.New("the session has no checkout to run its tests in")
	}
	env := s.sessionEnv(s.harness(), "")
	delete(env, EnvSessionToken)
	delete(env, EnvSessionURL)
	run := slices.Clone(argv)
	if !strings.Contains(run[0], "/") {
		if p := lookPathIn(run[0], env["PATH"]); p != "" {
			run[0] = p
		}
	}
	if s.sandboxed() {
		p := s.basePolicy(env)
		dir := sess.Workspace
		if dir == "" {
			dir = sess.Cwd
		}
		p.ReadWrite = append(p.ReadWrite, dir)
		root, err := filepath.Abs(s.set.Workspace.Root)
		if err != nil {
			return "", err
		}
		if err := s.checkPolicy(p, []string{filepath.Join(root, "items"), filepath.Join(root, "mirrors")}); err != nil {
			return "", fmt.Errorf("the tests cannot be confined: %w", err)
		}
		run = p.Command(s.loopBinary(), run)
	}
	cmd := exec.CommandContext(ctx, run[0], run[1:]...)
	cmd.Dir = sess.Cwd
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	out := &tailBuffer{max: maxRunOutput}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	return out.String(), err
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.ToValidUTF8(t.b.String(), "")
}
