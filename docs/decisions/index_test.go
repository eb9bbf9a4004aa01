// Package decisions_test keeps docs/decisions/README.md, the index of the
// decision records, true: one line per record, in order, with the record's
// own title. `go test ./docs/decisions -update` rewrites it.
package decisions_test

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite README.md from the records")

// record is NNN-title.md.
var record = regexp.MustCompile(`^\d{3}-[a-z0-9-]+\.md$`)

const header = `# Decisions

Each record is a question the design left open, the decision taken and its consequences, in a few
lines. A later record that changes an earlier one says so; the earlier one stays as it was decided.
This index is generated from the records' titles (` + "`go test ./docs/decisions -update`" + `).

`

func index(t *testing.T) string {
	t.Helper()
	names, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	b.WriteString(header)
	n := 0
	for _, name := range names {
		if name == "README.md" {
			continue
		}
		if !record.MatchString(name) {
			t.Errorf("%s: a record is named NNN-title.md", name)
			continue
		}
		title, err := firstLine(name)
		if err != nil {
			t.Fatal(err)
		}
		num, rest, ok := strings.Cut(strings.TrimPrefix(title, "# "), " — ")
		if !strings.HasPrefix(title, "# ") || !ok || num != name[:3] {
			t.Errorf("%s: its first line is %q, want \"# %s — <title>\"", name, title, name[:3])
			continue
		}
		fmt.Fprintf(&b, "- [%s](%s) %s\n", num, name, rest)
		n++
	}
	if n == 0 {
		t.Fatal("no decision records found")
	}
	return b.String()
}

func firstLine(name string) (string, error) {
	f, err := os.Open(name)
	if err != nil {
		return "", err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	s.Scan()
	return strings.TrimSpace(s.Text()), s.Err()
}

// TestIndexListsEveryRecord: README.md is exactly the index of the records
// in this directory.
func TestIndexListsEveryRecord(t *testing.T) {
	want := index(t)
	if *update {
		if err := os.WriteFile("README.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatalf("%v (go test ./docs/decisions -update writes it)", err)
	}
	if string(got) != want {
		t.Errorf("docs/decisions/README.md is not the index of the records; go test ./docs/decisions -update rewrites it")
	}
}
