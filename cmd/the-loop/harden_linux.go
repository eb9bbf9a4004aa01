package main

import "golang.org/x/sys/unix"

// notDumpable makes the process non-dumpable: its /proc/<pid>/environ,
// mem and the like belong to root, and a same-user process cannot ptrace
// it.
func notDumpable() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }
