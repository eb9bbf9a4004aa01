//go:build !linux

package main

// notDumpable has nothing to do where the system offers no such switch.
func notDumpable() {}

// wipeEnviron has nothing to do where no other process reads the
// environment a process started with.
func wipeEnviron([]string) error { return nil }
