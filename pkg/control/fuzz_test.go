package control

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse: Parse never panics, is deterministic, returns a well-formed
// Result, and finds nothing in what Defang returns.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"", "the-loop start.", "@the-loop start", "the-loop startlater", "xthe-loop start",
		"the-loop start-x", "the-loop does", "the-loop do", "THE-LOOP STOP", "the-loop contrİbute",
		"the-loop ſtop", "the-loop stop the-loop start", "```\nthe-loop stop\n```",
		"the-loop ‹defanged› stop", "halt HALT h‹defanged›alt", "\xffthe-loop pause\xfe", "Go! go.go.go",
	} {
		f.Add(s)
	}
	grammars := propertyGrammars(f)
	f.Fuzz(func(t *testing.T, body string) {
		for _, g := range grammars {
			r := g.Parse(body)
			if diff := cmp.Diff(r, g.Parse(body)); diff != "" {
				t.Fatalf("Parse(%q) not deterministic:\n%s", body, diff)
			}
			switch {
			case r.Ambiguous:
				if r.Command != "" || len(r.Matched) < 2 {
					t.Fatalf("malformed ambiguous result %+v", r)
				}
			case r.Command != "":
				if !r.Command.Valid() || !slices.Equal(r.Matched, []Command{r.Command}) || g.Keyword(r.Command) == "" {
					t.Fatalf("malformed result %+v", r)
				}
			default:
				if r.Matched != nil {
					t.Fatalf("malformed empty result %+v", r)
				}
			}
			for i := 1; i < len(r.Matched); i++ {
				if r.Matched[i-1].index() >= r.Matched[i].index() {
					t.Fatalf("Matched out of order: %v", r.Matched)
				}
			}
			d := g.Defang(body)
			if after := g.Parse(d); after.Found() {
				t.Fatalf("Parse(Defang(%q)) = %+v; defanged %q", body, after, d)
			}
			if d != g.Defang(body) {
				t.Fatalf("Defang(%q) not deterministic", body)
			}
			if !r.Found() && d != body {
				t.Fatalf("Defang changed a body with no command: %q → %q", body, d)
			}
		}
	})
}
