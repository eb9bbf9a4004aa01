// Package pychar holds the character classes of Python's re on a str, \w
// and \s, which the control-keyword matcher (pkg/control) and the scrubber
// (pkg/redact) must reproduce code point for code point so that Go and the
// original Python agree on every input.
//
// Go strings may hold invalid UTF-8, which a Python str cannot: an invalid
// byte (utf8.RuneError) is neither a word nor a space character.
package pychar

import (
	"unicode"
	"unicode/utf8"
)

// IsWord reports whether r is a word character (\w): a letter, a number or
// '_'.
func IsWord(r rune) bool {
	if r < utf8.RuneSelf {
		return r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9'
	}
	return unicode.IsLetter(r) || unicode.IsNumber(r)
}

// IsSpace reports whether r is whitespace (\s, and what str.strip removes).
func IsSpace(r rune) bool {
	switch r {
	case '\t', '\n', '\v', '\f', '\r', 0x1c, 0x1d, 0x1e, 0x1f, ' ',
		0x85, 0xa0, 0x1680, 0x2028, 0x2029, 0x202f, 0x205f, 0x3000:
		return true
	}
	return 0x2000 <= r && r <= 0x200a
}
