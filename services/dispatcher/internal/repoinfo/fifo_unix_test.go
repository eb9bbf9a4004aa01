//go:build unix

package repoinfo

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// A named pipe where a document or a test file should be must not make the
// dispatcher wait for a writer that never comes.
func TestNamedPipeNotWaitedOn(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{
		ConfigPath:             "customInstructions:\n  docs:\n    - path: docs/pipe.md\n",
		"tests/real_test.go":   "// Scenario: Real\n",
		StepDir + "/build.md/": "",
	})
	for _, name := range []string{"docs/pipe.md", "tests/pipe_test.go", StepDir + "/implement.md"} {
		if err := syscall.Mkfifo(filepath.Join(dir, filepath.FromSlash(name)), 0o644); err != nil {
			t.Skipf("mkfifo: %v", err)
		}
	}
	got, err := Instructions(dir, "implement", "build")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Docs) != 2 {
		t.Fatalf("docs %+v, want the pipe and the step's pipe", got.Docs)
	}
	for _, d := range got.Docs {
		if d.State != sessionapi.DocUnreadable || !strings.Contains(got.Notes[d.Path], "a named pipe") {
			t.Errorf("%s: %s, note %q; want unreadable, a named pipe", d.Path, d.State, got.Notes[d.Path])
		}
	}
	sc, err := Scenarios(t.Context(), dir, []string{"tests/*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(sc.Scenarios) != 1 || sc.Scenarios[0].Scenario != "Real" {
		t.Errorf("scenarios %+v, want the real file's only", sc.Scenarios)
	}
}
