// Package viahost tests the dispatcher's tmux driver, unchanged, driving
// sessions through the session host (internal/sessionhost) as it does when
// its sessions run in a container of their own: its tmux binary is a
// wrapper that forwards each command to a real host serving a real tmux
// (docs/decisions/101-sessions-in-their-own-container.md).
package viahost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/sessionhost"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// forwardVia, set, makes this test binary the dispatcher's tmux: it
// forwards its arguments and stdin to the session host at that socket, as
// `the-loop session-host tmux` does, and exits with tmux's code.
const forwardVia = "VIAHOST_FORWARD"

func TestMain(m *testing.M) {
	if sock := os.Getenv(forwardVia); sock != "" {
		stdin, _ := io.ReadAll(os.Stdin)
		resp, err := sessionhost.Forward(context.Background(), sock, "replica-1", os.Args[1:], stdin)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(125)
		}
		os.Stdout.Write(resp.Stdout)
		os.Stderr.Write(resp.Stderr)
		os.Exit(resp.Exit)
	}
	os.Exit(m.Run())
}

func TestDriverThroughTheSessionHost(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed")
	}
	dir, err := os.MkdirTemp("", "vh")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "host.sock")
	host := &sessionhost.Host{Socket: sock, TmuxDir: filepath.Join(dir, "tmux"), AllowUID: os.Getuid(),
		Env: []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "TERM=xterm"}, Log: slog.New(slog.DiscardHandler)}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- host.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-served
	})
	for i := 0; i < 100; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "tmux-wrapper")
	script := fmt.Sprintf("#!/bin/sh\n%s=%s exec %s \"$@\"\n", forwardVia, sock, self)
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	// Each session's server socket is a path in the host's tmux
	// directory (LOOP_TMUX_DIR): the dispatcher's copy of it stays empty.
	s := &tmux.Servers{Binary: wrapper, Dir: filepath.Join(dir, "tmux"), RemainOnExit: true, Env: []string{"PATH=" + os.Getenv("PATH")}}

	const target = "loop-github-o-r-1"
	if st := s.Probe(ctx, target); st != tmux.Absent {
		t.Fatalf("probe before spawn: %s", st)
	}
	if err := s.Spawn(ctx, target, dir, map[string]string{"PATH": os.Getenv("PATH")}, []string{"cat"}); err != nil {
		t.Fatalf("spawn through the host: %v", err)
	}
	if err := s.Spawn(ctx, target, dir, nil, []string{"cat"}); !errors.Is(err, tmux.ErrOccupied) {
		t.Errorf("a second spawn: %v, want ErrOccupied", err)
	}
	if err := s.Deliver(ctx, target, "a prompt typed through the host"); err != nil {
		t.Fatalf("deliver: %v", err)
	}
	shown := false
	for i := 0; i < 100 && !shown; i++ {
		shown, err = s.Shows(ctx, target, "host")
		time.Sleep(20 * time.Millisecond)
	}
	if !shown || err != nil {
		t.Errorf("the pane does not show the prompt: %v", err)
	}
	if names, err := s.Sessions(ctx); err != nil || len(names) != 0 {
		// Listed from the dispatcher's own directory: the sockets are
		// the host's.
		t.Errorf("sessions: %v %v", names, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "tmux", "replica-1", target)); err != nil {
		t.Errorf("the session's server socket is not under the replica's directory: %v", err)
	}
	if err := s.Kill(ctx, target); err != nil {
		t.Fatalf("kill: %v", err)
	}
	if st := s.Probe(ctx, target); st != tmux.Absent {
		t.Errorf("probe after kill: %s", st)
	}
	// The session ran where the host is: its server's socket was the
	// replica's own, under the host's tmux directory.
	if _, err := os.Stat(filepath.Join(dir, "tmux", "replica-1")); err != nil {
		t.Errorf("the tmux server was not the host's: %v", err)
	}
}
