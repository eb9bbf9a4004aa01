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
package standin

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Record files in the stand-in's directory.
const (
	BootsFile  = "boots.jsonl"
	InputsFile = "inputs.jsonl"
	RunsFile   = "runs.jsonl"
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

// Run is the stand-in: it parses args, records the boot in dir, then
// records every submitted paste read from in until in ends. Each record is
// echoed to out, so a person attached to the session sees what it was told.
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
	if err := appendJSON(filepath.Join(dir, BootsFile), boot); err != nil {
		return err
	}
	echo(out, "stand-in agent "+boot.Mode+" "+boot.SessionID+", boot prompt", boot.Prompt)
	if obey {
		if err := runAll(dir, boot.SessionID, boot.Prompt); err != nil {
			return err
		}
	}
	return readSubmitted(in, func(text string) error {
		if err := appendJSON(filepath.Join(dir, InputsFile), Input{SessionID: boot.SessionID, Text: text, At: time.Now()}); err != nil {
			return err
		}
		echo(out, "typed into the session", text)
		if obey {
			return runAll(dir, boot.SessionID, text)
		}
		return nil
	})
}

// bootOf is the boot record of a harness started with args (Claude Code's
// argv: --session-id or --resume, the prompt last) in this process's
// environment and working directory.
func bootOf(args []string) Boot {
	boot := Boot{}
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--session-id", "--resume":
			if i+1 < len(args) {
				boot.Mode, boot.SessionID = "spawn", args[i+1]
				if args[i] == "--resume" {
					boot.Mode = "resume"
				}
				i++
			}
		}
	}
	if len(args) > 0 {
		boot.Prompt = args[len(args)-1]
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
