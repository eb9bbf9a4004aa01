// Package standin is a stand-in agent harness: a program that takes Claude
// Code's argv (--session-id ID or --resume ID, the prompt last), records its
// boot prompt, and records and echoes every prompt typed into it afterwards
// — the text between bracketed-paste markers, submitted by the carriage
// return that follows, exactly what the dispatcher types into a tmux pane or
// a child process's input.
//
// Tests use it (through package tmuxtest) to check what a session was told
// without an agent installed; `the-loop demo` runs it as the demo's agent.
// Records are JSON lines in a directory, read back with ReadBoots and
// ReadInputs. Each boot record keeps the environment the session started
// with, so tests can check what a session holds.
//
// With EnvObey set to 1 it is also an obedient agent, as a prompt-injected
// one would be: every line of its boot prompt or of a prompt typed into it
// that contains RunMarker runs the rest of that line with `sh -c` in its
// working directory and environment, and records the command, its output and
// its exit code (Ran records, ReadRuns). The attack suite drives it so.
//
// Given --plugin-dir DIR (repeatable), it loads each plugin the way Claude
// Code does, with package agent/plugin's readers: it resolves every
// /plugin:command its boot prompt names to the command's file (recorded in
// the boot), runs the plugins' SessionStart hooks whose matcher matches the
// start (startup or resume), and after every turn (the boot prompt, each
// prompt typed into it) tries to finish: it runs the Stop hooks, and while
// one blocks the stop (exit 2), tries again at once with stop_hook_active
// set, as Claude Code goes on and stops again, up to maxStopTries. Every
// hook run is recorded (Hooked records, ReadHooks). Claude Code's other
// flags are kept in the boot record as they were given (Boot.Args).
package standin

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/the-loop/bus/agent/plugin"
)

// Record files in the stand-in's directory.
const (
	BootsFile  = "boots.jsonl"
	InputsFile = "inputs.jsonl"
	RunsFile   = "runs.jsonl"
	HooksFile  = "hooks.jsonl"
)

// EnvObey, set to 1 in the stand-in's environment, makes it run the commands
// its prompts carry after RunMarker.
const (
	EnvObey   = "STANDIN_OBEY"
	RunMarker = "standin-run: "
)

// maxRunOutput bounds the output a run record keeps.
const maxRunOutput = 64 << 10

// Boot is one start of the stand-in.
type Boot struct {
	// Mode is "spawn" (--session-id) or "resume" (--resume).
	Mode      string `json:"mode"`
	SessionID string `json:"session_id"`
	Prompt    string `json:"prompt"`
	// Env is the environment the stand-in started with; Dir its working
	// directory.
	Env map[string]string `json:"env,omitempty"`
	Dir string            `json:"dir,omitempty"`
	// Args are the flags of the argv the stand-in does not read itself,
	// in order, each with its value when it has one.
	Args []string `json:"args,omitempty"`
	// PluginDirs are the --plugin-dir directories, as given; Plugins what
	// loading each found.
	PluginDirs []string `json:"plugin_dirs,omitempty"`
	Plugins    []Plugin `json:"plugins,omitempty"`
	// Commands are the /plugin:command names the boot prompt holds and
	// where each resolved (only with plugin directories).
	Commands []Command `json:"commands,omitempty"`
}

// Plugin is one plugin directory as the stand-in loaded it.
type Plugin struct {
	Dir     string `json:"dir"`
	Name    string `json:"name,omitempty"`
	Version string `json:"version,omitempty"`
	// Error: the plugin could not be loaded (Claude Code reports it and
	// goes on without it).
	Error string `json:"error,omitempty"`
}

// Command is a slash command of the boot prompt and the file it resolved
// to (Found false: no loaded plugin ships it).
type Command struct {
	Slash string `json:"slash"`
	File  string `json:"file,omitempty"`
	Found bool   `json:"found"`
}

// Hooked is one run of a plugin's hook.
type Hooked struct {
	SessionID string `json:"session_id"`
	// Event is SessionStart or Stop; Turn the turn it ended (0: the boot
	// prompt, n: the nth prompt typed in); Attempt the try to finish
	// within the turn, from 1.
	Event   string `json:"event"`
	Turn    int    `json:"turn"`
	Attempt int    `json:"attempt,omitempty"`
	Plugin  string `json:"plugin"`
	Matcher string `json:"matcher,omitempty"`
	// Command is as the hooks file has it (before ${CLAUDE_PLUGIN_ROOT} is
	// expanded).
	Command        string `json:"command"`
	StopHookActive bool   `json:"stop_hook_active,omitempty"`
	Exit           int    `json:"exit"`
	Stdout         string `json:"stdout,omitempty"`
	Stderr         string `json:"stderr,omitempty"`
	// Blocked: a Stop hook refused the stop (exit 2, or a "block"
	// decision); Stderr (or the decision's reason) says why.
	Blocked bool `json:"blocked,omitempty"`
	// Error: the hook could not run, or ran out of time.
	Error string `json:"error,omitempty"`
}

// Ran is one command an obedient stand-in ran.
type Ran struct {
	SessionID string `json:"session_id"`
	Command   string `json:"command"`
	Output    string `json:"output"`
	Exit      int    `json:"exit"`
}

// Input is one submitted paste.
type Input struct {
	SessionID string `json:"session_id"`
	Text      string `json:"text"`
	// At is when the stand-in read the submitting carriage return: when
	// the session was told (the end-to-end benchmark times the last hop by
	// it).
	At time.Time `json:"at,omitzero"`
}

// Run is the stand-in: it parses args, loads the plugins they name and runs
// their SessionStart hooks, records the boot in dir, then records every
// submitted paste read from in until in ends, trying to finish (the Stop
// hooks) after the boot prompt and after each paste. Each record is echoed
// to out, so a person attached to the session sees what it was told.
func Run(dir string, args []string, in io.Reader, out io.Writer) error {
	boot := bootOf(args)
	obey := boot.Env[EnvObey] == "1"
	// On a terminal (tmux), raw mode first, so nothing typed later is
	// cooked by the line discipline; the boot record is the signal that
	// input is safe. A pipe (the process runner) has no line discipline.
	if f, ok := in.(*os.File); ok && isTerminal(f) {
		stty := exec.Command("stty", "raw", "-echo")
		stty.Stdin = f
		if err := stty.Run(); err != nil {
			return fmt.Errorf("stty: %w", err)
		}
		_, _ = io.WriteString(out, "\x1b[?2004h") // bracketed paste on
	}
	h := load(dir, &boot, out)
	// Claude Code runs SessionStart before it reads the first prompt.
	if err := h.sessionStart(); err != nil {
		return err
	}
	if err := appendJSON(filepath.Join(dir, BootsFile), boot); err != nil {
		return err
	}
	echo(out, "stand-in agent "+boot.Mode+" "+boot.SessionID+", boot prompt", boot.Prompt)
	if obey {
		if err := runAll(dir, boot.SessionID, boot.Prompt); err != nil {
			return err
		}
	}
	if err := h.finish(0); err != nil {
		return err
	}
	turn := 0
	return readSubmitted(in, func(text string) error {
		if err := appendJSON(filepath.Join(dir, InputsFile), Input{SessionID: boot.SessionID, Text: text, At: time.Now()}); err != nil {
			return err
		}
		echo(out, "typed into the session", text)
		if obey {
			if err := runAll(dir, boot.SessionID, text); err != nil {
				return err
			}
		}
		turn++
		return h.finish(turn)
	})
}

// bootOf is the boot record of a harness started with args (Claude Code's
// argv: --session-id or --resume, --plugin-dir DIR, other flags, the prompt
// last) in this process's environment and working directory.
func bootOf(args []string) Boot {
	boot := Boot{}
	if len(args) > 0 {
		boot.Prompt = args[len(args)-1]
		args = args[:len(args)-1]
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		hasValue := i+1 < len(args)
		switch {
		case (a == "--session-id" || a == "--resume") && hasValue:
			boot.Mode, boot.SessionID = "spawn", args[i+1]
			if a == "--resume" {
				boot.Mode = "resume"
			}
			i++
		case a == "--plugin-dir" && hasValue:
			boot.PluginDirs = append(boot.PluginDirs, args[i+1])
			i++
		case strings.HasPrefix(a, "--plugin-dir="):
			boot.PluginDirs = append(boot.PluginDirs, strings.TrimPrefix(a, "--plugin-dir="))
		default:
			// A flag the stand-in does not read, with its value when the
			// next argument is not a flag itself.
			boot.Args = append(boot.Args, a)
			if strings.HasPrefix(a, "-") && !strings.Contains(a, "=") && hasValue && !strings.HasPrefix(args[i+1], "-") {
				boot.Args = append(boot.Args, args[i+1])
				i++
			}
		}
	}
	boot.Env = map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok {
			boot.Env[k] = v
		}
	}
	boot.Dir, _ = os.Getwd()
	return boot
}

// maxStopTries bounds the tries to finish one turn while Stop hooks block
// it. Claude Code leaves that bound to the hooks (stop_hook_active tells
// them they are being tried again); the guard keeps a hook that never
// allows from looping a test forever.
const maxStopTries = 10

// defaultHookTimeout is a hook's time when its plugin sets none.
const defaultHookTimeout = 60 * time.Second

// slashCommand is a /plugin:command in a prompt (after a space, a quote, a
// bracket or a backtick, so that a URL's scheme is none).
var slashCommand = regexp.MustCompile("(?:^|[\\s`'\"(\\[])(/[A-Za-z0-9][A-Za-z0-9_-]*:[A-Za-z0-9][A-Za-z0-9_.-]*)")

// harness is the plugins a stand-in loaded, and what it needs to run their
// hooks as Claude Code would.
type harness struct {
	dir     string // records
	boot    *Boot
	out     io.Writer
	plugins []loaded
}

// loaded is a plugin that loaded: its directory (absolute) and hooks.
type loaded struct {
	root  string
	hooks plugin.Hooks
}

// load loads boot's plugin directories, recording in boot what each held
// and where the boot prompt's slash commands resolved.
func load(dir string, boot *Boot, out io.Writer) *harness {
	h := &harness{dir: dir, boot: boot, out: out}
	if len(boot.PluginDirs) == 0 {
		return h
	}
	names := map[string]string{} // plugin name → root
	for _, d := range boot.PluginDirs {
		root := d
		if !filepath.IsAbs(root) {
			root = filepath.Join(boot.Dir, root)
		}
		p := Plugin{Dir: d}
		m, err := plugin.ReadManifest(root)
		var hooks plugin.Hooks
		if err == nil {
			hooks, err = plugin.ReadHooks(root)
		}
		if err != nil {
			p.Error = err.Error()
			boot.Plugins = append(boot.Plugins, p)
			continue
		}
		p.Name, p.Version = m.Name, m.Version
		boot.Plugins = append(boot.Plugins, p)
		names[m.Name] = root
		h.plugins = append(h.plugins, loaded{root: root, hooks: hooks})
	}
	seen := map[string]bool{}
	for _, m := range slashCommand.FindAllStringSubmatch(boot.Prompt, -1) {
		slash := m[1]
		if seen[slash] {
			continue
		}
		seen[slash] = true
		c := Command{Slash: slash}
		name, _, _ := strings.Cut(strings.TrimPrefix(slash, "/"), ":")
		if root, ok := names[name]; ok {
			c.File, c.Found = plugin.ResolveCommand(root, name, slash)
		}
		boot.Commands = append(boot.Commands, c)
	}
	return h
}

// sessionStart runs the SessionStart hooks whose matcher matches how the
// harness started: startup, or resume.
func (h *harness) sessionStart() error {
	source := "startup"
	if h.boot.Mode == "resume" {
		source = "resume"
	}
	input := map[string]any{"session_id": h.boot.SessionID, "cwd": h.boot.Dir, "hook_event_name": "SessionStart", "source": source}
	for _, p := range h.plugins {
		for _, g := range p.hooks["SessionStart"] {
			if !g.Matches(source) {
				continue
			}
			for _, hk := range g.Hooks {
				r := h.run(p, g, hk, input)
				r.Event = "SessionStart"
				if err := appendJSON(filepath.Join(h.dir, HooksFile), r); err != nil {
					return err
				}
				if r.Stdout != "" {
					echo(h.out, "SessionStart hook said", r.Stdout)
				}
			}
		}
	}
	return nil
}

// finish tries to end turn as Claude Code does: it runs every Stop hook;
// when one blocks, it goes on at once and tries again with
// stop_hook_active set, until a try is allowed or maxStopTries.
func (h *harness) finish(turn int) error {
	active := false
	for attempt := 1; attempt <= maxStopTries; attempt++ {
		input := map[string]any{"session_id": h.boot.SessionID, "cwd": h.boot.Dir, "hook_event_name": "Stop", "stop_hook_active": active}
		blocked, ran := false, false
		for _, p := range h.plugins {
			for _, g := range p.hooks["Stop"] {
				for _, hk := range g.Hooks {
					r := h.run(p, g, hk, input)
					r.Event, r.Turn, r.Attempt, r.StopHookActive = "Stop", turn, attempt, active
					r.Blocked = stopBlocked(r)
					if err := appendJSON(filepath.Join(h.dir, HooksFile), r); err != nil {
						return err
					}
					ran = true
					if r.Blocked {
						blocked = true
						echo(h.out, "the stop was blocked", r.Stderr)
					}
				}
			}
		}
		if !ran || !blocked {
			return nil
		}
		active = true
	}
	echo(h.out, "stand-in", fmt.Sprintf("still blocked after %d tries to stop; giving up on this turn", maxStopTries))
	return nil
}

// stopBlocked reads a Stop hook's answer: exit 2, or exit 0 with the JSON
// decision "block".
func stopBlocked(r Hooked) bool {
	if r.Exit == 2 {
		return true
	}
	var d struct {
		Decision string `json:"decision"`
	}
	return r.Exit == 0 && json.Unmarshal([]byte(r.Stdout), &d) == nil && d.Decision == "block"
}

// run runs one command hook of p as Claude Code does: `sh -c` in the
// session's working directory and environment, with CLAUDE_PLUGIN_ROOT and
// CLAUDE_PROJECT_DIR added and ${CLAUDE_PLUGIN_ROOT} expanded in the
// command, input as JSON on stdin, within the hook's timeout.
func (h *harness) run(p loaded, g plugin.MatcherGroup, hk plugin.Hook, input map[string]any) Hooked {
	r := Hooked{SessionID: h.boot.SessionID, Plugin: p.root, Matcher: g.Matcher, Command: hk.Command}
	if hk.Type != "command" {
		r.Exit, r.Error = -1, fmt.Sprintf("hook type %q is not run by the stand-in", hk.Type)
		return r
	}
	timeout := defaultHookTimeout
	if hk.Timeout > 0 {
		timeout = time.Duration(hk.Timeout) * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", strings.ReplaceAll(hk.Command, "${CLAUDE_PLUGIN_ROOT}", p.root))
	cmd.Dir = h.boot.Dir
	cmd.Env = append(os.Environ(), "CLAUDE_PLUGIN_ROOT="+p.root, "CLAUDE_PROJECT_DIR="+h.boot.Dir)
	// Out of time, the hook's whole process group goes, as the harness
	// kills it; a child that escaped it holding the output is waited for
	// no longer than WaitDelay.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 2 * time.Second
	in, _ := json.Marshal(input)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		r.Exit, r.Error = -1, fmt.Sprintf("timed out after %s", timeout)
	case errors.As(err, &exit):
		r.Exit = exit.ExitCode()
	case err != nil:
		r.Exit, r.Error = -1, err.Error()
	}
	r.Stdout, r.Stderr = bounded(stdout.String()), bounded(stderr.String())
	return r
}

func bounded(s string) string {
	if len(s) > maxRunOutput {
		return s[:maxRunOutput]
	}
	return s
}

// ReadHooks reads the hook runs of the stand-in in dir, in order.
func ReadHooks(dir string) ([]Hooked, error) { return readJSONL[Hooked](filepath.Join(dir, HooksFile)) }

// readSubmitted reads in as a terminal sees typing: bracketed pastes are
// collected, and a carriage return outside a paste submits what was
// collected, which submit receives (newlines given back). It returns nil
// when in ends.
func readSubmitted(in io.Reader, submit func(text string) error) error {
	const start, end = "\x1b[200~", "\x1b[201~"
	r := bufio.NewReader(in)
	var pending, paste bytes.Buffer
	inPaste := false
	for {
		b, err := r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if inPaste {
			paste.WriteByte(b)
			if bytes.HasSuffix(paste.Bytes(), []byte(end)) {
				pending.Write(paste.Bytes()[:paste.Len()-len(end)])
				paste.Reset()
				inPaste = false
			}
			continue
		}
		paste.WriteByte(b)
		switch {
		case bytes.Equal(paste.Bytes(), []byte(start)):
			paste.Reset()
			inPaste = true
		case bytes.HasPrefix([]byte(start), paste.Bytes()):
			// maybe the start of the marker: keep reading
		case b == '\r' && paste.Len() == 1:
			paste.Reset()
			// tmux pastes newlines as carriage returns; give them back.
			text := strings.ReplaceAll(pending.String(), "\r", "\n")
			pending.Reset()
			if err := submit(text); err != nil {
				return err
			}
		default:
			pending.Write(paste.Bytes())
			paste.Reset()
		}
	}
}

// runAll runs every RunMarker line of text, in order, and records each.
func runAll(dir, sessionID, text string) error {
	for line := range strings.SplitSeq(text, "\n") {
		_, command, ok := strings.Cut(line, RunMarker)
		if !ok || strings.TrimSpace(command) == "" {
			continue
		}
		cmd := exec.Command("sh", "-c", command)
		out, err := cmd.CombinedOutput()
		code := 0
		var exit *exec.ExitError
		switch {
		case errors.As(err, &exit):
			code = exit.ExitCode()
		case err != nil:
			code, out = -1, append(out, []byte(err.Error())...)
		}
		if len(out) > maxRunOutput {
			out = out[:maxRunOutput]
		}
		if err := appendJSON(filepath.Join(dir, RunsFile), Ran{SessionID: sessionID, Command: command, Output: string(out), Exit: code}); err != nil {
			return err
		}
	}
	return nil
}

// ReadRuns reads the commands an obedient stand-in ran in dir, in order.
func ReadRuns(dir string) ([]Ran, error) { return readJSONL[Ran](filepath.Join(dir, RunsFile)) }

// RecordInput appends in to dir's inputs, as the stand-in records a
// submitted paste (the e2e suite marks boots in the same file, in order).
func RecordInput(dir string, in Input) error {
	return appendJSON(filepath.Join(dir, InputsFile), in)
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// echo shows a record on the session's screen; in raw mode a line ends with
// CR LF.
func echo(out io.Writer, title, text string) {
	_, _ = io.WriteString(out, "── "+title+" ──\r\n"+strings.ReplaceAll(text, "\n", "\r\n")+"\r\n")
}

func appendJSON(path string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// ReadBoots reads the boot records in dir (none before the first start).
func ReadBoots(dir string) ([]Boot, error) { return readJSONL[Boot](filepath.Join(dir, BootsFile)) }

// ReadInputs reads the submitted pastes in dir, in order.
func ReadInputs(dir string) ([]Input, error) {
	return readJSONL[Input](filepath.Join(dir, InputsFile))
}

func readJSONL[T any](path string) ([]T, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []T
	for _, line := range bytes.Split(b, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(line, &v); err != nil {
			continue // a line being written right now
		}
		out = append(out, v)
	}
	return out, nil
}
