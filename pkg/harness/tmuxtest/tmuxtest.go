// Package tmuxtest gives tests a private tmux server and a stand-in agent
// harness, so session code is tested against real tmux without touching a
// user's tmux server or needing an agent installed.
//
// The stand-in is the test binary itself: a package's TestMain calls
// MaybeRunStandIn first, and a harness that runs the test binary with
// EnvDir set in its environment becomes the stand-in. It takes Claude Code's
// argv (--session-id ID or --resume ID, the prompt last), records its boot
// prompt, puts its terminal in raw mode, turns bracketed paste on as an
// interactive harness does, and records every submitted paste: the text
// between the bracketed-paste markers, submitted by the carriage return that
// follows. Records are JSON lines in EnvDir, read back with Boots and Inputs.
//
// It needs tmux (Debian/Ubuntu package "tmux") and stty (coreutils); Socket
// skips the test when tmux is missing.
package tmuxtest

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
	"sync/atomic"
	"testing"
)

// EnvDir names the variable that makes the test binary the stand-in and
// says where it writes its records.
const EnvDir = "LOOP_TEST_STANDIN_DIR"

// Record files in the stand-in's directory.
const (
	BootsFile  = "boots.jsonl"
	InputsFile = "inputs.jsonl"
)

// Boot is one start of the stand-in.
type Boot struct {
	// Mode is "spawn" (--session-id) or "resume" (--resume).
	Mode      string `json:"mode"`
	SessionID string `json:"session_id"`
	Prompt    string `json:"prompt"`
}

// Input is one submitted paste.
type Input struct {
	SessionID string `json:"session_id"`
	Text      string `json:"text"`
}

var seq atomic.Int64

// Socket returns the name of a private tmux server (tmux -L) for t, killed
// when t ends. It skips t when tmux is not installed.
func Socket(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (package tmux)")
	}
	name := fmt.Sprintf("loop-test-%d-%d", os.Getpid(), seq.Add(1))
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", name, "kill-server").Run() })
	return name
}

// MaybeRunStandIn runs the stand-in harness and exits when EnvDir is set;
// otherwise it returns at once. Call it first in TestMain.
func MaybeRunStandIn() {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return
	}
	if err := runStandIn(dir, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stand-in:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runStandIn(dir string, args []string, in *os.File, out io.Writer) error {
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
	// Raw mode first, so nothing typed later is cooked by the line
	// discipline; the boot record is the test's signal that input is safe.
	stty := exec.Command("stty", "raw", "-echo")
	stty.Stdin = in
	if err := stty.Run(); err != nil {
		return fmt.Errorf("stty: %w", err)
	}
	_, _ = io.WriteString(out, "\x1b[?2004h") // bracketed paste on
	if err := appendJSON(filepath.Join(dir, BootsFile), boot); err != nil {
		return err
	}
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
			if err := appendJSON(filepath.Join(dir, InputsFile), Input{SessionID: boot.SessionID, Text: text}); err != nil {
				return err
			}
		default:
			pending.Write(paste.Bytes())
			paste.Reset()
		}
	}
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

// Boots reads the boot records in dir.
func Boots(t testing.TB, dir string) []Boot { return readJSONL[Boot](t, filepath.Join(dir, BootsFile)) }

// Inputs reads the submitted pastes in dir.
func Inputs(t testing.TB, dir string) []Input {
	return readJSONL[Input](t, filepath.Join(dir, InputsFile))
}

func readJSONL[T any](t testing.TB, path string) []T {
	t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
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
	return out
}
