package graph

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

var approval = Approval{
	Login: "alice", Node: "design-approval", At: t0,
	Provenance: Provenance{Channel: "slack", Member: "U012AB3CD", RecordURL: "https://github.com/octo/repo/issues/15#issuecomment-7", EventID: "slack:Ev7"},
}

func TestApprovalEntry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a    Approval
		want string
	}{
		{approval, "@alice (design-approval, 2026-05-04T09:30:00Z, via slack U012AB3CD, https://github.com/octo/repo/issues/15#issuecomment-7)"},
		{Approval{Login: "@bob", Node: "review", Provenance: Provenance{Channel: "github", EventID: "gh:1"}}, "@bob (review, via github, event gh:1)"},
		{Approval{Login: "bob", Node: "review"}, "@bob (review)"},
	}
	for _, tt := range tests {
		if got := tt.a.Entry(); got != tt.want {
			t.Errorf("Entry() = %q, want %q", got, tt.want)
		}
	}
}

func TestAddApproval(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"template", "block", "absent", "none", "flow", "null", "already"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			in, err := os.ReadFile(filepath.Join("testdata", "frontmatter", name+".md"))
			if err != nil {
				t.Fatal(err)
			}
			out, err := AddApproval(in, approval)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, filepath.Join("frontmatter", name+".golden"), string(out))
			// The result parses, names alice once, and adding again changes nothing.
			fm := frontMatter(t, out)
			n := 0
			for _, e := range fm.ApprovedBy {
				if strings.HasPrefix(strings.ToLower(e), "@alice (design-approval") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("approvedBy = %q, want one alice entry", fm.ApprovedBy)
			}
			again, err := AddApproval(out, approval)
			if err != nil || string(again) != string(out) {
				t.Errorf("second AddApproval changed the document (err %v)", err)
			}
			// The body is byte-stable.
			if body := bodyOf(in); !strings.HasSuffix(string(out), body) {
				t.Errorf("body changed")
			}
		})
	}
}

// CRLF documents get CRLF lines (built here: git may normalise a CRLF file).
func TestAddApprovalCRLF(t *testing.T) {
	t.Parallel()
	crlf := func(b []byte) []byte { return []byte(strings.ReplaceAll(string(b), "\n", "\r\n")) }
	in, err := os.ReadFile(filepath.Join("testdata", "frontmatter", "template.md"))
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(filepath.Join("testdata", "frontmatter", "template.golden"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := AddApproval(crlf(in), approval)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != string(crlf(want)) {
		t.Errorf("got %q\nwant %q", out, crlf(want))
	}
}

func frontMatter(t *testing.T, doc []byte) (fm struct {
	ApprovedBy []string `yaml:"approvedBy"`
}) {
	t.Helper()
	s := strings.ReplaceAll(string(doc), "\r\n", "\n")
	parts := strings.SplitN(s, "---\n", 3)
	if len(parts) != 3 || parts[0] != "" {
		t.Fatalf("no front matter in %q", doc)
	}
	if err := yaml.Unmarshal([]byte(parts[1]), &fm); err != nil {
		t.Fatalf("front matter does not parse: %v\n%s", err, parts[1])
	}
	return fm
}

// bodyOf is what follows the front matter (all of doc when it has none).
func bodyOf(doc []byte) string {
	s := string(doc)
	if !strings.HasPrefix(s, "---") {
		return s
	}
	rest := s[3:]
	for _, sep := range []string{"\n---\r\n", "\n---\n"} {
		if i := strings.Index(rest, sep); i >= 0 {
			return rest[i+len(sep):]
		}
	}
	return ""
}

func TestAddApprovalErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  string
		a    Approval
	}{
		{"no login", "---\n---\n", Approval{Node: "x"}},
		{"unclosed", "---\ntitle: x\n", approval},
		{"not yaml", "---\ntitle: [\n---\n", approval},
		{"not a mapping", "---\n- a\n---\n", approval},
		{"not a list", "---\napprovedBy: alice\n---\n", approval},
		{"nested entry", "---\napprovedBy:\n  - {a: b}\n---\n", approval},
		{"multi-line flow", "---\napprovedBy: [\n  a,\n  b]\n---\n", approval},
	}
	for _, tt := range tests {
		if _, err := AddApproval([]byte(tt.doc), tt.a); !errors.Is(err, ErrFrontMatter) {
			t.Errorf("%s: err = %v, want ErrFrontMatter", tt.name, err)
		}
	}
}
