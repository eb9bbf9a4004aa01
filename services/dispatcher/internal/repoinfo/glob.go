package repoinfo

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrBadGlob: a glob is refused (absolute, leaving the checkout with "..",
// malformed, or too many or too long). The endpoint answers it with 400.
var ErrBadGlob = errors.New("bad glob")

// Bounds on the globs of one request.
const (
	MaxGlobs     = 32
	MaxGlobBytes = 256
)

// DefaultGlobs are scanned when neither the request nor the repository's
// testing.integrationTestGlobs names any: the usual places of Go, Python,
// JavaScript/TypeScript and Ruby tests, test directories, and Gherkin
// feature files.
func DefaultGlobs() []string {
	return []string{
		"**/*_test.go",
		"**/test_*.py",
		"**/*_test.py",
		"**/*.test.ts",
		"**/*.spec.ts",
		"**/*.test.tsx",
		"**/*.spec.tsx",
		"**/*.test.js",
		"**/*.spec.js",
		"**/*.test.jsx",
		"**/*.spec.jsx",
		"**/*_spec.rb",
		"**/*.feature",
		"**/__tests__/**/*",
		"tests/**/*",
		"test/**/*",
	}
}

// A glob is a slash-separated pattern over repository-relative names, one
// element per path segment. A "**" segment matches any number of segments,
// none included; any other segment is a path.Match pattern for exactly one
// segment ("*" does not cross a "/"). The whole name must match: "*_test.go"
// matches at the root only, "**/*_test.go" anywhere.
//
// The matcher is ours rather than a library's: "**" over path.Match is all
// the globs need, and it keeps the module's dependencies as they are.
type glob []string

// parseGlob checks g, which may come from the agent, and splits it. "." and
// empty segments are dropped ("./tests/**" is "tests/**").
func parseGlob(g string) (glob, error) {
	bad := func(why string) error { return fmt.Errorf("%w %q: %s", ErrBadGlob, g, why) }
	switch {
	case strings.TrimSpace(g) == "":
		return nil, bad("it is empty")
	case len(g) > MaxGlobBytes:
		return nil, bad(fmt.Sprintf("it is longer than %d bytes", MaxGlobBytes))
	case strings.ContainsRune(g, 0):
		return nil, bad("it holds a NUL byte")
	case isAbs(g):
		return nil, bad("it is absolute; globs are relative to the checkout")
	}
	var out glob
	for seg := range strings.SplitSeq(g, "/") {
		switch seg {
		case "..":
			return nil, bad(`".." would leave the checkout`)
		case "", ".":
			continue
		}
		if _, err := path.Match(seg, ""); err != nil {
			return nil, bad(fmt.Sprintf("segment %q is malformed", seg))
		}
		out = append(out, seg)
	}
	if len(out) == 0 {
		return nil, bad("it names nothing")
	}
	return out, nil
}

// isAbs: g starts at a file system root, on any system (a leading slash or
// backslash, or a drive letter).
func isAbs(g string) bool {
	if strings.HasPrefix(g, "/") || strings.HasPrefix(g, `\`) {
		return true
	}
	if len(g) >= 2 && g[1] == ':' {
		c := g[0] | 0x20
		return c >= 'a' && c <= 'z'
	}
	return false
}

// parseGlobs checks every glob of a list; from says where the list comes
// from, for the error.
func parseGlobs(gs []string, from string) ([]glob, error) {
	if len(gs) > MaxGlobs {
		return nil, fmt.Errorf("%w: %s names %d globs, at most %d are scanned", ErrBadGlob, from, len(gs), MaxGlobs)
	}
	out := make([]glob, 0, len(gs))
	for _, g := range gs {
		p, err := parseGlob(g)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", from, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// match reports whether the slash-separated name matches g. The usual
// wildcard walk, with "**" as the star and segments as the characters:
// on a mismatch, the last "**" takes one more segment and matching resumes
// after it. Time is at most len(g) × segments of name.
func (g glob) match(name string) bool {
	segs := strings.Split(name, "/")
	p, n := 0, 0
	star, starN := -1, 0
	for n < len(segs) {
		switch {
		case p < len(g) && g[p] == "**":
			star, starN = p, n
			p++
		case p < len(g) && matchSeg(g[p], segs[n]):
			p++
			n++
		case star >= 0:
			starN++
			p, n = star+1, starN
		default:
			return false
		}
	}
	for p < len(g) && g[p] == "**" {
		p++
	}
	return p == len(g)
}

// matchSeg matches one segment; the pattern was checked by parseGlob.
func matchSeg(pat, seg string) bool {
	ok, _ := path.Match(pat, seg)
	return ok
}

// matchAny reports whether name matches one of gs.
func matchAny(gs []glob, name string) bool {
	for _, g := range gs {
		if g.match(name) {
			return true
		}
	}
	return false
}
