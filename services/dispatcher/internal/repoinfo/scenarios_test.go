package repoinfo

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

const goTest = `package ingress

// Feature: Authorized-actor guard
// Scenario: A comment from an unlisted login is dropped before dispatch
//   Given a receiver with authorizedUsers: [maintainer]
//   When a comment authored by stranger arrives
//   Then no dispatch happens and the drop reason is unauthorized-actor
// Requirement: docs/specs/issue-15/requirements.md#R4
func TestUnlisted(t *testing.T) {
	// When this comment is read, it is no step of the scenario above.
}

// Scenario Outline: A listed login passes
//   Given a receiver with authorizedUsers: [<login>]
//   When a comment authored by <login> arrives
//   Then it is dispatched
//   Examples:
//     | login      |
//     | maintainer |
func TestListed(t *testing.T) {}
`

const pyTest = `import pytest


def test_retry():
    """Feature: Retries

    Scenario: A failed delivery is retried with backoff
      Given a delivery that fails twice
      When the retrier runs
      Then it succeeds on the third attempt
      And the delays grow
    Requirement: R7.1
    """


# Scenario: Giving up
#   Given a delivery that always fails
#   Then it is dropped after five attempts
# Requirement: R7.2
def test_give_up():
    pass
`

const tsTest = `/**
 * Feature: Status page
 * Requirement: R9
 *
 * Scenario: The page lists sessions
 *   Given two sessions
 *   When the page loads
 *   Then both are listed
 */
describe("status", () => {
  // Scenario: An empty registry
  //   Given no sessions
  //   Then the page says so
  it("empty", () => {});
  /* Scenario: Stale sessions */
});
`

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, file, text string
		want             []sessionapi.Scenario
	}{
		{
			name: "go", file: "services/x/guard_test.go", text: goTest,
			want: []sessionapi.Scenario{
				{
					Feature:  "Authorized-actor guard",
					Scenario: "A comment from an unlisted login is dropped before dispatch",
					Steps: []string{
						"Given a receiver with authorizedUsers: [maintainer]",
						"When a comment authored by stranger arrives",
						"Then no dispatch happens and the drop reason is unauthorized-actor",
					},
					Requirement: "docs/specs/issue-15/requirements.md#R4",
					File:        "services/x/guard_test.go", Line: 4,
				},
				{
					Feature:  "Authorized-actor guard",
					Scenario: "A listed login passes",
					Steps: []string{
						"Given a receiver with authorizedUsers: [<login>]",
						"When a comment authored by <login> arrives",
						"Then it is dispatched",
					},
					File: "services/x/guard_test.go", Line: 13,
				},
			},
		},
		{
			name: "python", file: "tests/test_retry.py", text: pyTest,
			want: []sessionapi.Scenario{
				{
					Feature:  "Retries",
					Scenario: "A failed delivery is retried with backoff",
					Steps: []string{
						"Given a delivery that fails twice",
						"When the retrier runs",
						"Then it succeeds on the third attempt",
						"And the delays grow",
					},
					Requirement: "R7.1",
					File:        "tests/test_retry.py", Line: 7,
				},
				{
					Feature:     "Retries",
					Scenario:    "Giving up",
					Steps:       []string{"Given a delivery that always fails", "Then it is dropped after five attempts"},
					Requirement: "R7.2",
					File:        "tests/test_retry.py", Line: 16,
				},
			},
		},
		{
			name: "typescript", file: "web/status.spec.ts", text: tsTest,
			want: []sessionapi.Scenario{
				{Feature: "Status page", Scenario: "The page lists sessions", Steps: []string{"Given two sessions", "When the page loads", "Then both are listed"}, Requirement: "R9", File: "web/status.spec.ts", Line: 5},
				{Feature: "Status page", Scenario: "An empty registry", Steps: []string{"Given no sessions", "Then the page says so"}, Requirement: "R9", File: "web/status.spec.ts", Line: 11},
				{Feature: "Status page", Scenario: "Stale sessions", Requirement: "R9", File: "web/status.spec.ts", Line: 15},
			},
		},
		{
			name: "feature file, a second feature, background", file: "features/a.feature",
			text: "Feature: One\n  Background:\n    Given setup\n  Scenario: First\n    Given x\n\n    Then y\nFeature: Two\n  Rule: r\n  Scenario: Second\n    @tagged\n    But this too\n",
			want: []sessionapi.Scenario{
				{Feature: "One", Scenario: "First", Steps: []string{"Given x", "Then y"}, File: "features/a.feature", Line: 4},
				{Feature: "Two", Scenario: "Second", Steps: []string{"But this too"}, File: "features/a.feature", Line: 10},
			},
		},
		{
			name: "a requirement before the scenario, in its block", file: "a_test.go",
			text: "// Requirement: R1\n// Requirement: R2\n// Scenario: S\n// Given g\n\nfunc f() {}\n// Requirement: R3\nfunc g() {}\n// Scenario: T\n",
			want: []sessionapi.Scenario{
				{Scenario: "S", Steps: []string{"Given g"}, Requirement: "R1, R2", File: "a_test.go", Line: 3},
				{Scenario: "T", File: "a_test.go", Line: 9},
			},
		},
		{
			name: "the scenario's own requirement wins over the feature's", file: "a_test.go",
			text: "# Feature: F\n# Requirement: RF\n# Scenario: own\n# Requirement: RS\n# Scenario: inherited\n",
			want: []sessionapi.Scenario{
				{Feature: "F", Scenario: "own", Requirement: "RS", File: "a_test.go", Line: 3},
				{Feature: "F", Scenario: "inherited", Requirement: "RF", File: "a_test.go", Line: 5},
			},
		},
		{
			name: "keywords must start the line and be whole", file: "a_test.go",
			text: "// see Scenario: not one\n// Scenario: one\n// Whenever this is not a step\n// Given after prose\nt.Run(\"Scenario: no\")\n",
			want: []sessionapi.Scenario{{Scenario: "one", File: "a_test.go", Line: 2}},
		},
		{
			name: "leaders of other languages", file: "x",
			text: "/// Scenario: rust\n//! Scenario: rust inner\n-- Scenario: sql\n/* Scenario: block */\n''' Scenario: py single '''\r\n\t#  Scenario: tabbed\r\n",
			want: []sessionapi.Scenario{
				{Scenario: "rust", File: "x", Line: 1},
				{Scenario: "rust inner", File: "x", Line: 2},
				{Scenario: "sql", File: "x", Line: 3},
				{Scenario: "block", File: "x", Line: 4},
				{Scenario: "py single", File: "x", Line: 5},
				{Scenario: "tabbed", File: "x", Line: 6},
			},
		},
		{
			name: "a feature does not cross files", file: "b_test.go",
			text: "// Scenario: no feature here\n",
			want: []sessionapi.Scenario{{Scenario: "no feature here", File: "b_test.go", Line: 1}},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got := slices.Collect(parse(c.file, []byte(c.text)))
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("scenarios (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseLongLines(t *testing.T) {
	t.Parallel()
	text := "// Scenario: " + strings.Repeat("é", MaxLineBytes) + "\n// Given " + strings.Repeat("x", 2*MaxLineBytes) + "\n"
	got := slices.Collect(parse("a_test.go", []byte(text)))
	if len(got) != 1 || len(got[0].Steps) != 1 {
		t.Fatalf("got %+v", got)
	}
	for _, s := range []string{got[0].Scenario, got[0].Steps[0]} {
		if len(s) > MaxLineBytes || !utf8.ValidString(s) || !strings.HasSuffix(s, "…") {
			t.Errorf("%d bytes, valid %v, want at most %d ending in …", len(s), utf8.ValidString(s), MaxLineBytes)
		}
	}
}

// names are the scenario names of s, in order.
func names(s sessionapi.Scenarios) []string {
	var out []string
	for _, sc := range s.Scenarios {
		out = append(out, sc.File+": "+sc.Scenario)
	}
	return out
}

func TestScenariosScan(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{
		"services/x/guard_test.go":        goTest,
		"services/x/guard.go":             "// Scenario: not a test file\n",
		"tests/test_retry.py":             pyTest,
		"web/status.spec.ts":              tsTest,
		"tests/fixtures/blob.bin":         "\x00\x01// Scenario: binary\n",
		"vendor/dep/dep_test.go":          "// Scenario: vendored\n",
		"web/node_modules/m/a.test.js":    "// Scenario: a dependency's\n",
		".git/hooks/x_test.go":            "// Scenario: in .git\n",
		"pkg/vendor/v_test.go":            "// Scenario: nested vendor\n",
		"features/login.feature":          "Feature: Login\n  Scenario: Good password\n",
		"web/src/__tests__/deep/a.js":     "// Scenario: jest dir\n",
		"src/not_tests/test_helper.txt":   "# Scenario: not matched\n",
		"services/y/empty_test.go":        "package y\n",
		"services/y/unterminated_test.go": "// Scenario: no newline at the end",
	})
	got, err := Scenarios(t.Context(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"features/login.feature: Good password",
		"services/x/guard_test.go: A comment from an unlisted login is dropped before dispatch",
		"services/x/guard_test.go: A listed login passes",
		"services/y/unterminated_test.go: no newline at the end",
		"tests/test_retry.py: A failed delivery is retried with backoff",
		"tests/test_retry.py: Giving up",
		"web/src/__tests__/deep/a.js: jest dir",
		"web/status.spec.ts: The page lists sessions",
		"web/status.spec.ts: An empty registry",
		"web/status.spec.ts: Stale sessions",
	}
	if diff := cmp.Diff(want, names(got)); diff != "" {
		t.Errorf("scenarios (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(DefaultGlobs(), got.Globs); diff != "" {
		t.Errorf("globs (-want +got):\n%s", diff)
	}
	if got.Truncated {
		t.Error("truncated")
	}
	// The scan's scenario is the parser's, file and line included.
	first := got.Scenarios[1]
	if first.Line != 4 || first.Requirement != "docs/specs/issue-15/requirements.md#R4" || first.Feature != "Authorized-actor guard" || len(first.Steps) != 3 {
		t.Errorf("guard_test.go's first scenario: %+v", first)
	}
}

func TestScenariosGlobSources(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		"a_test.go":         "// Scenario: go\n",
		"it/flow.txt":       "# Scenario: config's\n",
		"other/readme.md":   "Scenario: argument's\n",
		"tests/test_x.py":   "# Scenario: python\n",
		"it/deeper/x.txt":   "# Scenario: not config's\n",
		"other/sub/more.md": "Scenario: argument's too\n",
	}
	for _, c := range []struct {
		name   string
		config string // "" for no config file
		globs  []string
		want   []string
		used   []string
	}{
		{
			name: "defaults", want: []string{"a_test.go: go", "tests/test_x.py: python"}, used: DefaultGlobs(),
		},
		{
			name: "config", config: "testing:\n  integrationTestGlobs:\n    - it/*.txt\n",
			want: []string{"it/flow.txt: config's"}, used: []string{"it/*.txt"},
		},
		{
			name: "config, one glob without a list", config: "testing:\n  integrationTestGlobs: it/*.txt\n",
			want: []string{"it/flow.txt: config's"}, used: []string{"it/*.txt"},
		},
		{
			name: "the argument over the config", config: "testing:\n  integrationTestGlobs:\n    - it/*.txt\n", globs: []string{"other/**/*.md"},
			want: []string{"other/readme.md: argument's", "other/sub/more.md: argument's too"}, used: []string{"other/**/*.md"},
		},
		{
			name: "an empty list in the config: defaults", config: "testing:\n  integrationTestGlobs: []\n",
			want: []string{"a_test.go: go", "tests/test_x.py: python"}, used: DefaultGlobs(),
		},
		{
			name: "a null in the config: defaults", config: "testing:\n  integrationTestGlobs:\n",
			want: []string{"a_test.go: go", "tests/test_x.py: python"}, used: DefaultGlobs(),
		},
		{
			name: "a broken config: defaults", config: "testing: [integrationTestGlobs: {",
			want: []string{"a_test.go: go", "tests/test_x.py: python"}, used: DefaultGlobs(),
		},
		{
			name: "testing of the wrong shape: defaults", config: "testing: 3\n",
			want: []string{"a_test.go: go", "tests/test_x.py: python"}, used: DefaultGlobs(),
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			fs := map[string]string{}
			for k, v := range files {
				fs[k] = v
			}
			if c.config != "" {
				fs[ConfigPath] = c.config
			}
			got, err := Scenarios(t.Context(), tree(t, fs), c.globs)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(c.want, names(got)); diff != "" {
				t.Errorf("scenarios (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.used, got.Globs); diff != "" {
				t.Errorf("globs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestScenariosHostileGlobs(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{"a_test.go": "// Scenario: x\n"})
	for _, globs := range [][]string{
		{"/abs/*"},
		{"**/*_test.go", "../*"},
		{"a/../../*"},
		{"["},
		slices.Repeat([]string{"*"}, MaxGlobs+1),
	} {
		got, err := Scenarios(t.Context(), dir, globs)
		if !errors.Is(err, ErrBadGlob) || !strings.Contains(err.Error(), "request") {
			t.Errorf("globs %q: %v, want ErrBadGlob naming the request", globs, err)
		}
		if len(got.Scenarios) != 0 {
			t.Errorf("globs %q: scenarios %v", globs, names(got))
		}
	}
	// A bad glob is refused before the checkout is even looked at.
	if _, err := Scenarios(t.Context(), "", []string{"../x"}); !errors.Is(err, ErrBadGlob) {
		t.Errorf("no workspace, bad glob: %v, want ErrBadGlob", err)
	}
	// The repository's own globs are held to the same rules.
	for _, cfg := range []string{
		"testing:\n  integrationTestGlobs: [../outside/*]\n",
		"testing:\n  integrationTestGlobs: [/abs/*]\n",
		"testing:\n  integrationTestGlobs: [{a: b}]\n",
		"testing:\n  integrationTestGlobs: [~]\n",
	} {
		d := tree(t, map[string]string{ConfigPath: cfg, "a_test.go": "// Scenario: x\n"})
		if _, err := Scenarios(t.Context(), d, nil); !errors.Is(err, ErrBadGlob) || !strings.Contains(err.Error(), "integrationTestGlobs") {
			t.Errorf("config %q: %v, want ErrBadGlob naming integrationTestGlobs", cfg, err)
		}
	}
}

func TestScenariosLinksNotFollowed(t *testing.T) {
	t.Parallel()
	outDir, outFile := secret(t)
	dir := tree(t, map[string]string{"tests/in_test.go": "// Scenario: inside\n"})
	symlink(t, dir, "tests/loop", "..")           // a directory loop
	symlink(t, dir, "tests/self", ".")            // another
	symlink(t, dir, "tests/outside", outDir)      // a directory outside
	symlink(t, dir, "tests/out_test.go", outFile) // a file outside
	symlink(t, dir, "tests/twin_test.go", "in_test.go")
	got, err := Scenarios(t.Context(), dir, []string{"**/*"})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"tests/in_test.go: inside"}, names(got)); diff != "" {
		t.Errorf("scenarios (-want +got):\n%s", diff)
	}
}

func TestScenariosBounds(t *testing.T) {
	t.Parallel()
	many := func(n int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, "// Scenario: s%d\n", i)
		}
		return b.String()
	}
	files := map[string]string{
		"a_test.go": many(3),
		"b_test.go": many(3),
		"c_test.go": many(3),
		"d.go":      "",
		"e.go":      "",
	}
	for _, c := range []struct {
		name string
		lim  limits
		want int
	}{
		{"none reached", defaultLimits, 9},
		{"files", limits{entries: 100, files: 2, fileBytes: 1 << 20, scenarios: 100, textBytes: 1 << 20}, 6},
		{"entries", limits{entries: 3, files: 100, fileBytes: 1 << 20, scenarios: 100, textBytes: 1 << 20}, 6}, // ".", a, b
		{"scenarios", limits{entries: 100, files: 100, fileBytes: 1 << 20, scenarios: 4, textBytes: 1 << 20}, 4},
		{"file bytes: the cut line is not read", limits{entries: 100, files: 100, fileBytes: 30, scenarios: 100, textBytes: 1 << 20}, 3},
		{"text bytes", limits{entries: 100, files: 100, fileBytes: 1 << 20, scenarios: 100, textBytes: 100}, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := scan(t.Context(), tree(t, files), nil, c.lim)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Scenarios) != c.want {
				t.Errorf("%d scenarios, want %d: %v", len(got.Scenarios), c.want, names(got))
			}
			if got.Truncated != (c.want != 9) {
				t.Errorf("truncated %v", got.Truncated)
			}
		})
	}
}

func TestScenariosCancelled(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{"a_test.go": "// Scenario: x\n"})
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := Scenarios(ctx, dir, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v, want context.Canceled", err)
	}
}

// FuzzScenarios feeds the parser arbitrary file content: it must not panic,
// and what it yields must be well formed.
func FuzzScenarios(f *testing.F) {
	for _, s := range []string{
		goTest, pyTest, tsTest,
		"",
		"Scenario:",
		"Feature:\nScenario:\nGiven \nRequirement:\n",
		"/**/\n*/ Scenario: x */\n\"\"\"Scenario: y\"\"\"",
		"// Scenario: \xff\xfe\n// Given \xc3\n",
		"\r\n\r\n// Scenario: crlf\r\n//   Then done\r\n",
		"# Requirement: R\n# Feature: F\n# Requirement: RF\n# Scenario: S\n# Requirement: RS\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		lines := strings.Split(string(text), "\n")
		for s := range parse("f_test.go", text) {
			if s.File != "f_test.go" {
				t.Fatalf("file %q", s.File)
			}
			if s.Line < 1 || s.Line > len(lines) {
				t.Fatalf("line %d of %d", s.Line, len(lines))
			}
			if l := stripLine(lines[s.Line-1]); !strings.HasPrefix(l, "Scenario:") && !strings.HasPrefix(l, "Scenario Outline:") {
				t.Fatalf("line %d is %q, no scenario", s.Line, lines[s.Line-1])
			}
			for _, v := range append([]string{s.Feature, s.Scenario, s.Requirement}, s.Steps...) {
				if !utf8.ValidString(v) || len(v) > MaxLineBytes {
					t.Fatalf("field %q: valid %v, %d bytes", v, utf8.ValidString(v), len(v))
				}
			}
		}
	})
}
