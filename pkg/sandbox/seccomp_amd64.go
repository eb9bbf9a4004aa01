//go:build linux

package sandbox

import "golang.org/x/sys/unix"

// This architecture's ABI, its x32 system calls (numbers with bit 30
// set) and the numbers the filter inspects.
const (
	filterArch      = true
	nativeArch      = unix.AUDIT_ARCH_X86_64
	x32Bit          = 0x40000000
	sysSocket       = unix.SYS_SOCKET
	sysSendto       = unix.SYS_SENDTO
	sysSendmsg      = unix.SYS_SENDMSG
	sysSendmmsg     = unix.SYS_SENDMMSG
	sysIOUringSetup = unix.SYS_IO_URING_SETUP
)
