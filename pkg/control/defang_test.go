package control

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDefang(t *testing.T) {
	t.Parallel()
	def := Default()
	custom := mustNew(t, true, map[string]string{"stop": "Halt", "pause": "the-loop hold on", "do": "the-loop do it"})
	tests := []struct {
		name    string
		grammar Grammar
		in      string
		want    string
	}{
		{"two-word keyword", def, "the-loop stop", "the-loop ‹defanged› stop"},
		{"configured spelling, not the text's", def, "THE-LOOP Stop.", "the-loop ‹defanged› stop."},
		{"every occurrence", def, "the-loop start, then the-loop stop and the-loop start",
			"the-loop ‹defanged› start, then the-loop ‹defanged› stop and the-loop ‹defanged› start"},
		{"not a whole token", def, "the-loop stopped the-loop does xthe-loop start the-loop start-x",
			"the-loop stopped the-loop does xthe-loop start the-loop start-x"},
		{"at-mention and fences", def, "```\n@the-loop cleanup\n```", "```\n@the-loop ‹defanged› cleanup\n```"},
		{"unicode folding", def, "the-loop contrİbute / the-loop ſtop", "the-loop ‹defanged› contribute / the-loop ‹defanged› stop"},
		{"untouched text is returned as is", def, "nothing to see", "nothing to see"},
		{"empty", def, "", ""},
		{"disabled grammar still defangs", mustNew(t, false, nil), "the-loop pause", "the-loop ‹defanged› pause"},
		{"one-word keyword", custom, "halt! HALT. halting", "H‹defanged›alt! H‹defanged›alt. halting"},
		{"multi-space keyword", custom, "the-loop hold on", "the-loop ‹defanged› hold ‹defanged› on"},
		{"longest first", custom, "the-loop do it; the-loop do", "the-loop ‹defanged› do ‹defanged› it; the-loop do"},
		{"overridden default is not a keyword any more", custom, "the-loop stop", "the-loop stop"},
		{"unicode one-word keyword splits on a character", mustNew(t, true, map[string]string{"stop": "ésto"}), "ÉSTO", "é‹defanged›sto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.grammar.Defang(tt.in)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Defang(%q) (-want +got):\n%s", tt.in, diff)
			}
			if r := tt.grammar.Parse(got); r.Found() {
				t.Errorf("Parse(Defang(%q)) = %+v, want nothing", tt.in, r)
			}
		})
	}
}

// TestDefangKeywordsBlindSpots pins the original algorithm's known gaps, none
// of which a shipped keyword has (see DefangKeywords).
func TestDefangKeywordsBlindSpots(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		keywords []string
		in       string
		want     string
	}{
		{"single character", []string{"!"}, "stop !", "stop !‹defanged›"},
		{"overlap skipped", []string{"go.go"}, "go.go.go", "g‹defanged›o.go.go"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := DefangKeywords(tt.in, tt.keywords)
			if got != tt.want {
				t.Errorf("DefangKeywords(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if !strings.Contains(got, tt.keywords[0]) {
				t.Errorf("expected the keyword to survive in %q", got)
			}
		})
	}
}

// propertyGrammars are the grammars the Defang ⇒ no command property is
// checked against: the shipped one and overrides of every shape.
func propertyGrammars(t testing.TB) []Grammar {
	return []Grammar{
		Default(),
		mustNew(t, true, map[string]string{"stop": "halt", "pause": "the-loop hold on", "do": "the-loop do it", "start": "Go!"}),
		mustNew(t, true, map[string]string{"start": "@bot start", "resume": "ſtart", "cleanup": "", "execute": "run:all"}),
	}
}

// TestDefangNeverParses: whatever the text, what Defang returns carries no
// command. Bodies are built from the pieces that make and break keywords.
func TestDefangNeverParses(t *testing.T) {
	t.Parallel()
	pieces := []string{
		"the-loop", " ", "  ", "start", "stop", "pause", "resume", "execute", "contribute", "cleanup",
		"do", "it", "does", "halt", "hold", "on", "Go!", "go", "@bot", "ſ", "run:all", "run", ":", "all",
		"-", ".", "@", "x", "é", "İ", "ı", "THE-LOOP", "STOP", "\n", "_", "1", Defanged, "`", "‹", "›",
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, g := range propertyGrammars(t) {
		for range 20000 {
			var b strings.Builder
			for range rng.IntN(12) {
				b.WriteString(pieces[rng.IntN(len(pieces))])
			}
			in := b.String()
			if r := g.Parse(g.Defang(in)); r.Found() {
				t.Fatalf("Parse(Defang(%q)) = %+v (defanged: %q)", in, r, g.Defang(in))
			}
		}
	}
}
