package sessionhost

import (
	"net"

	"golang.org/x/sys/unix"
)

// peerCred is the user and process at the other end of conn, as the kernel
// recorded them when it connected (SO_PEERCRED): not what the peer says.
func peerCred(conn *net.UnixConn) (uid, pid int, err error) {
	raw, err := conn.SyscallConn()
	if err != nil {
		return -1, 0, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return -1, 0, err
	}
	if credErr != nil {
		return -1, 0, credErr
	}
	return int(cred.Uid), int(cred.Pid), nil
}
