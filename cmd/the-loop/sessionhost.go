package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/the-loop/bus/internal/sessionhost"
	"github.com/the-loop/bus/pkg/config"
)

// cmdSessionHost is the bridge between a dispatcher and the agent sessions
// when they run in a container of their own, as another user
// (docs/decisions/101-sessions-in-their-own-container.md, package
// internal/sessionhost). Served, it is the sessions' container's
// entrypoint; `session-host tmux [--socket PATH] -- ARGS` is the dispatcher's side, the
// tmux binary it runs (LOOP_TMUX_BINARY, through a one-line wrapper).
func cmdSessionHost(ctx context.Context, args []string, _ config.Env, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "tmux" {
		return sessionHostTmux(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("session-host", stderr)
	h := sessionhost.Host{Log: slog.New(slog.NewJSONHandler(stderr, nil))}
	fs.StringVar(&h.Socket, "socket", sessionhost.DefaultSocket, "the unix socket to listen on, in the directory shared with the dispatcher")
	fs.StringVar(&h.TmuxDir, "tmux-dir", "/run/the-loop/tmux", "where the tmux servers' sockets are (each dispatcher replica's in a directory of its own)")
	fs.StringVar(&h.Tmux, "tmux", "tmux", "the tmux binary")
	fs.IntVar(&h.AllowUID, "allow-uid", 65532, "the dispatcher's uid: the only user served")
	home := fs.String("home", "", "the sessions' HOME, shared with the dispatcher (which writes the harness's workspace trust there): made group-writable")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: session-host [--socket PATH] [--tmux-dir DIR] [--tmux BIN] [--allow-uid UID] [--home DIR]", errUsage)
	}
	// The sessions and the dispatcher write one workspace as two users of
	// one group: what tmux and the sessions make stays the group's to
	// write.
	groupWritable()
	if *home != "" {
		if err := shareHome(*home); err != nil {
			return err
		}
	}
	h.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME"), "TERM=xterm-256color", "LANG=C.UTF-8"}
	return h.Serve(ctx)
}

// shareHome makes the sessions' HOME, and the Claude Code config in it,
// the group's to read and write: the dispatcher records the workspace
// trust there and keeps the mode it finds.
func shareHome(home string) error {
	if err := os.MkdirAll(home, 0o2770); err != nil {
		return fmt.Errorf("session host: HOME: %w", err)
	}
	// Made by the image or an earlier run: set the mode where this user
	// may (a directory it does not own keeps its own).
	_ = os.Chmod(home, 0o770|os.ModeSetgid)
	f, err := os.OpenFile(filepath.Join(home, ".claude.json"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
	switch {
	case err == nil:
		_, err = f.WriteString("{}\n")
		return errors.Join(err, f.Close())
	case errors.Is(err, os.ErrExist):
		return nil
	default:
		return fmt.Errorf("session host: %w", err)
	}
}

// sessionHostTmux forwards one tmux command to the session host and
// prints what tmux answered, exiting with its code (125: refused). An
// unreachable host
// is waited for (its container may be restarting) until the dispatcher's
// own tmux timeout ends this process: for the dispatcher, tmux did not
// answer — never that a session is gone.
func sessionHostTmux(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("session-host tmux", stderr)
	socket := fs.String("socket", sessionhost.DefaultSocket, "the session host's socket")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	args = fs.Args()
	stdin, err := io.ReadAll(io.LimitReader(os.Stdin, sessionhost.MaxRequest))
	if err != nil {
		return err
	}
	client, _ := os.Hostname()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := sessionhost.Forward(ctx, *socket, client, args, stdin)
		if err == nil {
			_, _ = stdout.Write(resp.Stdout)
			_, _ = stderr.Write(resp.Stderr)
			if resp.Exit != 0 {
				return &exitError{code: resp.Exit}
			}
			return nil
		}
		if resp.Refused != "" || errors.Is(err, sessionhost.ErrUnanswered) {
			return &exitError{code: 125, msg: "the-loop: " + err.Error()}
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return &exitError{code: 127, msg: "the-loop: " + err.Error()}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}
