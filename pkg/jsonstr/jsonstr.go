// Package jsonstr decodes the content of a JSON string (RFC 8259), one code
// point at a time: the one JSON string decoder of the scanners that read
// payloads without encoding/json (the webhook router, the event excerpt) and
// of the ledger envelope's canonical form. Each of them needs the string's
// code points while it walks its own spans, and the excerpt must keep what
// encoding/json would replace (an unpaired escaped surrogate), so none of
// them can hand a whole string to encoding/json
// (docs/decisions/084-one-json-string-decoder.md).
package jsonstr

import "unicode/utf8"

// DecodeRune decodes the code point at the start of s, which is (part of)
// the content of a JSON string, between its quotes with its escapes in:
//
//   - a raw byte sequence: utf8.DecodeRune's answer (utf8.RuneError and 1
//     for a byte that is not UTF-8);
//   - a two-character escape (\" \\ \/ \b \f \n \r \t);
//   - a \uXXXX escape, or an escaped surrogate pair (\uD83D\uDE00) as the one
//     code point it encodes.
//
// An escaped surrogate that is not half of a pair is returned as the
// surrogate itself: encoding/json reads it as U+FFFD, Python's json as a
// code point of its own, so the caller decides. An invalid or cut-off
// escape returns (utf8.RuneError, 0). s must not be empty.
func DecodeRune(s []byte) (r rune, n int) {
	c := s[0]
	if c != '\\' {
		if c < utf8.RuneSelf {
			return rune(c), 1
		}
		return utf8.DecodeRune(s)
	}
	if len(s) < 2 {
		return utf8.RuneError, 0
	}
	switch s[1] {
	case '"', '\\', '/':
		return rune(s[1]), 2
	case 'b':
		return '\b', 2
	case 'f':
		return '\f', 2
	case 'n':
		return '\n', 2
	case 'r':
		return '\r', 2
	case 't':
		return '\t', 2
	case 'u':
		r, ok := Hex4(s[2:])
		if !ok {
			return utf8.RuneError, 0
		}
		if 0xD800 <= r && r <= 0xDBFF && len(s) >= 12 && s[6] == '\\' && s[7] == 'u' {
			if lo, ok := Hex4(s[8:]); ok && 0xDC00 <= lo && lo <= 0xDFFF {
				return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12
			}
		}
		return r, 6
	}
	return utf8.RuneError, 0
}

// IsSurrogate reports whether r is a UTF-16 surrogate, which DecodeRune
// returns only for an unpaired escaped one.
func IsSurrogate(r rune) bool { return 0xD800 <= r && r <= 0xDFFF }

// Hex4 decodes the four hex digits at the start of b (the XXXX of \uXXXX).
func Hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
