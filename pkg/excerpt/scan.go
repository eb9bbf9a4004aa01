package excerpt

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"
)

// maxDepth bounds the nesting the scanner follows. GitHub payloads nest a
// handful of levels; the bound keeps a hostile document from costing stack.
const maxDepth = 10_000

// ErrMalformed reports a payload that is not one JSON text (RFC 8259, UTF-8):
// a syntax error, invalid UTF-8, trailing data, or nesting deeper than the
// scanner follows. Excerpt wraps it with the offset of the problem.
var ErrMalformed = errors.New("excerpt: malformed JSON payload")

// member is one key/value pair of a JSON object, both as spans of the payload:
// key is the string's content between its quotes, escapes left in; val is the
// whole value, validated.
type member struct {
	key []byte
	val []byte
}

// scanner validates JSON and finds the extent of values without decoding them.
// Strings, numbers and nested values stay spans of the input until something is
// rendered, so distilling a 30 KB payload copies only what the excerpt carries.
type scanner struct {
	data []byte
}

func (s *scanner) fail(i int, what string) error {
	return fmt.Errorf("%w: %s at offset %d", ErrMalformed, what, i)
}

func (s *scanner) ws(i int) int {
	for i < len(s.data) {
		switch s.data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// value validates the JSON value starting at i (no leading whitespace) and
// returns the offset just past it.
func (s *scanner) value(i, depth int) (int, error) {
	if i >= len(s.data) {
		return i, s.fail(i, "unexpected end of input")
	}
	switch c := s.data[i]; {
	case c == '{':
		return s.object(i, depth, nil)
	case c == '[':
		return s.array(i, depth)
	case c == '"':
		return s.str(i)
	case c == '-' || ('0' <= c && c <= '9'):
		return s.number(i)
	case c == 't':
		return s.literal(i, "true")
	case c == 'f':
		return s.literal(i, "false")
	case c == 'n':
		return s.literal(i, "null")
	default:
		return i, s.fail(i, fmt.Sprintf("unexpected byte %q", c))
	}
}

func (s *scanner) literal(i int, lit string) (int, error) {
	if !bytes.HasPrefix(s.data[i:], []byte(lit)) {
		return i, s.fail(i, "invalid literal")
	}
	return i + len(lit), nil
}

// object validates the object at i. When out is non-nil its members are
// appended to *out in document order, duplicates included.
func (s *scanner) object(i, depth int, out *[]member) (int, error) {
	if depth >= maxDepth {
		return i, s.fail(i, "nesting too deep")
	}
	i = s.ws(i + 1)
	if i < len(s.data) && s.data[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(s.data) || s.data[i] != '"' {
			return i, s.fail(i, "expected object key")
		}
		kEnd, err := s.str(i)
		if err != nil {
			return kEnd, err
		}
		key := s.data[i+1 : kEnd-1]
		i = s.ws(kEnd)
		if i >= len(s.data) || s.data[i] != ':' {
			return i, s.fail(i, "expected ':'")
		}
		i = s.ws(i + 1)
		vStart := i
		if i, err = s.value(i, depth+1); err != nil {
			return i, err
		}
		if out != nil {
			*out = append(*out, member{key: key, val: s.data[vStart:i]})
		}
		i = s.ws(i)
		if i >= len(s.data) {
			return i, s.fail(i, "unterminated object")
		}
		switch s.data[i] {
		case ',':
			i = s.ws(i + 1)
		case '}':
			return i + 1, nil
		default:
			return i, s.fail(i, "expected ',' or '}'")
		}
	}
}

func (s *scanner) array(i, depth int) (int, error) {
	if depth >= maxDepth {
		return i, s.fail(i, "nesting too deep")
	}
	i = s.ws(i + 1)
	if i < len(s.data) && s.data[i] == ']' {
		return i + 1, nil
	}
	for {
		var err error
		if i, err = s.value(i, depth+1); err != nil {
			return i, err
		}
		i = s.ws(i)
		if i >= len(s.data) {
			return i, s.fail(i, "unterminated array")
		}
		switch s.data[i] {
		case ',':
			i = s.ws(i + 1)
		case ']':
			return i + 1, nil
		default:
			return i, s.fail(i, "expected ',' or ']'")
		}
	}
}

// str validates the string whose opening quote is at i and returns the offset
// past its closing quote. Control characters must be escaped, escapes must be
// JSON's, and raw bytes must be UTF-8 (which also rules out encoded
// surrogates; an escaped lone surrogate is valid JSON and kept).
func (s *scanner) str(i int) (int, error) {
	i++
	for i < len(s.data) {
		c := s.data[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(s.data) {
				return i, s.fail(i, "unterminated escape")
			}
			switch s.data[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := hex4(s.data, i+2); !ok {
					return i, s.fail(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, s.fail(i, "invalid escape")
			}
		case c < 0x20:
			return i, s.fail(i, "control character in string")
		case c < utf8.RuneSelf:
			i++
		default:
			r, n := utf8.DecodeRune(s.data[i:])
			if r == utf8.RuneError && n == 1 {
				return i, s.fail(i, "invalid UTF-8")
			}
			i += n
		}
	}
	return i, s.fail(i, "unterminated string")
}

// number validates -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)? at i.
func (s *scanner) number(i int) (int, error) {
	start := i
	d := s.data
	if i < len(d) && d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		i = digits(d, i)
	default:
		return start, s.fail(i, "invalid number")
	}
	if i < len(d) && d[i] == '.' {
		j := digits(d, i+1)
		if j == i+1 {
			return start, s.fail(j, "invalid number")
		}
		i = j
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		j := digits(d, i)
		if j == i {
			return start, s.fail(j, "invalid number")
		}
		i = j
	}
	return i, nil
}

func digits(d []byte, i int) int {
	for i < len(d) && '0' <= d[i] && d[i] <= '9' {
		i++
	}
	return i
}

// hex4 decodes the four hex digits at d[i:i+4].
func hex4(d []byte, i int) (rune, bool) {
	if i+4 > len(d) {
		return 0, false
	}
	var r rune
	for _, c := range d[i : i+4] {
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

// parse validates payload as one JSON text. For an object it returns the
// top-level members; for any other value, ok is false.
func parse(payload []byte) (top []member, ok bool, err error) {
	// json.loads accepts a UTF-8 byte-order mark on bytes input; so do we.
	payload = bytes.TrimPrefix(payload, []byte("\xef\xbb\xbf"))
	s := scanner{data: payload}
	i := s.ws(0)
	var end int
	if i < len(payload) && payload[i] == '{' {
		top = make([]member, 0, 16)
		end, err = s.object(i, 0, &top)
		ok = true
	} else {
		end, err = s.value(i, 0)
	}
	if err != nil {
		return nil, false, err
	}
	if end = s.ws(end); end != len(payload) {
		return nil, false, s.fail(end, "trailing data")
	}
	return top, ok, nil
}

// members lists the members of obj, a validated object span.
func members(obj []byte) []member {
	s := scanner{data: obj}
	out := make([]member, 0, 16)
	// obj was validated as part of the payload, so this cannot fail.
	_, _ = s.object(0, 0, &out)
	return out
}

// get returns the value of the last member named name, as Python's dict (last
// duplicate wins) would.
func get(ms []member, name string) ([]byte, bool) {
	for k := len(ms) - 1; k >= 0; k-- {
		if keyIs(ms[k].key, name) {
			return ms[k].val, true
		}
	}
	return nil, false
}

// keyIs reports whether the raw key content decodes to name.
func keyIs(raw []byte, name string) bool {
	if bytes.IndexByte(raw, '\\') < 0 {
		return string(raw) == name
	}
	return decodeKey(raw) == name
}

// decodeKey decodes a string's content to a comparable Go string. A lone
// surrogate is kept as its WTF-8 bytes so that it stays distinct from U+FFFD
// and from every other key, as it is in Python.
func decodeKey(raw []byte) string {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		r, n := nextRune(raw, i)
		if 0xD800 <= r && r <= 0xDFFF {
			b = append(b, byte(0xE0|r>>12), byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
		} else {
			b = utf8.AppendRune(b, r)
		}
		i += n
	}
	return string(b)
}

// nextRune decodes the code point at content[i] of a validated string's
// content the way json.loads does: an escaped surrogate pair becomes one code
// point, an unpaired escaped surrogate stays a code point of its own.
func nextRune(c []byte, i int) (rune, int) {
	b := c[i]
	if b != '\\' {
		if b < utf8.RuneSelf {
			return rune(b), 1
		}
		return utf8.DecodeRune(c[i:])
	}
	switch c[i+1] {
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
		r, _ := hex4(c, i+2)
		if 0xD800 <= r && r <= 0xDBFF && i+12 <= len(c) && c[i+6] == '\\' && c[i+7] == 'u' {
			if lo, ok := hex4(c, i+8); ok && 0xDC00 <= lo && lo <= 0xDFFF {
				return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), 12
			}
		}
		return r, 6
	default: // '"', '\\', '/'
		return rune(c[i+1]), 2
	}
}
