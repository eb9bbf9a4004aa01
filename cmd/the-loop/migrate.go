package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/the-loop/bus/pkg/config"
)

// cmdMigrateConfig migrates an operator config to version 0.7.0. Without
// --write it prints the report and the migrated file; with --write it keeps
// the original as FILE.bak and rewrites FILE, comments kept. A second run
// changes nothing. Either way it then says what the migrated file will warn
// about at every load — the keys of the original's configuration that have
// no meaning here (docs/decisions/067-migrate-config-on-an-original-file.md)
// — or why it still does not load.
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
		return loadCheck(stdout, out, path)
	}
	if !*write {
		fmt.Fprintf(stdout, "\n# %s after migration (not written; run with --write):\n%s", path, out)
		return loadCheck(stdout, out, path)
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
	return loadCheck(stdout, out, path)
}

// loadCheck tells what the migrated config src of path loads with.
func loadCheck(w io.Writer, src []byte, path string) error {
	_, warnings, err := config.ParseAt(src, filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("the migrated config still does not load: %w", err)
	}
	if len(warnings) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nit loads with %d warning(s):\n", len(warnings))
	for _, ws := range warnings {
		fmt.Fprintf(w, "  ! %s\n", ws)
	}
	return nil
}
