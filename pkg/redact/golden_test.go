package redact

import (
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// golden compares got with testdata/name; UPDATE=1 rewrites the file.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testkit.Golden(t, name, []byte(got))
}

// TestGoldenMirrorBodies: realistic Slack replies as the mirror quotes them,
// scrubbed with the fixture machine.
func TestGoldenMirrorBodies(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	s := New(machine)
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".txt")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name+".golden", Quote(s.Scrub(string(body)))+"\n")
		})
	}
}
