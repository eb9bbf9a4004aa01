// Package proc hosts agent sessions as child processes of the dispatcher, for
// hosts without tmux (the demo, a laptop without the package). It offers the
// same operations as package tmux, with the same meaning, so the dispatcher
// drives either: a session is a harness process whose standard input is a
// pipe, and delivering a prompt writes to that pipe exactly the bytes tmux
// would type — a bracketed paste of the text, then a carriage return.
//
// What tmux gives and this runner cannot: sessions outlive neither the
// dispatcher process nor its host, and nobody can attach to watch one. The
// dispatcher's reconcile treats a restart like a lost host, as it does for
// tmux sessions that vanished.
package proc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// Server is a set of sessions, each one child process.
type Server struct {
	// Output receives the sessions' standard output and error (default:
	// discarded; a stand-in harness writes its own records).
	Output io.Writer

	mu       sync.Mutex
	sessions map[string]*session
}

type session struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	done  chan struct{}
	// wmu orders writes: two deliveries to one session never interleave;
	// typed keeps the last prompts written, for Shows.
	wmu   sync.Mutex
	typed []string
}

// keepTyped bounds what a session remembers of its prompts.
const keepTyped = 64

func (s *session) exited() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// Available always succeeds: the runner needs nothing but the harness.
func (s *Server) Available() error { return nil }

func (s *Server) get(target string) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[target]
}

// Probe reports absent, dead (the process exited; kept, as tmux keeps a dead
// pane with remain-on-exit) or live.
func (s *Server) Probe(_ context.Context, target string) tmux.State {
	sess := s.get(target)
	switch {
	case sess == nil:
		return tmux.Absent
	case sess.exited():
		return tmux.Dead
	}
	return tmux.Live
}

// Spawn starts argv (argv[0] is the binary) as session target in cwd with
// exactly the environment env (none of the dispatcher's own). A live session
// of that name is never replaced (tmux.ErrOccupied); a dead one is cleared
// first.
func (s *Server) Spawn(_ context.Context, target, cwd string, env map[string]string, argv []string) error {
	if len(argv) == 0 {
		return errors.New("proc: spawn: empty command")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.sessions[target]; old != nil {
		if !old.exited() {
			return fmt.Errorf("%w: %s", tmux.ErrOccupied, target)
		}
		delete(s.sessions, target)
	}
	// Not CommandContext: the session outlives the request that spawned it.
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = cwd
	cmd.Env = []string{}
	for _, k := range slices.Sorted(maps.Keys(env)) {
		cmd.Env = append(cmd.Env, k+"="+env[k])
	}
	out := s.Output
	if out == nil {
		out = io.Discard
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so Kill ends whatever the harness started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("proc: spawn %s: %w", target, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("proc: spawn %s: %w", target, err)
	}
	sess := &session{cmd: cmd, stdin: stdin, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(sess.done)
	}()
	if s.sessions == nil {
		s.sessions = make(map[string]*session)
	}
	s.sessions[target] = sess
	return nil
}

// Deliver types prompt into target's harness as tmux does: a bracketed paste
// of the text with newlines as carriage returns (tmux's paste-buffer), then a
// separate carriage return, which submits.
func (s *Server) Deliver(_ context.Context, target, prompt string) error {
	sess := s.get(target)
	if sess == nil || sess.exited() {
		return fmt.Errorf("%w: %s", tmux.ErrMissing, target)
	}
	text := strings.ReplaceAll(strings.ReplaceAll(tmux.Pasteable(prompt), "\r\n", "\r"), "\n", "\r")
	sess.wmu.Lock()
	defer sess.wmu.Unlock()
	if _, err := io.WriteString(sess.stdin, "\x1b[200~"+text+"\x1b[201~\r"); err != nil {
		if sess.exited() {
			return fmt.Errorf("%w: %s", tmux.ErrMissing, target)
		}
		return fmt.Errorf("proc: deliver to %s: %w", target, err)
	}
	sess.typed = append(sess.typed, prompt)
	if len(sess.typed) > keepTyped {
		sess.typed = sess.typed[len(sess.typed)-keepTyped:]
	}
	return nil
}

// Shows reports whether text stands in a prompt written to target, as
// tmux.Contains reads a pane (the runner's counterpart of reading one).
func (s *Server) Shows(_ context.Context, target, text string) (bool, error) {
	sess := s.get(target)
	if sess == nil {
		return false, fmt.Errorf("%w: %s", tmux.ErrMissing, target)
	}
	sess.wmu.Lock()
	defer sess.wmu.Unlock()
	for _, p := range sess.typed {
		if tmux.Contains(p, text) {
			return true, nil
		}
	}
	return false, nil
}

// Capture returns the last lines lines of the prompts written to target:
// a process has no screen to read, so its transcript is what it was told.
func (s *Server) Capture(_ context.Context, target string, lines int) (string, error) {
	sess := s.get(target)
	if sess == nil {
		return "", fmt.Errorf("%w: %s", tmux.ErrMissing, target)
	}
	sess.wmu.Lock()
	all := strings.Split(strings.Join(sess.typed, "\n"), "\n")
	sess.wmu.Unlock()
	if lines > 0 && len(all) > lines {
		all = all[len(all)-lines:]
	}
	return tmux.Pasteable(strings.Join(all, "\n")), nil
}

// Kill ends target's process group and forgets the session. Killing an
// absent session is not an error.
func (s *Server) Kill(_ context.Context, target string) error {
	s.mu.Lock()
	sess := s.sessions[target]
	delete(s.sessions, target)
	s.mu.Unlock()
	if sess == nil {
		return nil
	}
	return stop(sess)
}

// stop closes the session's input, then ends its process group: SIGTERM,
// and SIGKILL if it is still there a few seconds later.
func stop(sess *session) error {
	_ = sess.stdin.Close()
	if sess.exited() {
		return nil
	}
	pid := sess.cmd.Process.Pid
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	select {
	case <-sess.done:
		return nil
	case <-time.After(5 * time.Second):
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("proc: kill %d: %w", pid, err)
	}
	<-sess.done
	return nil
}

// Sessions lists the sessions' names, live or dead.
func (s *Server) Sessions(context.Context) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.sessions)), nil
}

// Close ends every session: child processes cannot outlive the dispatcher
// the way tmux sessions do, and must not be left orphaned.
func (s *Server) Close() error {
	s.mu.Lock()
	all := s.sessions
	s.sessions = nil
	s.mu.Unlock()
	var errs []error
	for _, sess := range all {
		errs = append(errs, stop(sess))
	}
	return errors.Join(errs...)
}
