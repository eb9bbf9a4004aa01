//go:build linux

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The seccomp filter closes what Landlock's TCP rules do not see (see the
// package documentation). It inspects system call numbers and arguments
// only, never memory, so it is exact:
//
//   - a system call of another ABI than this architecture's (i386 or x32
//     on amd64, arm32 on arm64), where socketcall(2) would hide the
//     arguments, fails with ENOSYS;
//   - socket(2) with protocol IPPROTO_MPTCP fails with EPROTONOSUPPORT;
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

// argRule refuses system call nr when its argument arg, masked or compared
// by test, matches.
type argRule struct {
	nr    uint32
	arg   int
	jset  bool // test: arg & val != 0; else arg == val
	val   uint32
	errno unix.Errno
}

// program is the filter for this architecture.
func program() []unix.SockFilter {
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
	for _, r := range []argRule{
		{nr: sysSocket, arg: 2, val: unix.IPPROTO_MPTCP, errno: unix.EPROTONOSUPPORT},
		{nr: sysSendto, arg: 3, jset: true, val: unix.MSG_FASTOPEN, errno: unix.EOPNOTSUPP},
		{nr: sysSendmsg, arg: 2, jset: true, val: unix.MSG_FASTOPEN, errno: unix.EOPNOTSUPP},
		{nr: sysSendmmsg, arg: 3, jset: true, val: unix.MSG_FASTOPEN, errno: unix.EOPNOTSUPP},
	} {
		test := uint16(unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K)
		if r.jset {
			test = unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K
		}
		// Not this call: skip the four instructions of its check, the
		// accumulator still holding the call's number.
		p = append(p,
			jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, r.nr, 0, 4),
			stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, argLow(r.arg)),
			jump(test, r.val, 0, 1),
			ret(errno(r.errno)),
			ret(unix.SECCOMP_RET_ALLOW))
	}
	return append(p,
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, sysIOUringSetup, 0, 1),
		ret(errno(unix.ENOSYS)),
		ret(unix.SECCOMP_RET_ALLOW))
}

// loadFilter installs program on the calling thread, or on every thread of
// the process with flags SECCOMP_FILTER_FLAG_TSYNC. The caller has set
// no_new_privs.
func loadFilter(flags uintptr) error {
	p := program()
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
