package repoinfo

import (
	"slices"
	"strings"
	"testing"
)

// TestRepoCritics: the names of the critics a repository declares, read
// as hostile bytes: a wrong shape, an entry without a usable name or a
// broken file names nothing, and the list is bounded.
func TestRepoCritics(t *testing.T) {
	t.Parallel()
	many := "reviews:\n  critics:\n"
	for range 40 {
		many += "    - {name: c}\n"
	}
	for _, c := range []struct {
		name, config string
		want         []string
	}{
		{"two", "reviews:\n  critics:\n    - {name: cursor-gpt, harness: cursor}\n    - {name: aider, command: aider}\n", []string{"cursor-gpt", "aider"}},
		{"unusable entries", "reviews:\n  critics:\n    - {harness: cursor}\n    - {name: [a]}\n    - {name: \"" + strings.Repeat("x", 65) + "\"}\n    - plain\n    - {name: ok}\n", []string{"ok"}},
		{"not a list", "reviews:\n  critics: {name: x}\n", nil},
		{"none", "reviews: {selfReviewCount: 3}\n", nil},
		{"not YAML", "reviews: [\n", nil},
		{"bounded", many, slices.Repeat([]string{"c"}, maxRepoCritics)},
	} {
		dir := tree(t, map[string]string{ConfigPath: c.config})
		if got := RepoCritics(dir); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	if got := RepoCritics(t.TempDir()); got != nil {
		t.Errorf("no configuration: %q", got)
	}
	if got := RepoCritics(""); got != nil {
		t.Errorf("no checkout: %q", got)
	}
}
