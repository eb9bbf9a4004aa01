package graph

import (
	"os"
	"path/filepath"
	"testing"
)

// golden compares got with testdata/name; UPDATE=1 rewrites the file.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("UPDATE") == "1" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden (run with UPDATE=1 to create): %v", err)
	}
	if string(want) != got {
		t.Errorf("%s differs:\nwant %s\ngot  %s", name, want, got)
	}
}
