package repoinfo

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTestCommand(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, config string
		want         []string
		err          string
	}{
		{"no config", "", nil, ""},
		{"no command", "testing:\n  integrationTestGlobs: []\n", nil, ""},
		{"a list", "testing:\n  command: [go, test, ./...]\n", []string{"go", "test", "./..."}, ""},
		{"a string, no shell", "testing:\n  command: make test; rm -rf /\n", []string{"make", "test;", "rm", "-rf", "/"}, ""},
		{"a mapping", "testing:\n  command: {run: x}\n", nil, "want a string or a list"},
		{"a nested list", "testing:\n  command: [[a]]\n", nil, "each argument is a string"},
		{"too many", "testing:\n  command: [" + strings.Repeat("a, ", MaxTestArgs) + "a]\n", nil, "more than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			if tt.config != "" {
				if err := os.MkdirAll(filepath.Join(dir, ".the-loop"), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, ConfigPath), []byte(tt.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			got, err := TestCommand(dir)
			switch {
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("err = %v, want %q", err, tt.err)
			case tt.err == "" && err != nil:
				t.Errorf("err = %v", err)
			case !slices.Equal(got, tt.want):
				t.Errorf("argv = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := TestCommand(""); err == nil {
		t.Error("no checkout: no error")
	}
}
