package repoinfo

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// Bounds on one scan. When one stops it, the answer says Truncated.
const (
	// MaxScanEntries bounds the files and directories walked.
	MaxScanEntries = 200_000
	// MaxScanFiles bounds the files read (those a glob matches).
	MaxScanFiles = 5_000
	// MaxScanFileBytes bounds what is read of one file.
	MaxScanFileBytes = 1 << 20
	// MaxScenarios bounds the scenarios of one answer.
	MaxScenarios = 10_000
	// MaxScenarioTextBytes bounds the text of all scenarios of one answer.
	MaxScenarioTextBytes = 4 << 20
	// MaxLineBytes bounds one feature, scenario, step or requirement
	// text; a longer one is cut and ends in "…".
	MaxLineBytes = 1 << 10
)

// skipDirs are never walked into: version control, and other people's code.
var skipDirs = map[string]bool{".git": true, "node_modules": true, "vendor": true}

// limits are a scan's bounds; tests shrink them.
type limits struct {
	entries, files, fileBytes, scenarios, textBytes int
}

var defaultLimits = limits{
	entries:   MaxScanEntries,
	files:     MaxScanFiles,
	fileBytes: MaxScanFileBytes,
	scenarios: MaxScenarios,
	textBytes: MaxScenarioTextBytes,
}

// Scenarios answers sessionapi.PathScenarios for the checkout at root: the
// Gherkin-style scenarios declared in the comments and docstrings of the
// files the globs match, whatever their language, in the order of a
// lexical walk. Comment leaders (//, #, *, /*, """ and the like) are
// stripped; a "Scenario:" or "Scenario Outline:" line starts a scenario,
// which carries the file's latest "Feature:", the Given/When/Then/And/But
// steps right under it and its "Requirement:", and is located by its
// repository-relative file (slash-separated) and 1-based line.
//
// globs, when given, are the agent's; otherwise the repository's
// testing.integrationTestGlobs in ConfigPath; otherwise DefaultGlobs. A glob
// that is absolute, has a ".." segment or is malformed is refused with an
// error wrapping ErrBadGlob, wherever it comes from; an unreadable
// configuration counts as none.
//
// The walk stays in the checkout: symbolic links are neither followed nor
// read, and .git, node_modules and vendor directories are skipped. It stops
// at the Max* bounds, setting Truncated, and when ctx is done, returning
// ctx's error.
func Scenarios(ctx context.Context, root string, globs []string) (sessionapi.Scenarios, error) {
	return scan(ctx, root, globs, defaultLimits)
}

// scan is Scenarios within lim.
func scan(ctx context.Context, root string, globs []string, lim limits) (sessionapi.Scenarios, error) {
	out := sessionapi.Scenarios{Globs: []string{}, Scenarios: []sessionapi.Scenario{}}
	var gs []glob
	if len(globs) > 0 {
		var err error
		if gs, err = parseGlobs(globs, "the request's globs"); err != nil {
			return out, err
		}
	}
	r, err := openRoot(root)
	if err != nil {
		return out, err
	}
	defer r.Close()
	if len(globs) == 0 {
		globs, err = configGlobs(r)
		if err != nil {
			return out, err
		}
		if len(globs) == 0 {
			globs = DefaultGlobs()
		}
		if gs, err = parseGlobs(globs, ConfigPath+" testing.integrationTestGlobs"); err != nil {
			return out, err
		}
	}
	out.Globs = globs

	entries, files, text := 0, 0, 0
	stop := func() error { out.Truncated = true; return fs.SkipAll }
	err = fs.WalkDir(r.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if err != nil {
			if name == "." {
				return err
			}
			return nil // a directory that cannot be listed is passed over
		}
		if entries++; entries > lim.entries {
			return stop()
		}
		if d.IsDir() {
			if name != "." && skipDirs[d.Name()] {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || !matchAny(gs, name) {
			return nil
		}
		if files++; files > lim.files {
			return stop()
		}
		b, _, more, err := readCapped(r, name, int64(lim.fileBytes))
		if err != nil {
			return nil // gone, binary or not a file any more: nothing to say
		}
		if more {
			out.Truncated = true
			if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
				b = b[:i+1] // the cut line is not read
			}
		}
		for s := range parse(name, b) {
			if len(out.Scenarios) >= lim.scenarios {
				return stop()
			}
			if text += size(s); text > lim.textBytes {
				return stop()
			}
			out.Scenarios = append(out.Scenarios, s)
		}
		return nil
	})
	return out, err
}

// configGlobs are testing.integrationTestGlobs in the repository's
// configuration, none when it has none or cannot be read.
func configGlobs(r *os.Root) ([]string, error) {
	cfg, _ := readConfig(r)
	n := cfg.get("testing", "integrationTestGlobs")
	if n == nil || n.ShortTag() == "!!null" {
		return nil, nil
	}
	if s, ok := scalar(n); ok { // one glob written without a list
		return []string{s}, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, nil
	}
	var gs []string
	for i, e := range n.Content {
		s, ok := scalar(e)
		if !ok || deref(e).ShortTag() == "!!null" {
			return nil, fmt.Errorf("%w: %s testing.integrationTestGlobs[%d] is not a string", ErrBadGlob, ConfigPath, i)
		}
		gs = append(gs, s)
	}
	return gs, nil
}

// size is what s adds to an answer, roughly.
func size(s sessionapi.Scenario) int {
	n := len(s.Feature) + len(s.Scenario) + len(s.Requirement) + len(s.File) + 16
	for _, st := range s.Steps {
		n += len(st)
	}
	return n
}
