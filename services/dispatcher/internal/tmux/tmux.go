// Package tmux drives the tmux server that hosts agent sessions, with exactly
// the commands of the original's runner (docs/requirements.md K13): probe with
// has-session and list-panes, spawn with new-session -d, deliver with a
// bracketed paste-buffer followed by an unbracketed carriage return, kill with
// kill-session. It never uses send-keys: that fails while a read-only client
// is attached (docs/requirements.md K12).
//
// Every command runs against one tmux server, chosen by its socket's path
// (-S) or name (-L), so a test never touches a user's server. The loop
// itself runs a server per session (Servers): each session's socket in one
// private directory, named after it, so no session shares a server, and with
// it its panes, with another (docs/decisions/100-a-tmux-server-per-session.md).
package tmux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// State is what a probe found.
type State int

// Probe outcomes. Unknown means tmux did not answer (timeout, no binary): for
// delivery it counts as live, for spawning as occupied
// (docs/requirements.md K12).
const (
	Absent State = iota
	Dead
	Live
	Unknown
)

func (s State) String() string {
	return [...]string{"absent", "dead", "live", "unknown"}[s]
}

// LiveOrUnknown reports whether s must be treated as a running session.
func (s State) LiveOrUnknown() bool { return s == Live || s == Unknown }

// Errors a caller tells apart.
var (
	// ErrOccupied: the name is held by a live (or unanswering) session, so
	// a spawn refuses rather than replace it.
	ErrOccupied = errors.New("tmux: session name occupied by a live session")
	// ErrMissing: delivery found no live session to paste into.
	ErrMissing = errors.New("tmux: session missing or dead")
	// ErrUnconfined: the server runs, and was not started through
	// Server.Launch; Spawn refuses to start a session in it.
	ErrUnconfined = errors.New("tmux: the server was not started in the session sandbox")
)

// sealOption is the server option a server started through Server.Launch
// carries, set to sealed.
const sealOption, sealed = "@the-loop-sandbox", "confined"

// deliveries numbers this process's deliveries, for their buffers' names.
var deliveries atomic.Uint64

// Server is one tmux server.
type Server struct {
	// Binary is the tmux executable (default "tmux").
	Binary string
	// Path is the server's socket (-S); when set, Socket is not used.
	Path string
	// Socket is the -L socket name; "" (and no Path) uses tmux's default
	// server.
	Socket string
	// Timeout bounds one tmux command (default 10s, the original's probe
	// timeout).
	Timeout time.Duration
	// RemainOnExit keeps a pane whose harness exited, so a probe reports
	// it dead rather than absent and its last screen stays readable.
	RemainOnExit bool
	// Env is the environment tmux itself runs with ("KEY=value"; nil: the
	// caller's). A tmux server started by one of these commands keeps it as
	// its global environment, so it must hold nothing a session must not
	// see.
	Env []string
	// Launch, when set, gives the command (and its arguments) put before
	// the tmux command that can start the server (Spawn's new-session), so
	// that a server it starts runs confined — `the-loop sandbox …` — and
	// with it every pane; nil: none. The same command marks the server
	// (its option @the-loop-sandbox), and Spawn refuses a running server
	// without the mark (ErrUnconfined): one started otherwise, which a
	// confined session could ask to run a command outside its sandbox.
	Launch func() ([]string, error)
}

// flag is how a person names this server on tmux's command line.
func (s *Server) flag() string {
	switch {
	case s.Path != "":
		return "-S " + s.Path
	case s.Socket != "":
		return "-L " + s.Socket
	}
	return "-L default"
}

// Sealed reports whether the running server was started through Launch
// (it carries the mark); false when no server runs.
func (s *Server) Sealed(ctx context.Context) (bool, error) {
	out, answered, err := s.run(ctx, nil, "show-options", "-gqv", sealOption)
	switch {
	case !answered:
		return false, fmt.Errorf("tmux: is the server confined: %w", err)
	case err != nil:
		return false, nil
	}
	return strings.TrimSpace(out) == sealed, nil
}

func (s *Server) bin() string {
	if s.Binary == "" {
		return "tmux"
	}
	return s.Binary
}

// Available reports whether the tmux binary can be found.
func (s *Server) Available() error {
	if _, err := exec.LookPath(s.bin()); err != nil {
		return fmt.Errorf("tmux not found (%s): install the tmux package", s.bin())
	}
	return nil
}

// run executes one tmux command. answered is false when tmux could not be
// asked or did not answer in time; err is non-nil on a non-zero exit too.
func (s *Server) run(ctx context.Context, stdin []byte, args ...string) (out string, answered bool, err error) {
	return s.runVia(ctx, nil, stdin, args...)
}

// runVia is run with launch (a command and its arguments) put before tmux.
func (s *Server) runVia(ctx context.Context, launch []string, stdin []byte, args ...string) (out string, answered bool, err error) {
	t := s.Timeout
	if t <= 0 {
		t = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, t)
	defer cancel()
	full := args
	switch {
	case s.Path != "":
		full = append([]string{"-S", s.Path}, args...)
	case s.Socket != "":
		full = append([]string{"-L", s.Socket}, args...)
	}
	cmd := exec.CommandContext(ctx, s.bin(), full...)
	if len(launch) > 0 {
		cmd = exec.CommandContext(ctx, launch[0], append(append(launch[1:len(launch):len(launch)], s.bin()), full...)...)
	}
	cmd.Env = s.Env
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) && ctx.Err() == nil {
			return stdout.String(), true, fmt.Errorf("tmux %s: %s", args[0], strings.TrimSpace(stderr.String()))
		}
		return "", false, fmt.Errorf("tmux %s: %w", args[0], err)
	}
	return stdout.String(), true, nil
}

// Probe reports the state of target: has-session, then list-panes — any pane
// not dead means live; all dead means dead; an unreadable answer means live.
func (s *Server) Probe(ctx context.Context, target string) State {
	_, answered, err := s.run(ctx, nil, "has-session", "-t", exact(target))
	if !answered {
		return Unknown
	}
	if err != nil {
		return Absent
	}
	out, answered, err := s.run(ctx, nil, "list-panes", "-s", "-t", exact(target), "-F", "#{pane_dead}")
	if !answered || err != nil {
		return Live
	}
	lines := strings.Fields(out)
	if len(lines) == 0 {
		return Live
	}
	for _, l := range lines {
		if l != "1" {
			return Live
		}
	}
	return Dead
}

// exact makes target match only the session of that exact name: tmux
// otherwise accepts a unique prefix, and "loop-x-1" would find "loop-x-10".
func exact(target string) string { return "=" + target }

// window is the exact target of the session's current window (and its active
// pane), for the commands that take a window or pane target.
func window(target string) string { return "=" + target + ":" }

// Spawn starts argv (argv[0] is the binary) in a new detached session target
// with working directory cwd and exactly the environment env. It never
// replaces a live or unanswering session (ErrOccupied); a dead one is killed
// first.
//
// The command runs under `env -i`: a pane otherwise inherits the tmux
// server's global environment, which is whatever environment started the
// server — on the default server, an operator's shell with its tokens.
func (s *Server) Spawn(ctx context.Context, target, cwd string, env map[string]string, argv []string) error {
	if len(argv) == 0 {
		return errors.New("tmux: spawn: empty command")
	}
	if strings.Contains(argv[0], "=") {
		return fmt.Errorf("tmux: spawn: the command %q contains '=', which env would read as a variable", argv[0])
	}
	var launch []string
	if s.Launch != nil {
		var err error
		if launch, err = s.Launch(); err != nil {
			return fmt.Errorf("tmux: spawn %s: %w", target, err)
		}
	}
	if err := s.confined(ctx, launch); err != nil {
		return err
	}
	if err := s.clear(ctx, target, false); err != nil {
		return err
	}
	args := []string{"new-session", "-d", "-s", target}
	if cwd != "" {
		args = append(args, "-c", cwd)
	}
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args = append(args, "--", "env", "-i")
	for _, k := range keys {
		args = append(args, k+"="+env[k])
	}
	args = append(args, argv...)
	for i, a := range args {
		args[i] = escapeArg(a)
	}
	if s.RemainOnExit {
		// Chained in the same tmux invocation: the server runs the whole
		// command list before it reaps a child, so even a harness that
		// exits at once leaves a dead pane rather than no session.
		args = append(args, ";", "set-option", "-t", window(target), "-w", "remain-on-exit", "on")
	}
	if len(launch) > 0 {
		args = append(args, ";", "set-option", "-g", sealOption, sealed)
	}
	_, _, err := s.runVia(ctx, launch, nil, args...)
	if err != nil && strings.Contains(err.Error(), "duplicate session") {
		// Someone created it between the clear and now: clear again, this
		// time treating an unanswered probe as occupied, and retry once.
		if cerr := s.clear(ctx, target, true); cerr != nil {
			return cerr
		}
		_, _, err = s.runVia(ctx, launch, nil, args...)
	}
	if err != nil {
		return fmt.Errorf("tmux: spawn %s: %w", target, err)
	}
	return nil
}

// confined refuses (ErrUnconfined) a running server that launch did not
// start, when there is a launch; no server running is fine: Spawn's
// new-session starts it confined.
func (s *Server) confined(ctx context.Context, launch []string) error {
	if len(launch) == 0 {
		return nil
	}
	out, answered, err := s.run(ctx, nil, "show-options", "-gqv", sealOption)
	switch {
	case !answered:
		return fmt.Errorf("tmux: is the server confined: %w", err)
	case err != nil:
		return nil // no server running
	case strings.TrimSpace(out) != sealed:
		return fmt.Errorf("%w: end it (tmux %s kill-server; its sessions resume at their next event) and the next spawn starts it confined", ErrUnconfined, s.flag())
	}
	return nil
}

// clear makes the name free: absent is free, live is refused, dead is killed.
func (s *Server) clear(ctx context.Context, target string, unknownOccupied bool) error {
	switch s.Probe(ctx, target) {
	case Absent:
		return nil
	case Live:
		return fmt.Errorf("%w: %s", ErrOccupied, target)
	case Unknown:
		if unknownOccupied {
			return fmt.Errorf("%w: %s (tmux did not answer)", ErrOccupied, target)
		}
		return nil // let new-session decide
	}
	if err := s.Kill(ctx, target); err != nil && s.Probe(ctx, target) != Absent {
		return fmt.Errorf("tmux: clear dead session %s: %w", target, err)
	}
	return nil
}

// Deliver types prompt into target's harness: a bracketed paste of the text
// (so newlines do not submit it line by line), then a separate unbracketed
// carriage return, which submits. The buffers are named after the target and
// the delivery (process and a counter), so two deliveries at once — to two
// sessions, or a redelivery racing its original to one — never paste or
// delete each other's buffer.
//
// It is two tmux clients, where it was six: each is a process start of a
// few milliseconds on the path of every prompt (docs/performance.md). The
// first reads whether the pane it pastes into still runs its program — tmux
// 3.3 exits, taking every session with it, when asked to paste into a dead
// pane — and the second is the paste as one command sequence. A session
// that is absent, or whose pane is dead, is ErrMissing.
func (s *Server) Deliver(ctx context.Context, target, prompt string) error {
	out, answered, err := s.run(ctx, nil, "list-panes", "-t", window(target), "-F", "#{pane_active}:#{pane_dead}")
	switch {
	case answered && err != nil:
		// No such session, or no server running.
		return fmt.Errorf("%w: %s", ErrMissing, target)
	case answered && slices.Contains(strings.Fields(out), "1:1"):
		// The active pane, which the paste goes to, is dead.
		return fmt.Errorf("%w: %s (its program has ended)", ErrMissing, target)
	}
	// Unanswered: the paste below says whether tmux is there at all.
	n := fmt.Sprintf("%s-%d-%d", target, os.Getpid(), deliveries.Add(1))
	evt, submit := "the-loop-evt-"+n, "the-loop-submit-"+n
	if _, _, err := s.run(ctx, []byte(Pasteable(prompt)),
		"load-buffer", "-b", evt, "-", ";",
		"paste-buffer", "-p", "-d", "-b", evt, "-t", window(target), ";",
		"set-buffer", "-b", submit, "\r", ";",
		"paste-buffer", "-d", "-b", submit, "-t", window(target)); err != nil {
		return fmt.Errorf("tmux: deliver to %s: %w", target, err)
	}
	return nil
}

// Pasteable is text as it may be pasted into a session: without ESC and the
// other control characters a terminal acts on (C0 but tab and newline, DEL,
// and C1, which some terminals read as CSI). Inside a bracketed paste an
// ESC[201~ would end the paste early and the rest would arrive as typed
// keys: text from anyone on GitHub must never get that far.
func Pasteable(text string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return r
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f:
			return -1
		}
		return r
	}, text)
}

// Shows reports whether text stands in target's pane, its scrollback
// included (lines tmux wrapped are joined), ending a line or followed by a
// space: "id-1" is not found in "id-10". After a crash between a paste and
// its record, the dispatcher asks this to tell a prompt the harness received
// (and shows) from one it never got.
func (s *Server) Shows(ctx context.Context, target, text string) (bool, error) {
	out, _, err := s.run(ctx, nil, "capture-pane", "-p", "-J", "-S", "-", "-t", window(target))
	if err != nil {
		return false, fmt.Errorf("tmux: read %s: %w", target, err)
	}
	return Contains(out, text), nil
}

// Capture returns the last lines lines of target's pane, its scrollback
// included (lines tmux wrapped are joined), with the controls a terminal
// would act on removed: a session's transcript as a person would read it.
func (s *Server) Capture(ctx context.Context, target string, lines int) (string, error) {
	if lines <= 0 {
		lines = 200
	}
	out, _, err := s.run(ctx, nil, "capture-pane", "-p", "-J", "-S", "-"+strconv.Itoa(lines), "-t", window(target))
	if err != nil {
		return "", fmt.Errorf("tmux: read %s: %w", target, err)
	}
	return strings.TrimRight(Pasteable(out), "\n"), nil
}

// Contains reports whether text occurs in screen followed by the end of a
// line, a space, or the end of screen.
func Contains(screen, text string) bool {
	for i := 0; text != ""; {
		j := strings.Index(screen[i:], text)
		if j < 0 {
			return false
		}
		end := i + j + len(text)
		if end == len(screen) || strings.ContainsRune(" \t\r\n", rune(screen[end])) {
			return true
		}
		i = i + j + 1
	}
	return false
}

// Kill ends target's session. Killing an absent session is not an error.
func (s *Server) Kill(ctx context.Context, target string) error {
	_, answered, err := s.run(ctx, nil, "kill-session", "-t", exact(target))
	if err != nil && answered && s.Probe(ctx, target) == Absent {
		return nil
	}
	return err
}

// Sessions lists the server's session names; none when no server runs.
func (s *Server) Sessions(ctx context.Context) ([]string, error) {
	out, answered, err := s.run(ctx, nil, "list-sessions", "-F", "#{session_name}")
	if err != nil {
		if answered {
			return nil, nil // no server running: no sessions
		}
		return nil, err
	}
	return strings.Fields(out), nil
}

// escapeArg keeps a data argument from being read as a command separator:
// tmux ends a command at any argument ending in ';' (and turns a trailing
// "\;" into ";"), so a trailing ";" is written as "\;".
func escapeArg(a string) string {
	if strings.HasSuffix(a, ";") {
		return a[:len(a)-1] + `\;`
	}
	return a
}

var unsafeTarget = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Target is the tmux session name of a work item: "loop-<slug>" with '.' and
// ':' rewritten to '_' (tmux renames them itself). The slug is
// "<provider>-<path with / as ->-<number>", every run of characters outside
// [A-Za-z0-9._-] replaced by '-' (docs/requirements.md K1). Not injective; the
// original accepts that too.
func Target(ref string) string {
	slug := ref
	if provider, rest, ok := strings.Cut(ref, ":"); ok {
		path, number, _ := strings.Cut(rest, "#")
		slug = provider + "-" + strings.ReplaceAll(path, "/", "-") + "-" + number
	}
	slug = unsafeTarget.ReplaceAllString(slug, "-")
	return "loop-" + strings.NewReplacer(".", "_", ":", "_").Replace(slug)
}
