package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/the-loop/bus/pkg/config"
)

// cmdMigrateConfig migrates an operator config to version 0.7.0. Without
// --write it prints the report and the migrated file; with --write it keeps
// the original as FILE.bak and rewrites FILE, comments kept. A second run
// changes nothing.
func cmdMigrateConfig(_ context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("migrate-config", stderr)
	write := fs.Bool("write", false, "rewrite the file (keeping FILE.bak) instead of printing the result")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	path := fs.Arg(0)
	if path == "" {
		path, _ = env.Lookup("LOOP_CONFIG")
	}
	if path == "" {
		return fmt.Errorf("%w: migrate-config [--write] FILE (or set LOOP_CONFIG)", errUsage)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read config: %w", err)
	}
	out, report, err := config.Migrate(src)
	if err != nil {
		return fmt.Errorf("migrate %s: %w", path, err)
	}
	if err := report.Render(stdout); err != nil {
		return err
	}
	if !report.Changed() {
		return nil
	}
	if !*write {
		fmt.Fprintf(stdout, "\n# %s after migration (not written; run with --write):\n%s", path, out)
		return nil
	}
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("stat config: %w", err)
	}
	if err := os.WriteFile(path+".bak", src, info.Mode().Perm()); err != nil {
		return fmt.Errorf("keep the original: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, out, info.Mode().Perm()); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write config: %w", err)
	}
	fmt.Fprintf(stdout, "wrote %s (original kept as %s.bak)\n", path, path)
	return nil
}
