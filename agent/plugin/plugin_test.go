package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// agentVerbs are the verbs of the-loop a session may be told to run
// (docs/agents.md); a command file naming another is a mistake an agent
// would only find at run time.
var agentVerbs = []string{
	"ask", "check", "graph show", "graph complete", "graph escalate", "sessions register", "sessions link-pr",
	"instructions", "scenarios", "hook", "critic list", "critic run",
}

// twoWordVerbs are the verbs whose second word is part of the verb.
var twoWordVerbs = []string{"graph", "sessions", "critic"}

// markdownFiles returns every markdown file of the plugin, by path.
func markdownFiles(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		b, err := fs.ReadFile(FS(), p)
		out[p] = string(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

var slashCommand = regexp.MustCompile(`/the-loop:([A-Za-z0-9][A-Za-z0-9_-]*)`)

// Every /the-loop:<command> the spawn prompt, the skill or a command names
// ships as a command file.
func TestNamedCommandsExist(t *testing.T) {
	texts := markdownFiles(t)
	prompt, err := os.ReadFile("../../services/dispatcher/internal/prompt/texts.go")
	if err != nil {
		t.Fatal(err)
	}
	texts["the spawn prompt (services/dispatcher/internal/prompt)"] = string(prompt)
	named := 0
	for where, text := range texts {
		for _, m := range slashCommand.FindAllStringSubmatch(text, -1) {
			named++
			if _, err := fs.Stat(FS(), "commands/"+m[1]+".md"); err != nil {
				t.Errorf("%s names %s, but commands/%s.md does not ship", where, m[0], m[1])
			}
		}
	}
	if !strings.Contains(string(prompt), "/the-loop:work-on") {
		t.Error("the spawn prompt no longer names /the-loop:work-on: update this test and the plugin together")
	}
	if named < 20 {
		t.Errorf("only %d command mentions found: the pattern is broken", named)
	}
}

var (
	codeSpan  = regexp.MustCompile("`[^`\n]+`")
	verbUse   = regexp.MustCompile(`(?:^|[^A-Za-z0-9/:_-])the-loop ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?`)
	fenceLine = regexp.MustCompile("^\\s*```")
)

// code returns the code of a markdown text: its inline code spans and the
// lines of its fenced blocks, which is where a command tells the agent what
// to run.
func code(text string) []string {
	var out []string
	in := false
	for line := range strings.SplitSeq(text, "\n") {
		if fenceLine.MatchString(line) {
			in = !in
			continue
		}
		if in {
			out = append(out, line)
			continue
		}
		out = append(out, codeSpan.FindAllString(line, -1)...)
	}
	return out
}

// verbsIn returns the verbs of the-loop that the code of text runs.
func verbsIn(text string) []string {
	var out []string
	for _, c := range code(text) {
		for _, m := range verbUse.FindAllStringSubmatch(c, -1) {
			v := m[1]
			if slices.Contains(twoWordVerbs, v) && m[2] != "" {
				v += " " + m[2]
			}
			out = append(out, v)
		}
	}
	return out
}

// Every `the-loop <verb>` the plugin tells an agent to run is a verb of the
// binary.
func TestVerbsAreTheBinarys(t *testing.T) {
	used := map[string]bool{}
	for p, text := range markdownFiles(t) {
		for _, v := range verbsIn(text) {
			used[v] = true
			if !slices.Contains(agentVerbs, v) {
				t.Errorf("%s tells the agent to run `the-loop %s`, which is not an agent verb (%s)", p, v, strings.Join(agentVerbs, ", "))
			}
		}
	}
	hooks, err := ReadHooks(installed(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, groups := range hooks {
		for _, g := range groups {
			for _, h := range g.Hooks {
				for _, v := range verbsIn("`" + h.Command + "`") {
					used[v] = true
				}
			}
		}
	}
	// The parser finds what the plugin is built around.
	for _, v := range []string{"ask", "check", "graph show", "graph complete", "sessions link-pr", "instructions", "scenarios", "hook"} {
		if !used[v] {
			t.Errorf("no file runs `the-loop %s` (found %v)", v, used)
		}
	}
}

func TestVerbParser(t *testing.T) {
	text := "Prose about the-loop bus is not code.\n" +
		"Run `the-loop check --json` and `the-loop graph complete github:o/r#1`.\n" +
		"```sh\nthe-loop sessions link-pr --pull-request 3\n  the-loop ask --question x\n```\n" +
		"`/the-loop:work-on` is a command, `THE-LOOP` nothing.\n"
	got := verbsIn(text)
	want := []string{"check", "graph complete", "sessions link-pr", "ask"}
	if !slices.Equal(got, want) {
		t.Errorf("verbsIn = %v, want %v", got, want)
	}
}

// frontMatter parses the YAML front matter of a markdown text.
func frontMatter(t *testing.T, where, text string) map[string]any {
	t.Helper()
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		t.Fatalf("%s: no front matter", where)
	}
	fm, _, ok := strings.Cut(rest, "\n---\n")
	if !ok {
		t.Fatalf("%s: front matter not closed", where)
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(fm), &m); err != nil {
		t.Fatalf("%s: front matter: %v", where, err)
	}
	return m
}

// The commands the loop's flow needs ship, each with a description, and an
// argument hint where it takes an argument; the skill has a name and a
// description.
func TestCommandsAndSkill(t *testing.T) {
	files := markdownFiles(t)
	for _, c := range []string{
		"work-on", "brainstorm", "create-requirements", "create-design", "create-tasks-plan",
		"execute-tasks", "verify-work", "work-status", "ask", "open-pr",
	} {
		if _, ok := files["commands/"+c+".md"]; !ok {
			t.Errorf("commands/%s.md does not ship", c)
		}
	}
	for p, text := range files {
		if !strings.HasPrefix(p, "commands/") {
			continue
		}
		fm := frontMatter(t, p, text)
		if d, _ := fm["description"].(string); len(d) < 20 {
			t.Errorf("%s: description %q", p, d)
		}
		if h, _ := fm["argument-hint"].(string); strings.Contains(text, "$ARGUMENTS") && h == "" {
			t.Errorf("%s uses $ARGUMENTS but has no argument-hint", p)
		}
	}
	skill := frontMatter(t, "skills/the-loop/SKILL.md", files["skills/the-loop/SKILL.md"])
	if skill["name"] != Name || len(skill["description"].(string)) < 50 {
		t.Errorf("skill front matter = %v", skill)
	}
	// The rules the skill must state, by a phrase of each.
	for _, rule := range []string{
		"The graph decides the step", "never write `approvedBy`", "the-loop ask", "then stop",
		"the-loop graph complete", "docs/specs/issue-<N>/", "pull-request review", "untrusted data",
		"token is a secret", "Never print the environment",
	} {
		if !strings.Contains(files["skills/the-loop/SKILL.md"], rule) {
			t.Errorf("the skill does not say %q", rule)
		}
	}
}

func TestManifest(t *testing.T) {
	dir := installed(t)
	m, err := ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Name != Name || m.License != "MIT" || m.Repository == "" || m.Description == "" {
		t.Errorf("manifest = %+v", m)
	}
	if !regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`).MatchString(m.Version) || m.Version != Version() {
		t.Errorf("version %q, Version() %q", m.Version, Version())
	}
	if _, err := ReadManifest(t.TempDir()); err == nil {
		t.Error("a directory without a manifest read as a plugin")
	}
}

// hooks.json parses, runs only `the-loop hook …`, and has the two hooks the
// loop relies on.
func TestHooks(t *testing.T) {
	hooks, err := ReadHooks(installed(t))
	if err != nil {
		t.Fatal(err)
	}
	want := Hooks{
		"SessionStart": {{Matcher: "startup|resume", Hooks: []Hook{{Type: "command", Command: "the-loop hook session-start --harness claude", Timeout: 30}}}},
		"Stop":         {{Hooks: []Hook{{Type: "command", Command: "the-loop hook stop --harness claude", Timeout: 30}}}},
	}
	got, _ := json.Marshal(hooks)
	exp, _ := json.Marshal(want)
	if !bytes.Equal(got, exp) {
		t.Errorf("hooks = %s\nwant   %s", got, exp)
	}
	for ev, groups := range hooks {
		for _, g := range groups {
			for _, h := range g.Hooks {
				if h.Type != "command" || !strings.HasPrefix(h.Command, "the-loop hook ") {
					t.Errorf("%s hook %+v runs something other than `the-loop hook`", ev, h)
				}
			}
		}
	}
	if h, err := ReadHooks(t.TempDir()); h != nil || err != nil {
		t.Errorf("no hooks file: %v, %v", h, err)
	}
}

func TestMatches(t *testing.T) {
	for _, c := range []struct {
		matcher, value string
		want           bool
	}{
		{"startup|resume", "startup", true},
		{"startup|resume", "resume", true},
		{"startup|resume", "clear", false},
		{"startup|resume", "startupx", false},
		{"", "anything", true},
		{"*", "anything", true},
		{"res(", "res(", true},
	} {
		if got := (MatcherGroup{Matcher: c.matcher}).Matches(c.value); got != c.want {
			t.Errorf("%q matches %q = %v", c.matcher, c.value, got)
		}
	}
}

func TestResolveCommand(t *testing.T) {
	dir := installed(t)
	file, ok := ResolveCommand(dir, Name, "/the-loop:work-on")
	if !ok || file != filepath.Join(dir, "commands", "work-on.md") {
		t.Errorf("work-on = %q, %v", file, ok)
	}
	for _, slash := range []string{"/other:work-on", "/the-loop:nope", "/the-loop:../README", "/the-loop:", "/work-on", "/the-loop:work-on/x"} {
		if f, ok := ResolveCommand(dir, Name, slash); ok {
			t.Errorf("%s resolved to %s", slash, f)
		}
	}
}

// installed installs the plugin in a new directory.
func installed(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "plugin")
	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// snapshot is the tree under dir: path → mode and content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		v := info.Mode().String()
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			v += " " + string(b)
		}
		out[rel] = v
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Install writes the tree once; a second Install changes nothing; it
// repairs a tampered file, a removed one and a symbolic link planted in its
// place, removes a file an earlier version shipped, and leaves anything
// else alone.
func TestInstall(t *testing.T) {
	dir := installed(t)
	if _, err := os.Stat(filepath.Join(dir, ManifestPath)); err != nil {
		t.Fatal(err)
	}
	first := snapshot(t, dir)
	for p, v := range first {
		isDir := strings.HasPrefix(v, "d")
		if isDir && !strings.HasPrefix(v, "drwxr-xr-x") || !isDir && !strings.HasPrefix(v, "-rw-r--r--") {
			t.Errorf("%s: %s", p, v[:10])
		}
	}
	shipped := 0
	_ = fs.WalkDir(FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if !d.IsDir() {
			shipped++
			b, _ := fs.ReadFile(FS(), p)
			if first[filepath.FromSlash(p)] != "-rw-r--r-- "+string(b) {
				t.Errorf("%s not installed as shipped", p)
			}
		}
		return nil
	})
	stat := func(p string) os.FileInfo {
		st, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	before := stat("commands/work-on.md").ModTime()
	time.Sleep(10 * time.Millisecond) // so a rewrite would show in the mtime
	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	if got := snapshot(t, dir); !mapsEqual(got, first) {
		t.Error("a second Install changed the tree")
	}
	if !stat("commands/work-on.md").ModTime().Equal(before) {
		t.Error("a second Install rewrote an unchanged file")
	}

	// Tamper: edit a file, remove one, replace one by a link to a file
	// outside, add a file of the user's, and list a file an older version
	// shipped.
	outside := filepath.Join(t.TempDir(), "outside")
	must(t, os.WriteFile(outside, []byte("not the plugin's"), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "hooks/hooks.json"), []byte(`{"hooks":{}}`), 0o666))
	must(t, os.Remove(filepath.Join(dir, "commands/ask.md")))
	must(t, os.Remove(filepath.Join(dir, "skills/the-loop/SKILL.md")))
	must(t, os.Symlink(outside, filepath.Join(dir, "skills/the-loop/SKILL.md")))
	must(t, os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o600))
	must(t, os.MkdirAll(filepath.Join(dir, "old/deep"), 0o755))
	must(t, os.WriteFile(filepath.Join(dir, "old/deep/gone.md"), []byte("retired"), 0o644))
	elsewhere := t.TempDir()
	must(t, os.WriteFile(filepath.Join(elsewhere, "precious.md"), []byte("keep"), 0o644))
	must(t, os.Symlink(elsewhere, filepath.Join(dir, "linked")))
	list, err := os.ReadFile(filepath.Join(dir, installedList))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, installedList), append(list, []byte("old/deep/gone.md\n../escape\nlinked/precious.md\n")...), 0o644))

	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	got := snapshot(t, dir)
	if got["notes.txt"] != "-rw------- mine" {
		t.Errorf("the user's file: %q", got["notes.txt"])
	}
	if b, err := os.ReadFile(filepath.Join(elsewhere, "precious.md")); err != nil || string(b) != "keep" {
		t.Errorf("Install removed a file through a link: %v", err)
	}
	delete(got, "notes.txt")
	delete(got, "linked")
	if !mapsEqual(got, first) {
		for p, v := range got {
			if first[p] != v {
				t.Errorf("after repair %s = %.40q, want %.40q", p, v, first[p])
			}
		}
		for p := range first {
			if _, ok := got[p]; !ok {
				t.Errorf("after repair %s is missing", p)
			}
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "not the plugin's" {
		t.Error("Install wrote through a symbolic link")
	}
	if len(first) < shipped {
		t.Errorf("%d entries installed for %d files", len(first), shipped)
	}
}

// Install over an identical tree writes nothing — no file, no temporary
// file, no list — so that a dispatcher starting on an image whose plugin is
// root's and read-only (deploy/Dockerfile) leaves it as it is: every entry is
// the same file afterwards, with the same modification time, directories
// included (a file created, renamed or removed in one would change its).
func TestInstallIdenticalWritesNothing(t *testing.T) {
	dir := installed(t)
	before := map[string]os.FileInfo{}
	walk := func(visit func(rel string, info os.FileInfo)) {
		t.Helper()
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := os.Lstat(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			visit(rel, info)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	walk(func(rel string, info os.FileInfo) { before[rel] = info })
	if _, ok := before[installedList]; !ok {
		t.Fatalf("no %s after Install", installedList)
	}
	time.Sleep(20 * time.Millisecond) // so a write would show in a modification time
	if err := Install(dir); err != nil {
		t.Fatal(err)
	}
	seen := 0
	walk(func(rel string, info os.FileInfo) {
		seen++
		was, ok := before[rel]
		switch {
		case !ok:
			t.Errorf("Install over an identical tree created %s", rel)
		case !os.SameFile(was, info):
			t.Errorf("Install over an identical tree replaced %s", rel)
		case !was.ModTime().Equal(info.ModTime()) || was.Mode() != info.Mode():
			t.Errorf("Install over an identical tree changed %s: %v %v, then %v %v", rel, was.Mode(), was.ModTime(), info.Mode(), info.ModTime())
		}
	})
	if seen != len(before) {
		t.Errorf("%d entries before the second Install, %d after", len(before), seen)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The real harness accepts the installed plugin: `claude plugin validate`
// on it succeeds. Without Claude Code the test skips, unless
// LOOP_TEST_REQUIRE_CLAUDE=1 (CI) makes that a failure. LOOP_TEST_CLAUDE
// names the binary when it is not on PATH.
func TestClaudeValidates(t *testing.T) {
	bin := os.Getenv("LOOP_TEST_CLAUDE")
	if bin == "" {
		bin, _ = exec.LookPath("claude")
	}
	if bin == "" {
		if os.Getenv("LOOP_TEST_REQUIRE_CLAUDE") == "1" {
			t.Fatal("LOOP_TEST_REQUIRE_CLAUDE=1 but no Claude Code: put `claude` on PATH or name it in LOOP_TEST_CLAUDE")
		}
		t.Skip("Claude Code is not installed (no `claude` on PATH, LOOP_TEST_CLAUDE unset): the plugin is not checked by the real harness; LOOP_TEST_REQUIRE_CLAUDE=1 makes this a failure")
	}
	dir := installed(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "plugin", "validate", dir)
	// A home of its own, so the check neither reads nor writes the
	// user's Claude Code settings.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"))
	out, err := cmd.CombinedOutput()
	t.Logf("%s plugin validate:\n%s", bin, out)
	if err != nil {
		t.Fatalf("claude plugin validate: %v", err)
	}
	if !strings.Contains(string(out), "Validation passed") {
		t.Error("claude plugin validate did not say the validation passed")
	}
	// No warnings either: --strict fails on what the harness tolerates
	// (unknown fields, missing metadata).
	strict := exec.CommandContext(ctx, bin, "plugin", "validate", "--strict", dir)
	strict.Env = cmd.Env
	if out, err := strict.CombinedOutput(); err != nil {
		t.Errorf("claude plugin validate --strict: %v\n%s", err, out)
	}
}
