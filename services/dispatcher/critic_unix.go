//go:build unix

package dispatcher

import (
	"os/exec"
	"syscall"
)

// killGroup makes cmd the leader of a process group of its own, which its
// cancellation kills whole.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
