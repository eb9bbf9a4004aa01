package control

import (
	"fmt"
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

// TestGoldenMirrorBodies: realistic Slack replies, what Parse finds in them
// and what the mirror would post after Defang.
func TestGoldenMirrorBodies(t *testing.T) {
	t.Parallel()
	inputs, err := filepath.Glob(filepath.Join("testdata", "*.txt"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	g := Default()
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".txt")
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			r := g.Parse(string(body))
			defanged := g.Defang(string(body))
			if after := g.Parse(defanged); after.Found() {
				t.Errorf("defanged body still parses: %+v", after)
			}
			got := fmt.Sprintf("command: %q\nambiguous: %v\nmatched: %v\n-- defanged --\n%s", r.Command, r.Ambiguous, r.Matched, defanged)
			golden(t, name+".golden", got)
		})
	}
}
