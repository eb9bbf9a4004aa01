//go:build linux

package sandbox

import "golang.org/x/sys/unix"

// This architecture's ABI (no x32) and the numbers the filter inspects.
const (
	filterArch      = true
	nativeArch      = unix.AUDIT_ARCH_AARCH64
	x32Bit          = 0
	sysSocket       = unix.SYS_SOCKET
	sysSendto       = unix.SYS_SENDTO
	sysSendmsg      = unix.SYS_SENDMSG
	sysSendmmsg     = unix.SYS_SENDMMSG
	sysIOUringSetup = unix.SYS_IO_URING_SETUP
)
