package main

import (
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// notDumpable makes the process non-dumpable: its /proc/<pid>/environ,
// mem and the like belong to root, and a same-user process cannot ptrace
// it.
func notDumpable() { _ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }

// wipeEnviron overwrites the values of names with zeros in the environment
// block the process was started with, which is what /proc/<pid>/environ
// shows whatever the process later does to its environment: a process
// with capabilities (root's) reads a non-dumpable process's block all the
// same. Go copied the block into its own environment at start, so nothing
// in the process reads it any more. It runs before notDumpable: the
// process's own /proc/self/mem then still belongs to its user.
func wipeEnviron(names []string) error {
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return err
	}
	// Fields after the command's closing parenthesis start at field 3;
	// env_start and env_end are fields 50 and 51 (proc_pid_stat(5)).
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 49 {
		return fmt.Errorf("/proc/self/stat has %d fields", len(fields)+2)
	}
	start, err1 := strconv.ParseInt(fields[47], 10, 64)
	end, err2 := strconv.ParseInt(fields[48], 10, 64)
	if err1 != nil || err2 != nil || end <= start {
		return fmt.Errorf("/proc/self/stat: environment at %q–%q", fields[47], fields[48])
	}
	mem, err := os.OpenFile("/proc/self/mem", os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer mem.Close()
	block := make([]byte, end-start)
	if _, err := mem.ReadAt(block, start); err != nil {
		return err
	}
	wiped := false
	for off := 0; off < len(block); {
		n := bytes.IndexByte(block[off:], 0)
		if n < 0 {
			n = len(block) - off
		}
		name, _, ok := bytes.Cut(block[off:off+n], []byte("="))
		if ok && slices.Contains(names, string(name)) {
			clear(block[off+len(name)+1 : off+n])
			wiped = true
		}
		off += n + 1
	}
	if !wiped {
		return nil
	}
	_, err = mem.WriteAt(block, start)
	return err
}
