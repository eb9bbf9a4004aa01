//go:build !linux

package main

// notDumpable has nothing to do where the system offers no such switch.
func notDumpable() {}
