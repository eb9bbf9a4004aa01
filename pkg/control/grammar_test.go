package control

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func mustNew(t testing.TB, enabled bool, overrides map[string]string) Grammar {
	t.Helper()
	g, err := New(enabled, overrides)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return g
}

func TestNew(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		overrides map[string]string
		want      map[Command]string // keywords that differ from the defaults
		wantErr   error
		errHas    []string
	}{
		{name: "defaults", overrides: nil},
		{name: "override trimmed", overrides: map[string]string{"stop": "  halt now \t"}, want: map[Command]string{Stop: "halt now"}},
		{name: "python whitespace trimmed", overrides: map[string]string{"stop": "\x1chalt\u3000"}, want: map[Command]string{Stop: "halt"}},
		{name: "empty disables", overrides: map[string]string{"do": ""}, want: map[Command]string{Do: ""}},
		{name: "blank disables", overrides: map[string]string{"execute": "   "}, want: map[Command]string{Execute: ""}},
		{name: "all disabled", overrides: map[string]string{"start": "", "stop": "", "pause": "", "resume": "", "execute": "", "contribute": "", "cleanup": "", "do": ""},
			want: map[Command]string{Start: "", Stop: "", Pause: "", Resume: "", Execute: "", Contribute: "", Cleanup: "", Do: ""}},
		{name: "unknown names", overrides: map[string]string{"review": "x", "Start": "y", "stop": "halt"},
			wantErr: ErrUnknownCommand, errHas: []string{`"Start"`, `"review"`}},
		{name: "shared keyword", overrides: map[string]string{"pause": "THE-LOOP STOP"},
			wantErr: ErrInvalidKeyword, errHas: []string{"stop and pause"}},
		{name: "disabled twice is fine", overrides: map[string]string{"pause": "", "stop": ""}, want: map[Command]string{Pause: "", Stop: ""}},
		{name: "invalid utf-8", overrides: map[string]string{"stop": "halt\xff"}, wantErr: ErrInvalidKeyword},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := New(true, tt.overrides)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				for _, s := range tt.errHas {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not name %s", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[Command]string{}
			want := map[Command]string{}
			for _, c := range Commands() {
				got[c] = g.Keyword(c)
				want[c] = c.DefaultKeyword()
				if kw, ok := tt.want[c]; ok {
					want[c] = kw
				}
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("keywords (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKeywords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		enabled   bool
		overrides map[string]string
		want      []string
	}{
		{name: "defaults", enabled: true, want: []string{
			"the-loop contribute", "the-loop cleanup", "the-loop execute", "the-loop resume",
			"the-loop adopt", "the-loop pause", "the-loop start", "the-loop stop", "the-loop end", "the-loop do",
		}},
		{name: "disabled grammar still lists", enabled: false, want: []string{
			"the-loop contribute", "the-loop cleanup", "the-loop execute", "the-loop resume",
			"the-loop adopt", "the-loop pause", "the-loop start", "the-loop stop", "the-loop end", "the-loop do",
		}},
		{name: "overrides and disabled", enabled: true,
			overrides: map[string]string{"contribute": "", "cleanup": "", "execute": "", "resume": "", "pause": "", "adopt": "", "end": "", "stop": "halt", "do": "ünïcödé do"},
			want:      []string{"the-loop start", "ünïcödé do", "halt"}},
		{name: "zero grammar", want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var g Grammar
			if tt.name != "zero grammar" {
				g = mustNew(t, tt.enabled, tt.overrides)
			}
			if diff := cmp.Diff(tt.want, g.Keywords()); diff != "" {
				t.Errorf("Keywords() (-want +got):\n%s", diff)
			}
		})
	}
}

func one(c Command) Result { return Result{Command: c, Matched: []Command{c}} }

func ambiguous(cs ...Command) Result { return Result{Ambiguous: true, Matched: cs} }

// TestParse covers every boundary example of docs/requirements.md K7,
// plus the Unicode behaviour the original inherits from
// Python's re.
func TestParse(t *testing.T) {
	t.Parallel()
	def := Default()
	custom := mustNew(t, true, map[string]string{"stop": "halt now", "do": "", "start": "go.go"})
	tests := []struct {
		name    string
		grammar Grammar
		body    string
		want    Result
	}{
		// The spec's own examples.
		{"trailing period", def, "the-loop start.", one(Start)},
		{"at-mention", def, "@the-loop start", one(Start)},
		{"word after", def, "the-loop startlater", Result{}},
		{"word before", def, "xthe-loop start", Result{}},
		{"hyphen after", def, "the-loop start-x", Result{}},
		{"do is not does", def, "the-loop does", Result{}},
		{"do is not done", def, "the-loop done, the-loop docs", Result{}},
		{"do alone", def, "the-loop do", one(Do)},

		// Boundaries.
		{"whole body", def, "the-loop stop", one(Stop)},
		{"in a sentence", def, "Please, the-loop pause! Thanks.", one(Pause)},
		{"colon after", def, "the-loop stop: now", Result{}},
		{"colon before", def, "cmd:the-loop stop", Result{}},
		{"hyphen before", def, "-the-loop stop", Result{}},
		{"underscore before", def, "_the-loop stop", Result{}},
		{"digit after", def, "the-loop stop2", Result{}},
		{"unicode letter before", def, "éthe-loop stop", Result{}},
		{"unicode letter after", def, "the-loop stopé", Result{}},
		{"unicode digit after", def, "the-loop stop٣", Result{}},
		{"combining mark after is not a word char", def, "the-loop stop\u0301", one(Stop)},
		{"ellipsis after", def, "the-loop stop…", one(Stop)},
		{"slash before", def, "/the-loop resume", one(Resume)},
		{"parens", def, "(the-loop resume)", one(Resume)},
		{"backticks", def, "`the-loop cleanup`", one(Cleanup)},
		{"newlines", def, "hi\nthe-loop execute\nbye", one(Execute)},
		{"quoted reply", def, "> the-loop stop", one(Stop)},
		{"code fence not stripped", def, "```\nthe-loop stop\n```", one(Stop)},
		{"invalid byte is not a word char", def, "\xffthe-loop stop\xfe", one(Stop)},

		// Literal text: one space, no folding.
		{"two spaces", def, "the-loop  stop", Result{}},
		{"tab", def, "the-loop\tstop", Result{}},
		{"newline", def, "the-loop\nstop", Result{}},
		{"nbsp", def, "the-loop\u00a0stop", Result{}},
		{"defanged", def, "the-loop ‹defanged› stop", Result{}},

		// Case.
		{"upper", def, "THE-LOOP STOP", one(Stop)},
		{"mixed", def, "The-Loop Contribute", one(Contribute)},
		{"dotted capital I folds to i", def, "the-loop contrİbute", one(Contribute)},
		{"dotless i folds to i", def, "the-loop contrıbute", one(Contribute)},
		{"long s folds to s", def, "the-loop ſtop", one(Stop)},
		{"fullwidth is not ascii", def, "the-loop ｓtop", Result{}},

		// Counting.
		{"empty", def, "", Result{}},
		{"repeated", def, "the-loop stop. I said the-loop STOP", one(Stop)},
		{"two commands", def, "the-loop stop then the-loop start", ambiguous(Start, Stop)},
		{"execute counts too", def, "the-loop execute and the-loop start", ambiguous(Start, Execute)},
		{"fixed order, not body order", def, "the-loop do the-loop cleanup the-loop pause", ambiguous(Pause, Cleanup, Do)},
		{"all eight", def, "the-loop start the-loop stop the-loop pause the-loop resume the-loop execute the-loop contribute the-loop cleanup the-loop do",
			ambiguous(Start, Stop, Pause, Resume, Execute, Contribute, Cleanup, Do)},
		{"disabled grammar", mustNew(t, false, nil), "the-loop stop", Result{}},
		{"zero grammar", Grammar{}, "the-loop stop", Result{}},

		// Overrides.
		{"override replaces default", custom, "the-loop stop", Result{}},
		{"override matches", custom, "HALT NOW please", one(Stop)},
		{"disabled command", custom, "the-loop do", Result{}},
		{"overlapping candidates", custom, "xgo.go.go", one(Start)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.grammar.Parse(tt.body)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse(%q) (-want +got):\n%s", tt.body, diff)
			}
			if got.Found() != (tt.want.Command != "" || tt.want.Ambiguous) {
				t.Errorf("Found() = %v", got.Found())
			}
		})
	}
}
