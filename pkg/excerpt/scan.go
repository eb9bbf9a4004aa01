package excerpt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/jsonstr"
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
// One pass validates the payload and keeps, as it goes, the members the
// excerpt may read (see want): nothing is scanned twice, and nothing is
// allocated.
type scanner struct {
	data []byte
}

func (s *scanner) fail(i int, what string) error {
	return fmt.Errorf("%w: %s at offset %d", ErrMalformed, what, i)
}

func (s *scanner) ws(i int) int {
	d := s.data
	for i < len(d) {
		switch d[i] {
		case ' ':
			// Pretty-printed payloads indent with runs of spaces.
			if i+8 <= len(d) && binary.LittleEndian.Uint64(d[i:]) == 0x2020202020202020 {
				i += 8
				continue
			}
			i++
		case '\t', '\n', '\r':
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

// object validates the object at i. With w, it keeps the members w names
// (the last of a repeated key wins, as in Python's dict), and the members of
// those whose values w wants too.
func (s *scanner) object(i, depth int, w *want) (int, error) {
	i, empty, err := s.open(i, depth, '}')
	if empty || err != nil {
		return i, err
	}
	for {
		if i >= len(s.data) || s.data[i] != '"' {
			return i, s.fail(i, "expected object key")
		}
		kEnd, err := s.str(i)
		if err != nil {
			return kEnd, err
		}
		k := -1
		if w != nil {
			k = w.index(s.data[i+1 : kEnd-1])
		}
		i = s.ws(kEnd)
		if i >= len(s.data) || s.data[i] != ':' {
			return i, s.fail(i, "expected ':'")
		}
		i = s.ws(i + 1)
		vStart := i
		if k >= 0 && w.subs[k] != nil && i < len(s.data) && s.data[i] == '{' {
			w.subs[k].reset() // a repeated key: only the last one's members
			i, err = s.object(i, depth+1, w.subs[k])
		} else {
			i, err = s.value(i, depth+1)
		}
		if err != nil {
			return i, err
		}
		if k >= 0 {
			w.vals[k] = s.data[vStart:i]
		}
		var done bool
		if i, done, err = s.after(i, '}'); done || err != nil {
			return i, err
		}
	}
}

func (s *scanner) array(i, depth int) (int, error) {
	i, empty, err := s.open(i, depth, ']')
	if empty || err != nil {
		return i, err
	}
	for {
		if i, err = s.value(i, depth+1); err != nil {
			return i, err
		}
		var done bool
		if i, done, err = s.after(i, ']'); done || err != nil {
			return i, err
		}
	}
}

// open enters the object or array whose bracket is at i: past it and its
// whitespace, or past the closing one when it is empty.
func (s *scanner) open(i, depth int, closing byte) (next int, empty bool, err error) {
	if depth >= maxDepth {
		return i, false, s.fail(i, "nesting too deep")
	}
	i = s.ws(i + 1)
	if i < len(s.data) && s.data[i] == closing {
		return i + 1, true, nil
	}
	return i, false, nil
}

// after reads what follows a member or element that ends at i: a ',' (next
// is where the following one starts) or the closing bracket (done, next is
// past it).
func (s *scanner) after(i int, closing byte) (next int, done bool, err error) {
	i = s.ws(i)
	if i >= len(s.data) {
		if closing == '}' {
			return i, false, s.fail(i, "unterminated object")
		}
		return i, false, s.fail(i, "unterminated array")
	}
	switch s.data[i] {
	case ',':
		return s.ws(i + 1), false, nil
	case closing:
		return i + 1, true, nil
	}
	return i, false, s.fail(i, "expected ',' or '"+string(closing)+"'")
}

// str validates the string whose opening quote is at i and returns the offset
// past its closing quote. Control characters must be escaped, escapes must be
// JSON's, and raw bytes must be UTF-8 (which also rules out encoded
// surrogates; an escaped lone surrogate is valid JSON and kept). Most of a
// GitHub payload is plain ASCII strings (URLs, names), read eight bytes at a
// time.
func (s *scanner) str(i int) (int, error) {
	i++
	d := s.data
	for {
		for i+8 <= len(d) {
			if m := special8(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
			if i+8 > len(d) {
				break
			}
			if m := special8(binary.LittleEndian.Uint64(d[i:])); m != 0 {
				i += bits.TrailingZeros64(m) >> 3
				break
			}
			i += 8
		}
		for i < len(d) && plain[d[i]] {
			i++
		}
		if i >= len(d) {
			return i, s.fail(i, "unterminated string")
		}
		c := d[i]
		switch {
		case c == '"':
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(d) {
				return i, s.fail(i, "unterminated escape")
			}
			switch d[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if _, ok := jsonstr.Hex4(d[i+2:]); !ok {
					return i, s.fail(i, "invalid \\u escape")
				}
				i += 6
			default:
				return i, s.fail(i, "invalid escape")
			}
		case c < 0x20:
			return i, s.fail(i, "control character in string")
		default:
			r, n := utf8.DecodeRune(d[i:])
			if r == utf8.RuneError && n == 1 {
				return i, s.fail(i, "invalid UTF-8")
			}
			i += n
		}
	}
}

// plain is the bytes a string scan passes over: printable ASCII other than
// '"' and '\\'.
var plain = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

// special8 flags, in the high bit of each byte of w (eight bytes,
// little-endian), the bytes a string scan must stop at: below 0x20, '"',
// '\\', or with the high bit set. The usual SWAR tests; a flag can be
// wrong only above a right one, so the lowest flag is the first such byte.
func special8(w uint64) uint64 {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	q, b := w^(ones*'"'), w^(ones*'\\')
	// (w - 0x20…) | w: below 0x20 (the subtraction wraps) or high bit set.
	return ((w - ones*0x20) | w | (q-ones)&^q | (b-ones)&^b) & highs
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

// parse validates payload as one JSON text and returns it without a
// byte-order mark; ok reports whether it is an object, whose members (and
// theirs) top names are kept in top.
func parse(payload []byte, top *want) (doc []byte, ok bool, err error) {
	// json.loads accepts a UTF-8 byte-order mark on bytes input; so do we.
	payload = bytes.TrimPrefix(payload, []byte("\xef\xbb\xbf"))
	s := scanner{data: payload}
	i := s.ws(0)
	var end int
	if i < len(payload) && payload[i] == '{' {
		end, err = s.object(i, 0, top)
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
	return payload[i:], ok, nil
}

// The rest reads spans parse validated, so it trusts their syntax and only
// finds where things end.

// skip returns the offset just past the validated value at d[i].
func skip(d []byte, i int) int {
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		depth := 0
		for {
			switch d[i] {
			case '"':
				i = skipString(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	default: // a number or a literal: up to the next delimiter
		for i < len(d) {
			switch d[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return i
	}
}

// skipString returns the offset just past the validated string whose
// opening quote is at d[i]: the first quote not escaped by an odd run of
// backslashes.
func skipString(d []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(d[i:], '"') + i
		k := j
		for k > i && d[k-1] == '\\' {
			k--
		}
		if (j-k)%2 == 0 {
			return j + 1
		}
		i = j + 1
	}
}

// eachMember calls f with every member of obj, a validated object span, in
// document order, duplicates included, until f returns false.
func eachMember(obj []byte, f func(m member) bool) {
	s := scanner{data: obj}
	i := s.ws(1)
	for i < len(obj) && obj[i] == '"' {
		kEnd := skipString(obj, i)
		key := obj[i+1 : kEnd-1]
		i = s.ws(kEnd)  // ':'
		i = s.ws(i + 1) // the value
		vEnd := skip(obj, i)
		if !f(member{key: key, val: obj[i:vEnd]}) {
			return
		}
		i = s.ws(vEnd)
		if obj[i] == '}' {
			return
		}
		i = s.ws(i + 1)
	}
}

// members lists the members of obj, a validated object span.
func members(obj []byte) []member {
	out := make([]member, 0, 16)
	eachMember(obj, func(m member) bool { out = append(out, m); return true })
	return out
}

// decodeKey decodes a string's content to a comparable Go string. A lone
// surrogate is kept as its WTF-8 bytes so that it stays distinct from U+FFFD
// and from every other key, as it is in Python.
func decodeKey(raw []byte) string {
	b := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); {
		r, n := jsonstr.DecodeRune(raw[i:])
		if jsonstr.IsSurrogate(r) {
			b = append(b, byte(0xE0|r>>12), byte(0x80|(r>>6)&0x3F), byte(0x80|r&0x3F))
		} else {
			b = utf8.AppendRune(b, r)
		}
		i += n
	}
	return string(b)
}
