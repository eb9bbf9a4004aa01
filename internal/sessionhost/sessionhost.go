// Package sessionhost lets the dispatcher drive tmux in another container:
// the one the agent sessions run in, as another user, without the
// dispatcher's bus credential (docs/decisions/101-sessions-in-their-own-container.md).
//
// A tmux client run in the dispatcher's container would start the tmux
// server, and with it every session, there. Instead the Host runs in the
// sessions' container and listens on a unix socket in a directory the two
// containers share; it serves the dispatcher's user alone (the peer
// credential of each connection), runs the tmux command it is sent — only
// the commands the dispatcher uses — and answers with tmux's output and
// exit code. Forward is the dispatcher's side: `the-loop session-host tmux`,
// which the dispatcher runs as its tmux binary (LOOP_TMUX_BINARY), so the
// dispatcher's tmux driver is the same whether its sessions are local or
// not.
package sessionhost

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
)

// DefaultSocket is where the Host listens and Forward connects unless told
// otherwise: a directory both containers mount, and nothing else.
const DefaultSocket = "/run/the-loop/host/host.sock"

// MaxRequest bounds one request (a prompt pasted through load-buffer is
// the largest).
const MaxRequest = 8 << 20

// Request is one tmux command, sent as one JSON line.
type Request struct {
	// Client names the dispatcher replica (its hostname): each replica
	// gets tmux servers of its own, as it would in its own container, so
	// that one replica never lists, or kills, another's sessions.
	Client string `json:"client"`
	// Args are tmux's arguments, without the binary.
	Args  []string `json:"args"`
	Stdin []byte   `json:"stdin,omitempty"`
}

// Response is what tmux answered, or why the Host refused to ask it.
type Response struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Exit   int    `json:"exit"`
	// Refused is set, and tmux never ran, when the request was refused.
	Refused string `json:"refused,omitempty"`
}

// Host runs the dispatcher's tmux commands in this container.
type Host struct {
	// Socket is the unix socket it listens on (DefaultSocket when "").
	Socket string
	// TmuxDir holds the tmux servers' sockets: each client's under
	// TmuxDir/<client> (its TMUX_TMPDIR). A -S socket must name a path in
	// TmuxDir, and is put at that path under the client's directory.
	TmuxDir string
	// Tmux is the tmux binary ("tmux" when "").
	Tmux string
	// AllowUID is the only user a connection is served for: the
	// dispatcher's.
	AllowUID int
	// Env is the environment tmux runs with, TMUX_TMPDIR added: a server
	// it starts keeps it, and every pane's command is started by
	// `env -i` with its own.
	Env []string
	// Timeout bounds one tmux command (10s when 0).
	Timeout time.Duration
	Log     *slog.Logger
}

// Serve listens on h.Socket until ctx ends. The socket is made group
// read-write (the dispatcher reaches it through the group the two
// containers share); a stale socket of an earlier run is replaced.
func (h *Host) Serve(ctx context.Context) error {
	sock := h.socket()
	if err := os.MkdirAll(h.TmuxDir, 0o700); err != nil {
		return fmt.Errorf("session host: tmux directory: %w", err)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("session host: stale socket: %w", err)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		return fmt.Errorf("session host: listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(sock, 0o660); err != nil {
		ln.Close()
		return fmt.Errorf("session host: socket mode: %w", err)
	}
	h.log().Info("session host: listening", "socket", sock, "tmux_dir", h.TmuxDir, "allow_uid", h.AllowUID)
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		conn, err := ln.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("session host: accept: %w", err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close()
			h.serveConn(ctx, conn)
		}()
	}
}

// serveConn answers one request on conn, for the allowed user only.
func (h *Host) serveConn(ctx context.Context, conn *net.UnixConn) {
	uid, pid, err := peerCred(conn)
	if err != nil || uid != h.AllowUID {
		// Logged, not answered: a session that found the socket learns
		// nothing from it.
		h.log().Warn("session host: refused a connection: not the dispatcher's user",
			"peer_uid", uid, "peer_pid", pid, "allow_uid", h.AllowUID, "err", err)
		return
	}
	_ = conn.SetDeadline(time.Now().Add(h.timeout() + 10*time.Second))
	var req Request
	line, err := bufio.NewReader(io.LimitReader(conn, MaxRequest)).ReadBytes('\n')
	if err == nil {
		err = json.Unmarshal(line, &req)
	}
	var resp Response
	switch {
	case err != nil:
		resp.Refused = fmt.Sprintf("unreadable request: %v", err)
	default:
		resp = h.Run(ctx, req)
	}
	if resp.Refused != "" {
		h.log().Warn("session host: refused a command", "args", req.Args, "client", req.Client, "reason", resp.Refused)
	}
	_ = json.NewEncoder(conn).Encode(resp)
}

// Run validates req and runs it with tmux.
func (h *Host) Run(ctx context.Context, req Request) Response {
	if !clientName.MatchString(req.Client) || req.Client == "." || req.Client == ".." {
		return Response{Refused: fmt.Sprintf("client name %q: want letters, digits, '.', '_' or '-'", req.Client)}
	}
	if err := Validate(req.Args, h.TmuxDir); err != nil {
		return Response{Refused: err.Error()}
	}
	tmpdir := filepath.Join(h.TmuxDir, req.Client)
	args, err := h.clientSockets(req.Args, tmpdir)
	if err != nil {
		return Response{Refused: fmt.Sprintf("tmux directory: %v", err)}
	}
	ctx, cancel := context.WithTimeout(ctx, h.timeout())
	defer cancel()
	bin := h.Tmux
	if bin == "" {
		bin = "tmux"
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(withoutTmuxTmpdir(h.Env), "TMUX_TMPDIR="+tmpdir)
	cmd.Stdin = bytes.NewReader(req.Stdin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	resp := Response{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit) && ctx.Err() == nil:
		resp.Exit = exit.ExitCode()
	default:
		// Not answered (a timeout, no binary): as a tmux that could not
		// be asked, the client exits with 127's meaning, not a verdict.
		resp.Exit = 127
		resp.Stderr = append(resp.Stderr, []byte(fmt.Sprintf("session host: tmux: %v\n", err))...)
	}
	return resp
}

// clientSockets puts the client's tmux servers in its own directory,
// tmpdir: -L names and the default server through TMUX_TMPDIR, a -S path
// (Validate has it inside TmuxDir) by moving it under tmpdir, so that two
// replicas naming one socket still get a server each.
func (h *Host) clientSockets(args []string, tmpdir string) ([]string, error) {
	if err := os.MkdirAll(tmpdir, 0o700); err != nil {
		return nil, err
	}
	out := slices.Clone(args)
	for i := 0; i+1 < len(out) && strings.HasPrefix(out[i], "-"); i++ {
		switch out[i] {
		case "-L":
			i++
		case "-S":
			rel, err := filepath.Rel(filepath.Clean(h.TmuxDir), filepath.Clean(out[i+1]))
			if err != nil {
				return nil, err
			}
			out[i+1] = filepath.Join(tmpdir, rel)
			if err := os.MkdirAll(filepath.Dir(out[i+1]), 0o700); err != nil {
				return nil, err
			}
			i++
		}
	}
	return out, nil
}

func (h *Host) socket() string {
	if h.Socket == "" {
		return DefaultSocket
	}
	return h.Socket
}

func (h *Host) timeout() time.Duration {
	if h.Timeout <= 0 {
		return 10 * time.Second
	}
	return h.Timeout
}

func (h *Host) log() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

func withoutTmuxTmpdir(env []string) []string {
	var out []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TMUX_TMPDIR=") {
			out = append(out, kv)
		}
	}
	return out
}

var clientName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,64}$`)

// commands are the tmux commands the dispatcher's tmux driver runs, and
// the ones an operator's tooling reads with; nothing that runs a shell
// command of its own (run-shell, if-shell, a #() format), reads a file of
// the container (source-file, load-buffer of a path) or writes one
// (save-buffer, pipe-pane).
var commands = map[string]bool{
	"has-session": true, "list-panes": true, "list-sessions": true, "new-session": true,
	"kill-session": true, "kill-server": true, "set-option": true, "show-options": true,
	"load-buffer": true, "set-buffer": true, "paste-buffer": true, "delete-buffer": true, "capture-pane": true,
	"display-message": true,
}

// sealOption is the option a tmux server started inside the session
// sandbox carries (services/dispatcher/internal/tmux); this host starts no
// server in a sandbox, so it never lets one claim it.
const sealOption = "@the-loop-sandbox"

// Validate refuses tmux arguments the dispatcher never sends: global flags
// but -L, -S (inside tmuxDir), -u and -2; a command outside the list; a
// shell command in a format; load-buffer of anything but stdin; and
// marking a server as sandboxed (reading the mark is fine: no server here
// has it, so the dispatcher never takes one for confined).
func Validate(args []string, tmuxDir string) error {
	i := 0
	for ; i < len(args) && strings.HasPrefix(args[i], "-"); i++ {
		switch a := args[i]; a {
		case "-u", "-2":
		case "-L", "-S":
			if i+1 >= len(args) {
				return fmt.Errorf("tmux %s without a value", a)
			}
			i++
			v := args[i]
			if a == "-L" && (v == "" || strings.ContainsAny(v, "/\x00") || v == "." || v == "..") {
				return fmt.Errorf("tmux -L %q: a socket name, not a path", v)
			}
			if a == "-S" && !inside(v, tmuxDir) {
				return fmt.Errorf("tmux -S %q: the socket must be in %s", v, tmuxDir)
			}
		default:
			return fmt.Errorf("tmux flag %q is not one the dispatcher uses", a)
		}
	}
	if i == len(args) {
		return errors.New("no tmux command")
	}
	for _, cmd := range splitCommands(args[i:]) {
		if err := validateCommand(cmd); err != nil {
			return err
		}
	}
	return nil
}

// splitCommands splits a tmux command sequence where tmux does: at an
// argument that ends in an unescaped ';' (a bare ";" separates, "x;"
// ends a command with x); "\;" is data.
func splitCommands(args []string) [][]string {
	var out [][]string
	var cur []string
	for _, a := range args {
		if strings.HasSuffix(a, ";") && !strings.HasSuffix(a, `\;`) {
			if a != ";" {
				cur = append(cur, strings.TrimSuffix(a, ";"))
			}
			out = append(out, cur)
			cur = nil
			continue
		}
		cur = append(cur, a)
	}
	return append(out, cur)
}

func validateCommand(cmd []string) error {
	if len(cmd) == 0 {
		return errors.New("an empty tmux command")
	}
	name := cmd[0]
	if !commands[name] {
		return fmt.Errorf("tmux command %q is not one the dispatcher uses", name)
	}
	// A new session's own command follows "--": the dispatcher's to
	// choose, as it is in its own container. Before it, and in every
	// other command, a format must not run a shell command.
	opts := cmd[1:]
	if name == "new-session" {
		for j, a := range opts {
			if a == "--" {
				opts = opts[:j]
				break
			}
		}
	}
	for _, a := range opts {
		if strings.Contains(a, "#(") {
			return fmt.Errorf("tmux %s: a format that runs a shell command (%q)", name, a)
		}
		if (a == sealOption || strings.HasPrefix(a, sealOption)) && name != "show-options" {
			return fmt.Errorf("tmux %s %s: this host starts no tmux server in the session sandbox; keep LOOP_SESSION_SANDBOX off with a session host", name, sealOption)
		}
	}
	if name == "load-buffer" && (len(opts) == 0 || opts[len(opts)-1] != "-") {
		return errors.New("tmux load-buffer: only from stdin (-)")
	}
	return nil
}

// inside reports whether path, made absolute and clean, lies in dir.
func inside(path, dir string) bool {
	if dir == "" || !filepath.IsAbs(path) {
		return false
	}
	rel, err := filepath.Rel(filepath.Clean(dir), filepath.Clean(path))
	return err == nil && rel != "." && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// ErrUnanswered: the host took the connection and closed it without an
// answer, as it does for any user but the dispatcher's.
var ErrUnanswered = errors.New("closed unanswered: is this the dispatcher's user?")

// Forward sends args (and stdin) to the Host at socket as client and
// returns its answer. An error means it was not answered, or refused.
func Forward(ctx context.Context, socket, client string, args []string, stdin []byte) (Response, error) {
	if socket == "" {
		socket = DefaultSocket
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return Response{}, fmt.Errorf("session host %s: %w", socket, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	b, err := json.Marshal(Request{Client: client, Args: args, Stdin: stdin})
	if err != nil {
		return Response{}, err
	}
	if _, err := conn.Write(append(b, '\n')); err != nil {
		// Connected, then closed before the request was read.
		return Response{}, fmt.Errorf("session host %s: %w (%v)", socket, ErrUnanswered, err)
	}
	var resp Response
	if err := json.NewDecoder(io.LimitReader(conn, MaxRequest)).Decode(&resp); err != nil {
		return Response{}, fmt.Errorf("session host %s: %w (%v)", socket, ErrUnanswered, err)
	}
	if resp.Refused != "" {
		return resp, fmt.Errorf("session host refused: %s", resp.Refused)
	}
	return resp, nil
}
