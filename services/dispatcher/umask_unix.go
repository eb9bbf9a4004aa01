//go:build unix

package dispatcher

import "golang.org/x/sys/unix"

// groupWritable sets the process's umask to 0002: the workspaces, checkouts
// and files the dispatcher makes are writable by its group, which the
// sessions' user shares when they run in a container of their own.
func groupWritable() { unix.Umask(0o002) }
