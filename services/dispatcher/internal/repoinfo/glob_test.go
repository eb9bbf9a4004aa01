package repoinfo

import (
	"errors"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		glob, name string
		want       bool
	}{
		{"**/*_test.go", "a_test.go", true},
		{"**/*_test.go", "pkg/x/a_test.go", true},
		{"**/*_test.go", "pkg/x/a.go", false},
		{"*_test.go", "a_test.go", true},
		{"*_test.go", "pkg/a_test.go", false},
		{"tests/**/*", "tests/a.py", true},
		{"tests/**/*", "tests/x/y/a.py", true},
		{"tests/**/*", "tests", false},
		{"tests/**/*", "src/tests/a.py", false},
		{"tests/**", "tests", true},
		{"tests/**", "tests/a/b", true},
		{"**", "anything/at/all", true},
		{"**/__tests__/**/*", "web/src/__tests__/a.test.js", true},
		{"**/__tests__/**/*", "__tests__/a.js", true},
		{"**/__tests__/**/*", "web/__tests__", false},
		{"a/**/b/**/c", "a/b/c", true},
		{"a/**/b/**/c", "a/x/b/y/z/c", true},
		{"a/**/b/**/c", "a/x/y/z/c", false},
		{"a/**/**/c", "a/c", true},
		{"**/test_*.py", "pkg/test_x.py", true},
		{"**/test_*.py", "pkg/x_test.py", false},
		{"**/*.spec.ts", "src/a.spec.ts", true},
		{"src/*/a?.ts", "src/x/ab.ts", true},
		{"src/*/a?.ts", "src/x/y/ab.ts", false},
		{"[ab].go", "a.go", true},
		{"./tests//*.py", "tests/a.py", true},
		{"**/*.go", ".hidden/a.go", true},
	} {
		g, err := parseGlob(c.glob)
		if err != nil {
			t.Errorf("parseGlob(%q): %v", c.glob, err)
			continue
		}
		if got := g.match(c.name); got != c.want {
			t.Errorf("%q matches %q: %v, want %v", c.glob, c.name, got, c.want)
		}
	}
}

func TestGlobRefused(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ glob, why string }{
		{"", "empty"},
		{"  ", "empty"},
		{"/abs/*", "absolute"},
		{"/", "absolute"},
		{`\windows\*`, "absolute"},
		{"C:/x/*", "absolute"},
		{"c:x", "absolute"},
		{"..", `".."`},
		{"../x/*", `".."`},
		{"a/../../b", `".."`},
		{"**/..", `".."`},
		{"[", "malformed"},
		{"a/[]b", "malformed"},
		{"a\x00b", "NUL"},
		{".", "names nothing"},
		{"./", "names nothing"},
		{strings.Repeat("a", MaxGlobBytes+1), "longer than"},
	} {
		_, err := parseGlob(c.glob)
		if !errors.Is(err, ErrBadGlob) || !strings.Contains(err.Error(), c.why) {
			t.Errorf("parseGlob(%q): %v, want ErrBadGlob saying %q", c.glob, err, c.why)
		}
	}
	// Names with dots that do not leave anything are fine.
	for _, g := range []string{"a..b/*", "**/.github/*", "..x"} {
		if _, err := parseGlob(g); err != nil {
			t.Errorf("parseGlob(%q): %v", g, err)
		}
	}
}

// The matcher's time grows with the product of the glob's and the name's
// segments, not exponentially with the number of "**".
func TestGlobMatchManyStars(t *testing.T) {
	t.Parallel()
	g, err := parseGlob(strings.Repeat("**/a/", 30) + "b")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.Repeat("a/", 100) + "c"
	if g.match(name) {
		t.Errorf("matched %q", name)
	}
}
