// Package sandbox confines a process, and everything it executes, to the
// files and TCP ports a Policy names: what `the-loop sandbox` does before it
// executes an agent session's harness (SECURITY.md, "Sessions are
// sandboxed"; docs/decisions/097-sessions-under-landlock.md).
//
// It is built on Landlock, the Linux security module an unprivileged
// process uses to restrict itself (package github.com/landlock-lsm/go-landlock):
//
//   - files: outside the Policy's paths nothing can be read, listed,
//     written, created, removed or executed (Landlock ABI 1–5);
//   - TCP: binding is refused, and connecting is refused but to the
//     Policy's ports (ABI 4);
//   - IPC: abstract unix sockets and signals reach no process outside the
//     sandbox (ABI 6);
//   - on a kernel that offers ABI 9, connecting to a pathname unix socket
//     made outside the sandbox (a tmux server's, an agent's) is refused
//     too.
//
// Where Landlock's rules do not reach, a seccomp filter installed with the
// Landlock domain closes the ways round them measured on the kernels this
// was built on: a Multipath TCP socket (IPPROTO_MPTCP), which Landlock's
// TCP rules do not see, cannot be made (EPROTONOSUPPORT, as on a kernel
// without it: programs fall back to TCP); TCP Fast Open (MSG_FASTOPEN on
// sendto, sendmsg or sendmmsg), which connects without connect(2), is
// refused (EOPNOTSUPP); io_uring, which makes sockets and sends without
// those system calls, is not available (ENOSYS). Before ABI 9, unix
// sockets cannot be made at all (EACCES; socketpair(2) still works): a
// pathname unix socket made outside the sandbox — a tmux server, the
// user's D-Bus, an SSH, GPG or Docker socket — would be a way out.
//
// A restriction cannot be undone: a process already confined that applies
// another Policy is confined by both. Nothing here loosens anything.
package sandbox

import (
	"errors"
	"flag"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// Policy is what a confined process may still do. Everything else of the
// file system and of TCP is refused: an empty Policy allows nothing.
//
// Paths are files or directories (a directory's rule covers everything
// beneath it) and must be absolute; a path that does not exist is skipped,
// as it grants nothing. A symbolic link's rule applies to its target.
type Policy struct {
	// ReadWrite: read, list, write, create, rename within, remove and
	// execute; ioctl on device files (a terminal opened anew).
	ReadWrite []string
	// ReadOnly: read files and list directories.
	ReadOnly []string
	// Exec: read, list and execute.
	Exec []string
	// ConnectTCP are the TCP ports the process may connect to, on any
	// host. Nothing else may be connected to, and nothing bound.
	ConnectTCP []uint16
	// UnixSockets are directories (or sockets) whose pathname unix
	// sockets, made outside the sandbox, the process may connect to (a
	// tmux server's). Before Landlock ABI 9 a process can connect to no
	// unix socket, or to any: with UnixSockets set it may make unix
	// sockets, and reaches every one it can name.
	UnixSockets []string
	// BestEffort applies what the kernel offers, down to nothing; without
	// it, Apply refuses on a kernel without Landlock ABI 6 (ErrUnsupported).
	BestEffort bool
}

// ErrUnsupported: the kernel cannot enforce a Policy (no Landlock, or one
// older than ABI 6), or the seccomp filter does not exist for this
// architecture.
var ErrUnsupported = errors.New("the kernel offers no Landlock sandbox (ABI 6: Linux 6.7 or later, with landlock among its LSMs)")

// Validate reports what makes p unusable: a relative or empty path, a
// port 0.
func (p Policy) Validate() error {
	var errs []error
	for _, set := range []struct {
		flag  string
		paths []string
	}{{"--rw", p.ReadWrite}, {"--ro", p.ReadOnly}, {"--exec", p.Exec}, {"--unix", p.UnixSockets}} {
		for _, path := range set.paths {
			if path == "" || !filepath.IsAbs(path) {
				errs = append(errs, fmt.Errorf("sandbox: %s %q is not an absolute path", set.flag, path))
			}
		}
	}
	if slices.Contains(p.ConnectTCP, 0) {
		errs = append(errs, errors.New("sandbox: --connect 0 is not a port"))
	}
	return errors.Join(errs...)
}

// Flags registers p's flags on fs: --rw, --ro, --exec, --unix (repeatable,
// one path each) and --connect (repeatable, one port each). Each adds to
// what p allows, from nothing; there is no flag that takes anything away
// from a restriction in force, nor one that makes Apply settle for less
// (BestEffort).
func (p *Policy) Flags(fs *flag.FlagSet) {
	fs.Var((*pathList)(&p.ReadWrite), "rw", "a file or directory the command may read, write and execute (repeatable)")
	fs.Var((*pathList)(&p.ReadOnly), "ro", "a file or directory the command may read (repeatable)")
	fs.Var((*pathList)(&p.Exec), "exec", "a file or directory the command may read and execute (repeatable)")
	fs.Var((*portList)(&p.ConnectTCP), "connect", "a TCP port the command may connect to, on any host (repeatable)")
	fs.Var((*pathList)(&p.UnixSockets), "unix", "a directory whose unix sockets the command may connect to; before Landlock ABI 9, any it can name (repeatable)")
}

// Args is p as the flags Flags reads, in a stable order.
func (p Policy) Args() []string {
	var out []string
	for _, r := range p.ReadWrite {
		out = append(out, "--rw", r)
	}
	for _, r := range p.ReadOnly {
		out = append(out, "--ro", r)
	}
	for _, r := range p.Exec {
		out = append(out, "--exec", r)
	}
	for _, port := range p.ConnectTCP {
		out = append(out, "--connect", strconv.Itoa(int(port)))
	}
	for _, r := range p.UnixSockets {
		out = append(out, "--unix", r)
	}
	return out
}

// Command is argv run under p by `the-loop sandbox`: loop is that binary.
func (p Policy) Command(loop string, argv []string) []string {
	out := append([]string{loop, "sandbox"}, p.Args()...)
	out = append(out, "--")
	return append(out, argv...)
}

// Exec replaces this process with argv confined to p, argv[0] looked up
// on PATH once confined: the command is found, and run, with the rights it
// keeps. It returns only on failure, and never runs argv unconfined.
//
// Only the thread that executes argv is confined (the new program has no
// other), the goroutine locked to it for good: unlike Apply, this needs no
// signalling of the process's other threads, which a process already in a
// sandbox that hides /proc could not do. The terminal on its standard
// streams, which argv inherits open, stays usable by its path too.
func Exec(p Policy, argv, env []string) error {
	if len(argv) == 0 {
		return errors.New("sandbox: no command to run")
	}
	if err := confineThread(p); err != nil {
		return err
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("sandbox: exec %s: %w", path, err)
	}
	return nil
}

type pathList []string

func (l *pathList) String() string { return strings.Join(*l, ",") }

func (l *pathList) Set(v string) error {
	if v == "" || !filepath.IsAbs(v) {
		return fmt.Errorf("%q is not an absolute path", v)
	}
	*l = append(*l, filepath.Clean(v))
	return nil
}

type portList []uint16

func (l *portList) String() string {
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

func (l *portList) Set(v string) error {
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("%q is not a TCP port (1-65535)", v)
	}
	*l = append(*l, uint16(n))
	return nil
}
