package main

import (
	"context"
	"fmt"
	"io"

	"github.com/the-loop/bus/agent/plugin"
	"github.com/the-loop/bus/pkg/config"
)

// cmdPlugin installs the loop's harness plugin (package agent/plugin) in a
// directory: what the dispatcher does at start for its sessions, and what
// an image does at build time so that its sessions load a plugin they
// cannot write (docs/agents.md).
func cmdPlugin(_ context.Context, args []string, _ config.Env, stdout, stderr io.Writer) error {
	const usage = "plugin install DIR | plugin version"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	switch args[0] {
	case "version":
		fs := newFlags("plugin version", stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("%w: %s", errUsage, usage)
		}
		fmt.Fprintln(stdout, plugin.Name, plugin.Version())
		return nil
	case "install":
		fs := newFlags("plugin install", stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return fmt.Errorf("%w: %s", errUsage, usage)
		}
		dir := fs.Arg(0)
		if err := plugin.Install(dir); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "the-loop: plugin %s %s installed in %s (Claude Code loads it with --plugin-dir %s)\n", plugin.Name, plugin.Version(), dir, dir)
		return nil
	}
	return fmt.Errorf("%w: %s", errUsage, usage)
}
