package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEQuickStartIsCIs: the README's quick start gives the demo and the
// test command, and the test command is the one CI runs (.ci/run), so what a
// newcomer runs is what is checked.
func TestREADMEQuickStartIsCIs(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ci, err := os.ReadFile("../../.ci/run")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Quick start\n.*?```sh\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no quick start with a sh block")
	}
	lines := strings.Split(strings.TrimSpace(string(m[1])), "\n")
	if len(lines) != 2 || lines[0] != "go run ./cmd/the-loop demo" {
		t.Fatalf("the quick start gives %q, want the demo and the test command", lines)
	}
	found := false
	for _, l := range strings.Split(string(ci), "\n") {
		found = found || strings.TrimSpace(l) == lines[1]
	}
	if !found {
		t.Errorf("the README's test command %q is not a line of .ci/run", lines[1])
	}
}
