// Package tmuxtest gives tests a private tmux server and a stand-in agent
// harness, so session code is tested against real tmux without touching a
// user's tmux server or needing an agent installed.
//
// The stand-in (package standin) is the test binary itself: a package's
// TestMain calls MaybeRunStandIn first, and a harness that runs the test
// binary with EnvDir set in its environment becomes the stand-in. It records
// its boot prompt and every submitted paste as JSON lines in EnvDir, read
// back with Boots and Inputs.
//
// It needs tmux (Debian/Ubuntu package "tmux") and stty (coreutils); Socket
// skips the test when tmux is missing.
package tmuxtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"

	"github.com/the-loop/bus/internal/testsupport/standin"
)

// EnvDir names the variable that makes the test binary the stand-in and
// says where it writes its records.
const EnvDir = "LOOP_TEST_STANDIN_DIR"

// Boot is one start of the stand-in.
type Boot = standin.Boot

// Input is one submitted paste.
type Input = standin.Input

var seq atomic.Int64

// Socket returns the name of a private tmux server (tmux -L) for t, killed
// when t ends. It skips t when tmux is not installed.
func Socket(t TB) string {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (package tmux)")
	}
	name := fmt.Sprintf("loop-test-%d-%d", os.Getpid(), seq.Add(1))
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", name, "kill-server").Run() })
	return name
}

// Dir returns a private directory (0700) for tmux servers' sockets, one
// server per session as the dispatcher runs them (tmux -S DIR/NAME); every
// server on a socket there is killed, and the directory removed, when t
// ends. Its path is short: a unix socket's may not exceed 107 bytes. It
// skips t when tmux is not installed.
func Dir(t TB) string {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (package tmux)")
	}
	dir, err := os.MkdirTemp("", "lt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.Type()&os.ModeSocket != 0 {
				_ = exec.Command("tmux", "-S", filepath.Join(dir, e.Name()), "kill-server").Run()
			}
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

// MaybeRunStandIn runs the stand-in harness and exits when EnvDir is set;
// otherwise it returns at once. Call it first in TestMain.
func MaybeRunStandIn() {
	dir := os.Getenv(EnvDir)
	if dir == "" {
		return
	}
	if err := standin.Run(dir, os.Args[1:], os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "stand-in:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Boots reads the boot records in dir.
func Boots(t TB, dir string) []Boot {
	t.Helper()
	out, err := standin.ReadBoots(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Inputs reads the submitted pastes in dir.
func Inputs(t TB, dir string) []Input {
	t.Helper()
	out, err := standin.ReadInputs(dir)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
