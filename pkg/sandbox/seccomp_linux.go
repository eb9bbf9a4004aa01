//go:build linux

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter closes what Landlock's rules do not see (see the
// package documentation). It inspects system call numbers and arguments
// only, never memory, so it is exact:
//
//   - a system call of another ABI than this architecture's (i386 or x32
//     on amd64, arm32 on arm64), where socketcall(2) would hide the
//     arguments, fails with ENOSYS;
//   - socket(2) with protocol IPPROTO_MPTCP fails with EPROTONOSUPPORT;
//   - with unixSockets, socket(2) of the AF_UNIX family fails with EACCES:
//     before Landlock ABI 9 nothing else keeps a confined process from
//     connecting to a pathname unix socket made outside its sandbox (a
//     tmux server, the user's D-Bus or systemd, an SSH or Docker socket);
//     socketpair(2) is left alone;
//   - sendto(2), sendmsg(2) and sendmmsg(2) with MSG_FASTOPEN fail with
//     EOPNOTSUPP, as with TCP Fast Open turned off;
//   - io_uring_setup(2) fails with ENOSYS;
//   - everything else is allowed.

// seccompData offsets (struct seccomp_data): nr, arch, args[6] of 64
// bits; an argument's low 32 bits come first on these little-endian
// architectures.
const (
	offNr   = 0
	offArch = 4
	offArgs = 16
)

func argLow(i int) uint32 { return uint32(offArgs + 8*i) }

// argCheck refuses a system call with errno when its argument arg, masked
// (jset: arg & val != 0) or compared (arg == val), matches.
type argCheck struct {
	arg   int
	jset  bool
	val   uint32
	errno unix.Errno
}

// program is the filter for this architecture; unixSockets also refuses
// making AF_UNIX sockets.
func program(unixSockets bool) []unix.SockFilter {
	stmt := func(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
		return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
	}
	ret := func(v uint32) unix.SockFilter { return stmt(unix.BPF_RET|unix.BPF_K, v) }
	errno := func(e unix.Errno) uint32 { return unix.SECCOMP_RET_ERRNO | (uint32(e) & unix.SECCOMP_RET_DATA) }

	p := []unix.SockFilter{
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, nativeArch, 1, 0),
		ret(errno(unix.ENOSYS)),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr),
	}
	if x32Bit != 0 {
		p = append(p,
			jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, x32Bit, 0, 1),
			ret(errno(unix.ENOSYS)))
	}
	socket := []argCheck{{arg: 2, val: unix.IPPROTO_MPTCP, errno: unix.EPROTONOSUPPORT}}
	if unixSockets {
		socket = append(socket, argCheck{arg: 0, val: unix.AF_UNIX, errno: unix.EACCES})
	}
	fastOpen := func(arg int) []argCheck {
		return []argCheck{{arg: arg, jset: true, val: unix.MSG_FASTOPEN, errno: unix.EOPNOTSUPP}}
	}
	for _, call := range []struct {
		nr     uint32
		checks []argCheck
	}{
		{sysSocket, socket},
		{sysSendto, fastOpen(3)},
		{sysSendmsg, fastOpen(2)},
		{sysSendmmsg, fastOpen(3)},
	} {
		// Not this call: skip its checks (three instructions each) and
		// its final allow, the accumulator still holding the number.
		p = append(p, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, call.nr, 0, uint8(3*len(call.checks)+1)))
		for _, c := range call.checks {
			test := uint16(unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K)
			if c.jset {
				test = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
			}
			p = append(p,
				stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, argLow(c.arg)),
				jump(test, c.val, 0, 1),
				ret(errno(c.errno)))
		}
		p = append(p, ret(unix.SECCOMP_RET_ALLOW))
	}
	return append(p,
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, sysIOUringSetup, 0, 1),
		ret(errno(unix.ENOSYS)),
		ret(unix.SECCOMP_RET_ALLOW))
}

// loadFilter installs program(unixSockets) on the calling thread, or on
// every thread of the process with flags SECCOMP_FILTER_FLAG_TSYNC. The
// caller has set no_new_privs.
func loadFilter(flags uintptr, unixSockets bool) error {
	p := program(unixSockets)
	prog := unix.SockFprog{Len: uint16(len(p)), Filter: &p[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	if e != 0 {
		return e
	}
	if r != 0 {
		return fmt.Errorf("%w (thread %d)", errFilterLoad, r)
	}
	return nil
}
