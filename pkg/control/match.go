package control

import (
	"unicode"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/pychar"
)

// The original matches a keyword with Python's
//
//	re.search(r"(?<![\w:-])" + re.escape(keyword) + r"(?![\w:-])", body, re.IGNORECASE)
//
// on a str. RE2 has no lookbehind, its \w is ASCII and its (?i) folds
// differently (Python's 'i' also matches 'İ' and 'ı'), so the search is written
// out by hand here with Python's definitions:
//
//   - a word character is a letter (Lu Ll Lt Lm Lo), a number (Nd Nl No) or
//     '_' — what Python's \w matches on a str (identical for every code point
//     both Unicode tables assign; Go's tables may be a version ahead);
//   - a text character c matches a keyword character k when lower(c) equals
//     lower(k) or is one of the extra equivalents Python's sre adds for
//     lower(k) (re/_casefix.py, below); lower is the simple lowercase mapping,
//     which unicode.ToLower and Python's sre agree on for every code point.
//
// Go strings may hold invalid UTF-8, which a Python str cannot. An invalid
// byte is treated as a non-word character that matches no keyword character.

// isBoundaryBlocker reports whether r may NOT sit directly against a keyword:
// the characters keywords are made of (word characters, '-' and ':').
func isBoundaryBlocker(r rune) bool { return r == '-' || r == ':' || pychar.IsWord(r) }

// extraCases is Python 3.11's re._casefix._EXTRA_CASES: for a lowercase code
// point, the other lowercase code points sre treats as the same letter under
// IGNORECASE (dotless i, long s, the Greek symbol variants, …).
var extraCases = map[rune][]rune{
	0x69: {0x131}, 0x73: {0x17f}, 0xb5: {0x3bc}, 0x131: {0x69}, 0x17f: {0x73},
	0x345: {0x3b9, 0x1fbe}, 0x390: {0x1fd3}, 0x3b0: {0x1fe3}, 0x3b2: {0x3d0},
	0x3b5: {0x3f5}, 0x3b8: {0x3d1}, 0x3b9: {0x345, 0x1fbe}, 0x3ba: {0x3f0},
	0x3bc: {0xb5}, 0x3c0: {0x3d6}, 0x3c1: {0x3f1}, 0x3c2: {0x3c3}, 0x3c3: {0x3c2},
	0x3c6: {0x3d5}, 0x3d0: {0x3b2}, 0x3d1: {0x3b8}, 0x3d5: {0x3c6}, 0x3d6: {0x3c0},
	0x3f0: {0x3ba}, 0x3f1: {0x3c1}, 0x3f5: {0x3b5}, 0x432: {0x1c80}, 0x434: {0x1c81},
	0x43e: {0x1c82}, 0x441: {0x1c83}, 0x442: {0x1c84, 0x1c85}, 0x44a: {0x1c86},
	0x463: {0x1c87}, 0x1c80: {0x432}, 0x1c81: {0x434}, 0x1c82: {0x43e},
	0x1c83: {0x441}, 0x1c84: {0x442, 0x1c85}, 0x1c85: {0x442, 0x1c84},
	0x1c86: {0x44a}, 0x1c87: {0x463}, 0x1c88: {0xa64b}, 0x1e61: {0x1e9b},
	0x1e9b: {0x1e61}, 0x1fbe: {0x345, 0x3b9}, 0x1fd3: {0x390}, 0x1fe3: {0x3b0},
	0xa64b: {0x1c88}, 0xfb05: {0xfb06}, 0xfb06: {0xfb05},
}

// foldRune is one keyword character, compiled: its lowercase and the extra
// lowercase equivalents.
type foldRune struct {
	lower rune
	extra []rune
}

func (f foldRune) matches(c rune) bool {
	l := unicode.ToLower(c)
	if l == f.lower {
		return true
	}
	for _, e := range f.extra {
		if l == e {
			return true
		}
	}
	return false
}

// pattern is a compiled keyword: literal, case-insensitive, whole-token.
type pattern struct {
	text  string
	runes []foldRune
}

func compile(keyword string) pattern {
	p := pattern{text: keyword}
	for _, k := range keyword {
		l := unicode.ToLower(k)
		p.runes = append(p.runes, foldRune{lower: l, extra: extraCases[l]})
	}
	return p
}

// matchAt returns the end of the keyword's literal match at text[i:], or -1.
// Boundaries are not checked.
func (p pattern) matchAt(text string, i int) int {
	for _, f := range p.runes {
		if i >= len(text) {
			return -1
		}
		c, size := utf8.DecodeRuneInString(text[i:])
		if c == utf8.RuneError && size == 1 {
			return -1
		}
		if !f.matches(c) {
			return -1
		}
		i += size
	}
	return i
}

// find returns the leftmost whole-token match starting at or after from, as
// Python's re.search would: every code point position is tried in turn, so a
// valid match overlapping an invalid one is still found.
func (p pattern) find(text string, from int) (start, end int, ok bool) {
	if len(p.runes) == 0 {
		return 0, 0, false
	}
	for i := from; i < len(text); {
		if e := p.matchAt(text, i); e >= 0 && p.bounded(text, i, e) {
			return i, e, true
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		i += size
	}
	return 0, 0, false
}

// bounded reports whether text[start:end] stands as a whole token.
func (p pattern) bounded(text string, start, end int) bool {
	if start > 0 {
		r, size := utf8.DecodeLastRuneInString(text[:start])
		if !(r == utf8.RuneError && size == 1) && isBoundaryBlocker(r) {
			return false
		}
	}
	if end < len(text) {
		r, size := utf8.DecodeRuneInString(text[end:])
		if !(r == utf8.RuneError && size == 1) && isBoundaryBlocker(r) {
			return false
		}
	}
	return true
}
