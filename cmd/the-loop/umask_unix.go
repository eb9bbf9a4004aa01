//go:build unix

package main

import "golang.org/x/sys/unix"

// groupWritable sets the umask to 0002: files and directories this process
// and its children make are writable by their group.
func groupWritable() { unix.Umask(0o002) }
