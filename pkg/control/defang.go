package control

import (
	"strings"
	"unicode/utf8"
)

// Defanged is the mark Defang inserts into a keyword.
const Defanged = "‹defanged›"

// Defang returns text with every whole-token occurrence of the grammar's
// keywords visibly broken, so that a reader still sees which keyword was meant
// but Parse finds no command (docs/requirements.md K19):
//
//   - keywords are taken longest first (Keywords), so a keyword embedding
//     another is defanged whole;
//   - matching is Parse's: case-insensitive, whole-token;
//   - a keyword containing a space has each space replaced by " ‹defanged› "
//     ("the-loop ‹defanged› stop"); a one-word keyword becomes its first
//     character, "‹defanged›", then the rest;
//   - the replacement uses the configured spelling, not the text's casing.
//
// The global enabled switch does not matter here.
func (g Grammar) Defang(text string) string {
	return DefangKeywords(text, g.Keywords())
}

// DefangKeywords is Defang over an explicit keyword list (empty entries are
// ignored; the list is sorted longest first, ties in byte order).
//
// It is the original's algorithm and inherits its blind spots, which no
// shipped keyword has: a single-character keyword survives its own defanging
// ("x" becomes "x‹defanged›", still a whole token), a keyword whose tail
// repeats its head after a non-word character ("ab.ab" in "xab.ab.ab") can be
// re-formed by the overlap the substitution skips, and a keyword containing
// "‹defanged›" can be formed by the replacement of another.
func DefangKeywords(text string, keywords []string) string {
	for _, kw := range sortKeywords(keywords) {
		text = defangOne(text, compile(kw), replacement(kw))
	}
	return text
}

func replacement(kw string) string {
	if strings.Contains(kw, " ") {
		return strings.ReplaceAll(kw, " ", " "+Defanged+" ")
	}
	_, size := utf8.DecodeRuneInString(kw)
	return kw[:size] + Defanged + kw[size:]
}

// defangOne is re.sub: leftmost matches, non-overlapping, boundaries judged on
// the text as it was before this keyword's pass.
func defangOne(text string, p pattern, repl string) string {
	var b strings.Builder
	last, replaced := 0, false
	for {
		start, end, ok := p.find(text, last)
		if !ok {
			break
		}
		b.WriteString(text[last:start])
		b.WriteString(repl)
		last, replaced = end, true
	}
	if !replaced {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}
