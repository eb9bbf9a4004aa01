//go:build linux

package sandbox_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/the-loop/bus/pkg/sandbox"
)

// A confinement cannot be undone, so every test confines a child: this
// test binary run again with envProbe set to a probeRequest. The child
// applies the request's Policy (or, with Exec, runs itself again under it
// through sandbox.Exec, as `the-loop sandbox` does), tries each probe and
// prints what each gave as JSON: "ok" or the errno's name.

const envProbe = "SANDBOX_TEST_PROBE"

type probeRequest struct {
	Policy sandbox.Policy
	// Exec: confine with sandbox.Exec, running this binary again (the
	// probes run in that process); else with Apply, probing in the same
	// process.
	Exec   bool
	Probes []probe
}

type probe struct {
	Name string
	Op   string
	Arg  string
}

func TestMain(m *testing.M) {
	if v := os.Getenv(envProbe); v != "" {
		os.Exit(runChild(v))
	}
	os.Exit(m.Run())
}

func runChild(v string) int {
	var req probeRequest
	if err := json.Unmarshal([]byte(v), &req); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if req.Exec {
		next := req
		next.Exec, next.Policy = false, sandbox.Policy{}
		b, _ := json.Marshal(next)
		// syscall.Exec keeps a duplicate variable's first value: this
		// request must not reach the next process.
		env := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, envProbe+"=") })
		env = append(env, envProbe+"="+string(b))
		self, _ := os.Executable()
		err := sandbox.Exec(req.Policy, []string{self}, env)
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 3
	}
	if !isZero(req.Policy) {
		if err := sandbox.Apply(req.Policy); err != nil {
			fmt.Fprintln(os.Stderr, "apply:", err)
			return 4
		}
	}
	out := map[string]string{}
	for _, p := range req.Probes {
		out[p.Name] = outcome(do(p))
	}
	_ = json.NewEncoder(os.Stdout).Encode(out)
	return 0
}

func isZero(p sandbox.Policy) bool {
	return len(p.ReadWrite)+len(p.ReadOnly)+len(p.Exec)+len(p.ConnectTCP) == 0 && !p.BestEffort
}

func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func do(p probe) error {
	switch p.Op {
	case "read":
		_, err := os.ReadFile(p.Arg)
		return err
	case "write":
		return os.WriteFile(p.Arg, []byte("written in the sandbox\n"), 0o600)
	case "list":
		_, err := os.ReadDir(p.Arg)
		return err
	case "exec":
		return exec.Command(p.Arg).Run()
	case "tcp", "tcp6", "mptcp", "tfo":
		return dial(p.Op, p.Arg)
	case "bind":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			l.Close()
		}
		return err
	case "caps":
		// ok when the process holds no capability and would get none
		// by executing a program.
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			return err
		}
		for _, d := range data {
			if d.Effective|d.Permitted|d.Inheritable != 0 {
				return fmt.Errorf("capabilities %+v", data)
			}
		}
		for c := 0; c < 64; c++ {
			in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
			if err != nil {
				break
			}
			if in == 1 {
				return fmt.Errorf("capability %d in the bounding set", c)
			}
		}
		return nil
	case "readlink":
		_, err := os.Readlink(p.Arg)
		return err
	case "signal":
		pid, _ := strconv.Atoi(p.Arg)
		return unix.Kill(pid, 0)
	case "unix":
		c, err := net.Dial("unix", p.Arg)
		if err == nil {
			c.Close()
		}
		return err
	case "socketpair":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err == nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
		}
		return err
	case "io_uring":
		var params [120]byte
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
		if e != 0 {
			return e
		}
		unix.Close(int(fd))
		return nil
	}
	return fmt.Errorf("unknown probe %q", p.Op)
}

// dial connects to the loopback port arg: plainly, over IPv6 to the
// v4-mapped address, as Multipath TCP, or by TCP Fast Open (sendto with
// MSG_FASTOPEN, which connects without connect(2)).
func dial(op, arg string) error {
	port, _ := strconv.Atoi(arg)
	v4 := &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
	domain, proto := unix.AF_INET, 0
	var sa unix.Sockaddr = v4
	switch op {
	case "tcp6":
		domain, sa = unix.AF_INET6, &unix.SockaddrInet6{Port: port, Addr: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}}
	case "mptcp":
		proto = unix.IPPROTO_MPTCP
	}
	fd, err := unix.Socket(domain, unix.SOCK_STREAM, proto)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if op == "tfo" {
		return unix.Sendto(fd, []byte("tfo"), unix.MSG_FASTOPEN, sa)
	}
	return unix.Connect(fd, sa)
}

// probeIn runs req in a child and returns each probe's outcome.
func probeIn(t *testing.T, req probeRequest) map[string]string {
	t.Helper()
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), envProbe+"="+string(b))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the confined child: %v\n%s", err, stderr.String())
	}
	got := map[string]string{}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("the child's report %q: %v", out, err)
	}
	return got
}

func needLandlock(t *testing.T) {
	t.Helper()
	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v", sandbox.ABI(), err)
	}
}

// system is what a confined program needs of the system to start: its
// libraries and the binaries it runs.
var system = []string{"/usr", "/bin", "/lib", "/lib64", "/sbin"}

// layout is a work item's workspace, another work item's and a store like
// `the-loop up`'s, each in a directory of its own.
type layout struct {
	work, other, store, seed, ro string
}

func newLayout(t *testing.T) layout {
	t.Helper()
	root := t.TempDir()
	l := layout{work: filepath.Join(root, "items", "mine"), other: filepath.Join(root, "items", "theirs"),
		store: filepath.Join(root, "store"), ro: filepath.Join(root, "readonly")}
	l.seed = filepath.Join(l.store, "nats", "operator.nk")
	for _, f := range []string{l.seed, filepath.Join(l.other, "notes.md"), filepath.Join(l.ro, "doc.md"), filepath.Join(l.ro, "run.sh")} {
		if err := os.MkdirAll(filepath.Dir(f), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte("#!/bin/sh\n# SUAMOPERATORSEED\n"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(l.work, 0o700); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestApplyConfinesFiles: a confined process writes and reads in its
// read-write directory and reads its read-only one, and is refused
// (EACCES) the store's seed, another work item's directory, listing /,
// writing where it may only read, and executing what it may only read.
func TestApplyConfinesFiles(t *testing.T) {
	needLandlock(t)
	l := newLayout(t)
	got := probeIn(t, probeRequest{
		Policy: sandbox.Policy{ReadWrite: []string{l.work, os.DevNull}, ReadOnly: []string{l.ro}, Exec: system},
		Probes: []probe{
			{"write in --rw", "write", filepath.Join(l.work, "out.txt")},
			{"read back in --rw", "read", filepath.Join(l.work, "out.txt")},
			{"read in --ro", "read", filepath.Join(l.ro, "doc.md")},
			{"run from --exec", "exec", "/bin/true"},
			{"read the store's operator seed", "read", l.seed},
			{"list the store", "list", l.store},
			{"list another work item's directory", "list", l.other},
			{"read another work item's file", "read", filepath.Join(l.other, "notes.md")},
			{"list /", "list", "/"},
			{"write in --ro", "write", filepath.Join(l.ro, "doc.md")},
			{"run from --ro", "exec", filepath.Join(l.ro, "run.sh")},
		},
	})
	want := map[string]string{
		"write in --rw": "ok", "read back in --rw": "ok", "read in --ro": "ok", "run from --exec": "ok",
		"read the store's operator seed": "EACCES", "list the store": "EACCES",
		"list another work item's directory": "EACCES", "read another work item's file": "EACCES",
		"list /": "EACCES", "write in --ro": "EACCES", "run from --ro": "EACCES",
	}
	check(t, got, want)
}

// listener accepts connections on a loopback port and counts them.
type listener struct {
	port     int
	accepted atomic.Int64
}

func listen(t *testing.T) *listener {
	t.Helper()
	// Plain TCP, so that a Multipath TCP client would fall back to it.
	ln, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	l := &listener{port: ln.Addr().(*net.TCPAddr).Port}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.accepted.Add(1)
			c.Close()
		}
	}()
	return l
}

// TestApplyConfinesTCP: a confined process connects to the port it may,
// and to no other — neither by connect(2) over IPv4 or IPv6, nor as
// Multipath TCP, nor by TCP Fast Open — binds nothing, and has no
// io_uring; the refused port's listener never sees a connection.
func TestApplyConfinesTCP(t *testing.T) {
	needLandlock(t)
	allowed, bus := listen(t), listen(t)
	b := strconv.Itoa(bus.port)
	got := probeIn(t, probeRequest{
		Policy: sandbox.Policy{Exec: system, ConnectTCP: []uint16{uint16(allowed.port)}},
		Probes: []probe{
			{"connect to the allowed port", "tcp", strconv.Itoa(allowed.port)},
			{"connect to the bus port", "tcp", b},
			{"connect to the bus port over IPv6", "tcp6", b},
			{"connect to the bus port as Multipath TCP", "mptcp", b},
			{"connect to the bus port by TCP Fast Open", "tfo", b},
			{"listen on a port", "bind", ""},
			{"set up io_uring", "io_uring", ""},
		},
	})
	check(t, got, map[string]string{
		"connect to the allowed port":              "ok",
		"connect to the bus port":                  "EACCES",
		"connect to the bus port over IPv6":        "EACCES",
		"connect to the bus port as Multipath TCP": "EPROTONOSUPPORT",
		"connect to the bus port by TCP Fast Open": unix.ErrnoName(unix.EOPNOTSUPP),
		"listen on a port":                         "EACCES",
		"set up io_uring":                          "ENOSYS",
	})
	time.Sleep(100 * time.Millisecond) // a connection that got through would be accepted by now
	if n := bus.accepted.Load(); n != 0 {
		t.Errorf("the refused port's listener accepted %d connections", n)
	}
	if n := allowed.accepted.Load(); n != 1 {
		t.Errorf("the allowed port's listener accepted %d connections, want 1", n)
	}
}

// TestApplyScopesIPC: a confined process cannot signal a process outside
// its sandbox, connect to a unix socket (abstract or pathname) made
// outside it, or reach into an outside process through /proc (its memory,
// its working directory), though it may read /proc and make a socketpair.
func TestApplyScopesIPC(t *testing.T) {
	needLandlock(t)
	abstract := fmt.Sprintf("@the-loop-sandbox-test-%d", os.Getpid())
	pathname := filepath.Join(t.TempDir(), "outside.sock")
	for _, name := range []string{abstract, pathname} {
		ln, err := net.Listen("unix", name)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.Close()
			}
		}()
	}
	pid := strconv.Itoa(os.Getpid())
	probes := []probe{
		{"signal the parent", "signal", pid},
		{"connect to the parent's abstract socket", "unix", abstract},
		{"connect to the parent's pathname socket", "unix", pathname},
		{"make a socketpair", "socketpair", ""},
		{"read the parent's memory", "read", "/proc/" + pid + "/mem"},
		{"follow the parent's working directory", "readlink", "/proc/" + pid + "/cwd"},
	}
	// Unconfined, each works: the refusals below are the sandbox's.
	check(t, probeIn(t, probeRequest{Probes: probes}), map[string]string{
		"signal the parent": "ok", "connect to the parent's abstract socket": "ok", "connect to the parent's pathname socket": "ok",
		"make a socketpair": "ok", "follow the parent's working directory": "ok",
	})
	// Before ABI 9 no unix socket can be made (seccomp, EACCES); from it,
	// Landlock refuses the connection: scoped (EPERM) or by path (EACCES).
	abstractRefusal := "EACCES"
	if sandbox.ABI() >= 9 {
		abstractRefusal = "EPERM"
	}
	check(t, probeIn(t, probeRequest{Policy: sandbox.Policy{ReadOnly: []string{"/proc"}, Exec: system, ReadWrite: []string{filepath.Dir(pathname)}}, Probes: probes}), map[string]string{
		"signal the parent":                       "EPERM",
		"connect to the parent's abstract socket": abstractRefusal,
		"connect to the parent's pathname socket": "EACCES",
		"make a socketpair":                       "ok",
		"read the parent's memory":                "EACCES",
		"follow the parent's working directory":   "EACCES",
	})
}

// TestExecdCommandInheritsTheSandbox: sandbox.Exec (what `the-loop
// sandbox` runs) confines the process and then executes the command, and
// the command — a new program — is as confined: it writes in its
// read-write directory and is refused the store, another work item and
// the bus port.
func TestExecdCommandInheritsTheSandbox(t *testing.T) {
	needLandlock(t)
	l := newLayout(t)
	bus := listen(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got := probeIn(t, probeRequest{
		// /proc readable, as sessions have it.
		Policy: sandbox.Policy{ReadWrite: []string{l.work}, ReadOnly: []string{"/proc"}, Exec: append(slices.Clone(system), filepath.Dir(self))},
		Exec:   true,
		Probes: []probe{
			{"write in --rw", "write", filepath.Join(l.work, "child.txt")},
			{"read the store's operator seed", "read", l.seed},
			{"list another work item's directory", "list", l.other},
			{"connect to the bus port", "tcp", strconv.Itoa(bus.port)},
			// The test's own process is outside the sandbox, and of the
			// same user: run as root, only dropping every capability
			// keeps its environment out of reach.
			{"read an outside process's environment", "read", fmt.Sprintf("/proc/%d/environ", os.Getpid())},
			{"hold no capability", "caps", ""},
		},
	})
	check(t, got, map[string]string{
		"write in --rw": "ok", "read the store's operator seed": "EACCES",
		"list another work item's directory": "EACCES", "connect to the bus port": "EACCES",
		"read an outside process's environment": "EACCES", "hold no capability": "ok",
	})
}

func check(t *testing.T, got, want map[string]string) {
	t.Helper()
	for name, w := range want {
		g := got[name]
		if g != w {
			t.Errorf("%s: %s, want %s", name, g, w)
		} else {
			t.Logf("%s: %s", name, g)
		}
	}
}
