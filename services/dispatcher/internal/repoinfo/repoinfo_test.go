package repoinfo

import (
	"os"
	"path/filepath"
	"testing"
)

// tree writes files (slash-separated name → content) under a new temporary
// directory and returns it. A name ending in "/" is made a directory.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	write(t, dir, files)
	return dir
}

func write(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if name[len(name)-1] == '/' {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// symlink makes name (slash-separated, under dir) a link to target.
func symlink(t *testing.T, dir, name, target string) {
	t.Helper()
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, p); err != nil {
		t.Skipf("symlinks: %v", err)
	}
}

// secret is a file outside every checkout whose text must never come back.
func secret(t *testing.T) (dir, file string) {
	t.Helper()
	dir = t.TempDir()
	file = filepath.Join(dir, "secret.md")
	text := "TOP SECRET\n// Scenario: Leaked from outside\n//   Given the outside\n"
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "leak_test.go"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, file
}
