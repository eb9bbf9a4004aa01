package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/sandbox"
)

// cmdSandbox runs a command confined to the paths and TCP ports its flags
// name (package pkg/sandbox): the dispatcher starts every agent session so
// when LOOP_SESSION_SANDBOX is landlock (docs/agents.md, "Sandbox").
//
// The flags only add to what the command may do, starting from nothing;
// none weakens a restriction in force (a process already confined stays
// confined by both), and there is no best-effort mode: on a kernel without
// Landlock the verb fails and the command never runs. The command is
// looked up on PATH once the process is confined, so that it is found, and
// run, with the rights it keeps; it gets this process's environment.
func cmdSandbox(_ context.Context, args []string, _ config.Env, _, stderr io.Writer) error {
	fs := newFlags("sandbox", stderr)
	var p sandbox.Policy
	p.Flags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("%w: sandbox [--rw PATH]... [--ro PATH]... [--exec PATH]... [--connect PORT]... [--unix DIR]... -- COMMAND [ARGS...]", errUsage)
	}
	return sandbox.Exec(p, fs.Args(), os.Environ())
}
