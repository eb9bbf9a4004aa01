package tmux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// maxSocketPath is the longest path a unix socket may have (sun_path
// holds 108 bytes on Linux, 104 on the BSDs, one of them the final NUL).
const maxSocketPath = 103

// Servers are the loop's tmux servers, one per session: session target's
// server listens on the socket Dir/target. Sessions on one server can read
// and type into each other's panes, so none shares one; and a server that
// holds one session can run confined to that session's sandbox alone
// (docs/decisions/100-a-tmux-server-per-session.md). Every operation goes
// to the target's own socket; Sessions lists the directory.
type Servers struct {
	// Binary, Timeout, RemainOnExit and Env are each server's (see Server).
	Binary       string
	Timeout      time.Duration
	RemainOnExit bool
	Env          []string
	// Dir holds the sockets. Prepare makes it, 0700: whoever can open a
	// socket there can drive that session.
	Dir string
	// Launch, when set, gives the command target's server is started
	// through (Server.Launch): its session's sandbox.
	Launch func(target string) ([]string, error)
}

// Server is target's own server.
func (p *Servers) Server(target string) *Server {
	s := &Server{Binary: p.Binary, Path: p.Socket(target), Timeout: p.Timeout, RemainOnExit: p.RemainOnExit, Env: p.Env}
	if p.Launch != nil {
		s.Launch = func() ([]string, error) { return p.Launch(target) }
	}
	return s
}

// Socket is target's server's socket.
func (p *Servers) Socket(target string) string { return filepath.Join(p.Dir, target) }

// Available reports whether the tmux binary can be found and the socket
// directory is private to this user.
func (p *Servers) Available() error {
	if err := (&Server{Binary: p.Binary}).Available(); err != nil {
		return err
	}
	return p.Prepare()
}

// Prepare makes Dir (its missing parents too) with mode 0700, and refuses
// one that is not a directory of this user's, or that others may enter: a
// socket there would hand them its session.
func (p *Servers) Prepare() error {
	if p.Dir == "" || !filepath.IsAbs(p.Dir) {
		return fmt.Errorf("tmux: the socket directory %q is not an absolute path", p.Dir)
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return fmt.Errorf("tmux: socket directory: %w", err)
	}
	fi, err := os.Lstat(p.Dir)
	if err != nil {
		return fmt.Errorf("tmux: socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("tmux: the socket directory %s is not a directory", p.Dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("tmux: the socket directory %s belongs to another user (uid %d)", p.Dir, st.Uid)
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(p.Dir, 0o700); err != nil {
			return fmt.Errorf("tmux: socket directory: %w", err)
		}
	}
	return nil
}

// checkPath refuses a socket path longer than a unix socket's may be:
// tmux would fail with a less helpful message.
func (p *Servers) checkPath(target string) error {
	if n := len(p.Socket(target)); n > maxSocketPath {
		return fmt.Errorf("tmux: the socket %s is %d bytes long, more than a unix socket's path may be (%d): choose a shorter socket directory",
			p.Socket(target), n, maxSocketPath)
	}
	return nil
}

// Probe reports target's state on its own server.
func (p *Servers) Probe(ctx context.Context, target string) State {
	return p.Server(target).Probe(ctx, target)
}

// Spawn starts target on its own server (Server.Spawn). A server running on
// the socket that Launch did not start is a leftover, not the loop's: it is
// reported occupied too, so it is never used or replaced.
func (p *Servers) Spawn(ctx context.Context, target, cwd string, env map[string]string, argv []string) error {
	if err := p.checkPath(target); err != nil {
		return err
	}
	if err := p.Prepare(); err != nil {
		return err
	}
	err := p.Server(target).Spawn(ctx, target, cwd, env, argv)
	if errors.Is(err, ErrUnconfined) {
		return fmt.Errorf("%w: %w", ErrOccupied, err)
	}
	return err
}

// Deliver types prompt into target (Server.Deliver).
func (p *Servers) Deliver(ctx context.Context, target, prompt string) error {
	return p.Server(target).Deliver(ctx, target, prompt)
}

// Shows reports whether text stands in target's pane (Server.Shows).
func (p *Servers) Shows(ctx context.Context, target, text string) (bool, error) {
	return p.Server(target).Shows(ctx, target, text)
}

// Capture returns the end of target's pane (Server.Capture).
func (p *Servers) Capture(ctx context.Context, target string, lines int) (string, error) {
	return p.Server(target).Capture(ctx, target, lines)
}

// Sealed reports whether target's server was started through Launch.
func (p *Servers) Sealed(ctx context.Context, target string) (bool, error) {
	return p.Server(target).Sealed(ctx)
}

// Kill ends target's server, and with it the session and whatever else a
// leftover server held; its socket goes too. An absent server is not an
// error.
func (p *Servers) Kill(ctx context.Context, target string) error {
	s := p.Server(target)
	_, answered, err := s.run(ctx, nil, "kill-server")
	if err != nil && answered {
		err = nil // no server running
	}
	if err != nil {
		return fmt.Errorf("tmux: kill %s: %w", target, err)
	}
	// The server leaves its socket behind, and stops listening on it only
	// as it exits, a moment after it answered.
	for range 50 {
		if p.removeStale(target) {
			break
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// Sessions lists the sessions whose servers answer on the sockets in Dir:
// those named after their socket (a session of another name on a server
// there cannot be reached by its name). A socket whose server is gone is
// removed.
func (p *Servers) Sessions(ctx context.Context) ([]string, error) {
	entries, err := os.ReadDir(p.Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("tmux: socket directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		if e.Type()&os.ModeSocket == 0 {
			continue
		}
		name := e.Name()
		if p.removeStale(name) {
			continue
		}
		names, err := p.Server(name).Sessions(ctx)
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			if n == name {
				out = append(out, n)
			}
		}
	}
	return out, nil
}

// removeStale removes target's socket when no server listens on it, and
// reports whether it did (or there was none).
func (p *Servers) removeStale(target string) bool {
	path := p.Socket(target)
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		_ = c.Close()
		return false
	}
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return os.Remove(path) == nil
	}
	return false
}
