package repoinfo

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

func TestInstructionsDocStates(t *testing.T) {
	t.Parallel()
	_, outside := secret(t)
	dir := tree(t, map[string]string{
		ConfigPath: `
customInstructions:
  docs:
    - path: docs/team-conventions.md
      notes: House style, naming, PR etiquette.
    - path: docs/absent.md
    - path: docs/adir
    - path: docs/binary.md
    - path: docs/dangling.md
    - path: docs/escape.md
    - docs/just-a-string.md
    - notes: no path at all
    - path: "   "
    - path: /abs/doc.md
    - path: docs/../../outside.md
    - path: [a, b]
    - path: ./docs/team-conventions.md
`,
		"docs/team-conventions.md": "# Conventions\nUse tabs.\n",
		"docs/adir/":               "",
		"docs/binary.md":           "PK\x03\x04\x00\x00binary",
	})
	symlink(t, dir, "docs/dangling.md", "nowhere.md")
	symlink(t, dir, "docs/escape.md", outside)

	got, err := Instructions(dir, "implement", "build")
	if err != nil {
		t.Fatal(err)
	}
	conv := "# Conventions\nUse tabs.\n"
	want := []sessionapi.InstructionDoc{
		{Path: "docs/team-conventions.md", Notes: "House style, naming, PR etiquette.", State: sessionapi.DocPresent, Bytes: len(conv), Text: conv},
		{Path: "docs/absent.md", State: sessionapi.DocMissing},
		{Path: "docs/adir", State: sessionapi.DocUnreadable},
		{Path: "docs/binary.md", State: sessionapi.DocUnreadable},
		{Path: "docs/dangling.md", State: sessionapi.DocMissing},
		{Path: "docs/escape.md", State: sessionapi.DocUnreadable},
		{State: sessionapi.DocInvalid},
		{Notes: "no path at all", State: sessionapi.DocInvalid},
		{Path: "   ", State: sessionapi.DocInvalid},
		{Path: "/abs/doc.md", State: sessionapi.DocInvalid},
		{Path: "docs/../../outside.md", State: sessionapi.DocInvalid},
		{State: sessionapi.DocInvalid},
		{Path: "./docs/team-conventions.md", State: sessionapi.DocPresent, Bytes: len(conv), Text: conv},
	}
	if diff := cmp.Diff(want, got.Docs); diff != "" {
		t.Errorf("docs (-want +got):\n%s", diff)
	}
	if got.Node != "implement" || got.Phase != "build" {
		t.Errorf("node, phase = %q, %q", got.Node, got.Phase)
	}
	for key, part := range map[string]string{
		"docs/absent.md":              "missing",
		"docs/adir":                   "a directory",
		"docs/binary.md":              "binary",
		"docs/escape.md":              "unreadable",
		"customInstructions.docs[6]":  "not a mapping",
		"customInstructions.docs[7]":  "has no path",
		"customInstructions.docs[8]":  "blank path",
		"/abs/doc.md":                 "absolute",
		"docs/../../outside.md":       `".."`,
		"customInstructions.docs[11]": "not a string",
		NoteStep:                      "no .the-loop/instructions/implement.md or .the-loop/instructions/build.md",
	} {
		if !strings.Contains(got.Notes[key], part) {
			t.Errorf("Notes[%q] = %q, want it to say %q", key, got.Notes[key], part)
		}
	}
	if _, ok := got.Notes[NoteConfig]; ok {
		t.Errorf("a readable config has a note: %q", got.Notes[NoteConfig])
	}
	for _, d := range got.Docs {
		if strings.Contains(d.Text, "TOP SECRET") {
			t.Errorf("%s: a link out of the checkout was followed", d.Path)
		}
	}
}

func TestInstructionsOnMissing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		onMissing string
		note      string // "" for none
		config    string // part of NoteConfig, "" for none
	}{
		{"", "missing", ""},
		{"onMissing: warn", "missing", ""},
		{"onMissing: error", "error", ""},
		{"onMissing: ignore", "", ""},
		{"onMissing: shout", "missing", `"shout" is none of warn, error, ignore`},
	} {
		t.Run(c.onMissing, func(t *testing.T) {
			t.Parallel()
			dir := tree(t, map[string]string{
				ConfigPath: "customInstructions:\n  docs:\n    - path: docs/gone.md\n  " + c.onMissing + "\n",
			})
			got, err := Instructions(dir, "", "")
			if err != nil {
				t.Fatal(err)
			}
			want := []sessionapi.InstructionDoc{{Path: "docs/gone.md", State: sessionapi.DocMissing}}
			if diff := cmp.Diff(want, got.Docs); diff != "" {
				t.Errorf("docs (-want +got):\n%s", diff)
			}
			note, ok := got.Notes["docs/gone.md"]
			switch {
			case c.note == "" && ok:
				t.Errorf("note %q, want none", note)
			case c.note != "" && !strings.HasPrefix(note, c.note):
				t.Errorf("note %q, want it to start with %q", note, c.note)
			}
			if !strings.Contains(got.Notes[NoteConfig], c.config) || (c.config == "") != (got.Notes[NoteConfig] == "") {
				t.Errorf("config note %q, want %q", got.Notes[NoteConfig], c.config)
			}
			if _, ok := got.Notes[NoteStep]; ok {
				t.Errorf("no node nor phase, yet a step note: %q", got.Notes[NoteStep])
			}
		})
	}
}

func TestInstructionsStepDoc(t *testing.T) {
	t.Parallel()
	reg := ConfigPath + ""
	for _, c := range []struct {
		name        string
		files       map[string]string
		node, phase string
		want        *sessionapi.InstructionDoc // the last doc, nil: no step doc
		note        string                     // part of Notes[NoteStep]
	}{
		{
			name:  "by node",
			files: map[string]string{StepDir + "/implement.md": "node", StepDir + "/build.md": "phase"},
			node:  "implement", phase: "build",
			want: &sessionapi.InstructionDoc{Path: StepDir + "/implement.md", Step: true, State: sessionapi.DocPresent, Bytes: 4, Text: "node"},
		},
		{
			name:  "by phase when the node has none",
			files: map[string]string{StepDir + "/build.md": "phase"},
			node:  "implement", phase: "build",
			want: &sessionapi.InstructionDoc{Path: StepDir + "/build.md", Step: true, State: sessionapi.DocPresent, Bytes: 5, Text: "phase"},
		},
		{
			name:  "the node's is unreadable: listed, the phase's is not read",
			files: map[string]string{StepDir + "/implement.md/": "", StepDir + "/build.md": "phase"},
			node:  "implement", phase: "build",
			want: &sessionapi.InstructionDoc{Path: StepDir + "/implement.md", Step: true, State: sessionapi.DocUnreadable},
		},
		{
			name:  "neither",
			files: map[string]string{StepDir + "/other.md": "x"},
			node:  "implement", phase: "build",
			note: "no .the-loop/instructions/implement.md or .the-loop/instructions/build.md",
		},
		{
			name:  "same node and phase tried once",
			files: map[string]string{},
			node:  "review", phase: "review",
			note: "no .the-loop/instructions/review.md",
		},
		{
			name:  "a node name that is a path is not used",
			files: map[string]string{"secret.md": "no", StepDir + "/build.md": "phase"},
			node:  "../../secret", phase: "build",
			want: &sessionapi.InstructionDoc{Path: StepDir + "/build.md", Step: true, State: sessionapi.DocPresent, Bytes: 5, Text: "phase"},
		},
		{
			name:  "bad names only",
			files: map[string]string{},
			node:  "a/b", phase: "..",
			note: `"a/b" and ".." cannot name a document`,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			files := map[string]string{reg: "customInstructions:\n  docs:\n    - path: README.md\n", "README.md": "readme"}
			for k, v := range c.files {
				files[k] = v
			}
			got, err := Instructions(tree(t, files), c.node, c.phase)
			if err != nil {
				t.Fatal(err)
			}
			if got.Docs[0].Path != "README.md" || got.Docs[0].Step {
				t.Errorf("first doc %+v, want the registered README.md", got.Docs[0])
			}
			var last *sessionapi.InstructionDoc
			if len(got.Docs) > 1 {
				last = &got.Docs[len(got.Docs)-1]
			}
			if diff := cmp.Diff(c.want, last); diff != "" {
				t.Errorf("step doc (-want +got):\n%s", diff)
			}
			if !strings.Contains(got.Notes[NoteStep], c.note) || (c.note == "") != (got.Notes[NoteStep] == "") {
				t.Errorf("step note %q, want %q", got.Notes[NoteStep], c.note)
			}
		})
	}
}

func TestInstructionsSymlinkOut(t *testing.T) {
	t.Parallel()
	outDir, outFile := secret(t)
	dir := tree(t, map[string]string{ConfigPath: "customInstructions:\n  docs:\n    - path: linked/secret.md\n"})
	symlink(t, dir, StepDir+"/implement.md", outFile)
	symlink(t, dir, "linked", outDir)
	got, err := Instructions(dir, "implement", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Docs) != 2 {
		t.Fatalf("docs %+v, want the registered one and the step's", got.Docs)
	}
	for _, d := range got.Docs {
		if d.State == sessionapi.DocPresent || strings.Contains(d.Text, "TOP SECRET") {
			t.Errorf("%s: %s %q: a link out of the checkout was followed", d.Path, d.State, d.Text)
		}
	}
}

func TestInstructionsBrokenConfig(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		files  map[string]string
		note   string
		linkTo string // ConfigPath is a link to this file outside
	}{
		{"missing", map[string]string{}, "there is no " + ConfigPath, ""},
		{"not YAML", map[string]string{ConfigPath: "customInstructions: [docs: {"}, "not valid YAML", ""},
		{"a list", map[string]string{ConfigPath: "- a\n- b\n"}, "not a mapping", ""},
		{"empty", map[string]string{ConfigPath: ""}, "is empty", ""},
		{"a directory", map[string]string{ConfigPath + "/": ""}, "a directory", ""},
		{"binary", map[string]string{ConfigPath: "a: \x00"}, "binary", ""},
		{"too large", map[string]string{ConfigPath: "customInstructions:\n  docs:\n    - path: README.md\n#" + strings.Repeat("x", MaxConfigBytes)}, "larger than 256 KiB", ""},
		{"docs not a list", map[string]string{ConfigPath: "customInstructions:\n  docs: README.md\n"}, "not a list", ""},
		{"outside", map[string]string{}, "cannot be read", "x"},
		{"deep nesting", map[string]string{ConfigPath: strings.Repeat("[", 100_000)}, "not valid YAML", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.files["README.md"] = "readme"
			dir := tree(t, c.files)
			if c.linkTo != "" {
				_, out := secret(t)
				symlink(t, dir, ConfigPath, out)
			}
			got, err := Instructions(dir, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Docs) != 0 || got.Docs == nil {
				t.Errorf("docs %#v, want an empty list", got.Docs)
			}
			if !strings.Contains(got.Notes[NoteConfig], c.note) {
				t.Errorf("config note %q, want it to say %q", got.Notes[NoteConfig], c.note)
			}
		})
	}
}

func TestInstructionsAliases(t *testing.T) {
	t.Parallel()
	dir := tree(t, map[string]string{
		ConfigPath:  "shared: &d\n  - path: README.md\n    notes: &n read me\ncustomInstructions:\n  docs: *d\n  onMissing: *n\n",
		"README.md": "readme",
	})
	got, err := Instructions(dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []sessionapi.InstructionDoc{{Path: "README.md", Notes: "read me", State: sessionapi.DocPresent, Bytes: 6, Text: "readme"}}
	if diff := cmp.Diff(want, got.Docs); diff != "" {
		t.Errorf("docs (-want +got):\n%s", diff)
	}
}

func TestInstructionsTruncation(t *testing.T) {
	t.Parallel()
	// "é" is two bytes: an odd cap would split one.
	big := strings.Repeat("é", MaxDocBytes/2) + "tail" // MaxDocBytes+4 bytes
	files := map[string]string{StepDir + "/implement.md": strings.Repeat("s", MaxDocBytes)}
	cfg := "customInstructions:\n  docs:\n"
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		files["docs/"+n+".md"] = big
		cfg += "    - path: docs/" + n + ".md\n"
	}
	files[ConfigPath] = cfg
	dir := tree(t, files)
	got, err := Instructions(dir, "implement", "")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Docs) != 6 {
		t.Fatalf("%d docs, want 6", len(got.Docs))
	}
	total := 0
	for _, d := range got.Docs {
		total += len(d.Text)
		if !utf8.ValidString(d.Text) {
			t.Errorf("%s: text is not valid UTF-8 (a character was split)", d.Path)
		}
		if len(d.Text) > MaxDocBytes {
			t.Errorf("%s: %d bytes of text, over the %d cap", d.Path, len(d.Text), MaxDocBytes)
		}
		if d.State != sessionapi.DocPresent {
			t.Errorf("%s: %s, want present", d.Path, d.State)
		}
	}
	if total > MaxDocsBytes {
		t.Errorf("%d bytes of text in all, over the %d cap", total, MaxDocsBytes)
	}
	step := got.Docs[5]
	if !step.Step || len(step.Text) != MaxDocBytes {
		t.Errorf("step doc %s: %d bytes, want it whole (%d): it is served first", step.Path, len(step.Text), MaxDocBytes)
	}
	a := got.Docs[0]
	if a.Bytes != len(big) || len(a.Text) != MaxDocBytes || strings.HasSuffix(a.Text, "tail") {
		t.Errorf("docs/a.md: Bytes %d, %d bytes of text; want %d and %d", a.Bytes, len(a.Text), len(big), MaxDocBytes)
	}
	if n := got.Notes["docs/a.md"]; !strings.Contains(n, "truncated") || !strings.Contains(n, "64 KiB per document") {
		t.Errorf("docs/a.md note %q", n)
	}
	// 256 KiB = the step's 64 + a, b, c at 64 each: d and e are left out.
	for _, p := range []string{"docs/d.md", "docs/e.md"} {
		if n := got.Notes[p]; !strings.Contains(n, "256 KiB for all documents") {
			t.Errorf("%s note %q, want the total cap named", p, n)
		}
	}
	if got.Docs[4].Text != "" {
		t.Errorf("docs/e.md: %d bytes of text past the total cap", len(got.Docs[4].Text))
	}
}

func TestInstructionsPermissionDenied(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root reads any file")
	}
	dir := tree(t, map[string]string{
		ConfigPath:       "customInstructions:\n  docs:\n    - path: docs/locked.md\n",
		"docs/locked.md": "locked",
	})
	if err := os.Chmod(filepath.Join(dir, "docs", "locked.md"), 0); err != nil {
		t.Fatal(err)
	}
	got, err := Instructions(dir, "", "")
	if err != nil {
		t.Fatal(err)
	}
	if got.Docs[0].State != sessionapi.DocUnreadable || !strings.Contains(got.Notes["docs/locked.md"], "permission denied") {
		t.Errorf("doc %+v, note %q: want unreadable, permission denied", got.Docs[0], got.Notes["docs/locked.md"])
	}
}

func TestInstructionsNoWorkspace(t *testing.T) {
	t.Parallel()
	for _, root := range []string{"", filepath.Join(t.TempDir(), "gone")} {
		if _, err := Instructions(root, "n", "p"); !errors.Is(err, ErrNoWorkspace) {
			t.Errorf("Instructions(%q): %v, want ErrNoWorkspace", root, err)
		}
		if _, err := Scenarios(t.Context(), root, nil); !errors.Is(err, ErrNoWorkspace) {
			t.Errorf("Scenarios(%q): %v, want ErrNoWorkspace", root, err)
		}
	}
}
