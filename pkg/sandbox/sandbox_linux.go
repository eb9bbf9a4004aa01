//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// levels are the Landlock configurations a sandbox enforces, strongest
// first; Apply takes the first the kernel offers.
//
//   - With ABI 9: every file access right of ABI 9, which adds connecting to
//     pathname unix sockets made outside the sandbox (granted on no path);
//     TCP bind and connect; both IPC scopes.
//   - landlock.V6: file access rights up to ABI 5 (truncate, ioctl on
//     devices), TCP bind and connect (ABI 4), both IPC scopes (ABI 6).
//
// UDP (ABI 10) is left alone: a session resolves names over it.
var levels = []landlock.Config{
	{HandledAccessFS: landlock.V9.HandledAccessFS, HandledAccessNet: landlock.V6.HandledAccessNet, Scoped: landlock.V6.Scoped},
	landlock.V6,
}

// level is the strongest of levels this kernel enforces, probed by making
// (not enforcing) a ruleset; unixScoped: it refuses connecting to pathname
// unix sockets made outside the sandbox (ABI 9), so the seccomp filter
// need not refuse making unix sockets.
func level() (cfg landlock.Config, unixScoped bool, err error) {
	for i, c := range levels {
		var fd int
		fd, _, err = c.NewRulesetFD()
		if err == nil {
			if fd >= 0 {
				_ = unix.Close(fd)
			}
			return c, i == 0, nil
		}
	}
	return landlock.Config{}, false, fmt.Errorf("%w: %v", ErrUnsupported, err)
}

// Supported reports whether Apply can enforce a Policy here without
// BestEffort: nil, or an error wrapping ErrUnsupported that says why not.
func Supported() error {
	if _, _, err := level(); err != nil {
		return err
	}
	if !filterArch {
		return fmt.Errorf("%w: no seccomp filter for this architecture", ErrUnsupported)
	}
	return nil
}

// ABI is the Landlock ABI version the kernel offers (0: none).
func ABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return v
}

// Apply confines the calling process, every thread of it, and everything
// it executes from now on to p. Without p.BestEffort it refuses, changing
// nothing, when the kernel cannot (ErrUnsupported).
//
// On kernels before Landlock ABI 8, a binary built with cgo reaches its
// other threads through libpsx, which reads /proc/self/task: Apply in a
// process already confined away from /proc ends it. Exec does not need
// this.
func Apply(p Policy) error {
	cfg, unixScoped, err := configFor(p)
	if err != nil {
		return err
	}
	if err := cfg.Restrict(rules(p, unixScoped)...); err != nil {
		return fmt.Errorf("sandbox: landlock: %w", err)
	}
	return filter(unix.SECCOMP_FILTER_FLAG_TSYNC, !unixScoped && len(p.UnixSockets) == 0)
}

// confineThread confines the calling OS thread to p, locking the calling
// goroutine to it for good: what Exec runs before it executes a command.
// The terminal the process runs on (its standard streams') stays usable
// by its path — the command holds it open already.
func confineThread(p Policy) error {
	p.ReadWrite = append(slices.Clone(p.ReadWrite), ownTerminals()...)
	cfg, unixScoped, err := configFor(p)
	if err != nil {
		return err
	}
	if ABI() >= 7 {
		// Denials of the command Exec runs are logged (by the audit
		// subsystem, where it is on), as a sandbox's should be.
		cfg = cfg.EnableLoggingForSubprocesses()
	}
	fd, flags, err := cfg.NewRulesetFD(rules(p, unixScoped)...)
	if err != nil {
		return fmt.Errorf("sandbox: landlock: %w", err)
	}
	if fd < 0 {
		return nil // best effort, and nothing the kernel can enforce
	}
	defer unix.Close(fd)
	runtime.LockOSThread() // never unlocked: the thread is confined
	if err := dropCapabilities(); err != nil {
		return err
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: no_new_privs: %w", err)
	}
	if err := llsys.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("sandbox: landlock_restrict_self: %w", err)
	}
	return filter(0, !unixScoped && len(p.UnixSockets) == 0)
}

// ownTerminals are the paths of the terminals on standard input, output
// and error (/dev/pts/N): a program reopens its terminal by path
// (/dev/stdout, ttyname).
func ownTerminals() []string {
	var out []string
	for fd := 0; fd <= 2; fd++ {
		if _, err := unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			continue
		}
		path, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if err == nil && strings.HasPrefix(path, "/dev/") && !slices.Contains(out, path) {
			out = append(out, path)
		}
	}
	return out
}

// configFor is the Landlock configuration p is enforced with, or why it
// cannot be.
func configFor(p Policy) (cfg landlock.Config, unixScoped bool, err error) {
	if err := p.Validate(); err != nil {
		return landlock.Config{}, false, err
	}
	cfg, unixScoped, err = level()
	if err != nil {
		if !p.BestEffort {
			return landlock.Config{}, false, err
		}
		cfg = landlock.V6.BestEffort()
	}
	if !filterArch && !p.BestEffort {
		return landlock.Config{}, false, fmt.Errorf("%w: no seccomp filter for this architecture", ErrUnsupported)
	}
	return cfg, unixScoped, nil
}

// filter installs the seccomp filter once Landlock is enforced (which set
// no_new_privs, as an unprivileged filter needs); flags TSYNC for every
// thread; unixSockets refuses making unix sockets. Without Landlock (best
// effort) there is nothing to hold.
func filter(flags uintptr, unixSockets bool) error {
	if !filterArch || ABI() == 0 {
		return nil
	}
	if err := loadFilter(flags, unixSockets); err != nil {
		return fmt.Errorf("sandbox: seccomp: %w", err)
	}
	return nil
}

// rules are p's Landlock rules; unixScoped: the configuration handles
// connecting to pathname unix sockets, which p.UnixSockets grants.
func rules(p Policy, unixScoped bool) []landlock.Rule {
	var out []landlock.Rule
	dirs, files := existing(p.ReadWrite)
	if len(dirs) > 0 {
		// A terminal opened anew (/dev/tty, a pseudo-terminal) needs its
		// ioctls; there are device files in no other rw directory.
		out = append(out, landlock.RWDirs(dirs...).WithIoctlDev())
	}
	if len(files) > 0 {
		out = append(out, landlock.RWFiles(files...).WithIoctlDev())
	}
	dirs, files = existing(p.ReadOnly)
	if len(dirs) > 0 {
		out = append(out, landlock.PathAccess(llsys.AccessFSReadFile|llsys.AccessFSReadDir, dirs...))
	}
	if len(files) > 0 {
		out = append(out, landlock.PathAccess(llsys.AccessFSReadFile, files...))
	}
	dirs, files = existing(p.Exec)
	if len(dirs) > 0 {
		out = append(out, landlock.RODirs(dirs...))
	}
	if len(files) > 0 {
		out = append(out, landlock.ROFiles(files...))
	}
	for _, port := range p.ConnectTCP {
		out = append(out, landlock.ConnectTCP(port))
	}
	if unixScoped {
		if dirs, files := existing(p.UnixSockets); len(dirs)+len(files) > 0 {
			out = append(out, landlock.PathAccess(llsys.AccessFSResolveUnix, append(dirs, files...)...))
		}
	}
	return out
}

// existing is paths without those that do not exist (they grant nothing),
// split into directories and files: Landlock gives a file only the rights
// that apply to files.
func existing(paths []string) (dirs, files []string) {
	for _, p := range paths {
		fi, err := os.Stat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			dirs = append(dirs, p)
		default:
			files = append(files, p)
		}
	}
	return dirs, files
}

// errFilterLoad wraps a failure to install the filter.
var errFilterLoad = errors.New("the filter was not installed on every thread")

// dropCapabilities leaves the calling thread, and what it executes, no
// capability at all. A session that runs as root keeps none of root's
// powers: Landlock's rules hold for root too, but a capable process still
// reads another same-user process's /proc/<pid>/environ and maps through
// them (measured: with CAP_SYS_PTRACE or the DAC overrides, the session read
// the environment of up and of other sessions). Run as root, a program
// executed gets its bounding set as permitted capabilities, so the bounding
// set is emptied (which needs CAP_SETPCAP); without that capability a
// process that is not root gets nothing on exec anyway (no_new_privs keeps
// file capabilities off), and root that cannot empty it is refused.
func dropCapabilities() error {
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("sandbox: clear ambient capabilities: %w", err)
	}
	for c := 0; c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if in == 0 && err == nil {
			continue // gone already: a sandbox inside a sandbox
		}
		err = unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EPERM) {
			if os.Geteuid() == 0 || os.Getuid() == 0 {
				return fmt.Errorf("sandbox: running as root without CAP_SETPCAP, the command would get root's capabilities: %w", err)
			}
			break
		}
		if err != nil {
			return fmt.Errorf("sandbox: drop capability %d: %w", c, err)
		}
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	if err := unix.Capset(&hdr, &none[0]); err != nil {
		return fmt.Errorf("sandbox: drop capabilities: %w", err)
	}
	return nil
}
