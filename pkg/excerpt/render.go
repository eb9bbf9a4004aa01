package excerpt

import (
	"math"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/jsonstr"
)

// encoder writes JSON the way Python's json.dumps(obj, indent=2) does with its
// defaults: ensure_ascii, items separated by "," and a newline plus indent,
// ": " between key and value, "{}" and "[]" for empty containers, and Python's own
// spelling of numbers.
type encoder struct {
	buf []byte
}

// renderLimit is how much of a rendering is ever needed: whether it is over
// ExcerptMaxChars, and if it stays over, its first ExcerptMaxChars bytes (the
// hard cut). Rendering stops soon past it, so what a payload costs to render
// does not grow with the payload.
const renderLimit = ExcerptMaxChars + 1

// full reports whether the rendering is past renderLimit: the rest would be
// cut anyway.
func (e *encoder) full() bool { return len(e.buf) > renderLimit }

const hexDigits = "0123456789abcdef"

func (e *encoder) newline(indent int) {
	e.buf = append(e.buf, '\n')
	for range indent {
		e.buf = append(e.buf, ' ')
	}
}

// nodes renders a distilled object.
func (e *encoder) nodes(ns []node, indent, budget int) {
	e.members(len(ns), indent, func(k int) {
		n := ns[k]
		e.buf = append(e.buf, '"')
		e.buf = append(e.buf, n.key...) // table keys are plain ASCII
		e.buf = append(e.buf, `": `...)
		switch {
		case n.isObj:
			e.nodes(n.kids, indent+2, budget)
		case n.text:
			e.str(n.raw[1:len(n.raw)-1], budget)
		default:
			e.value(n.raw, indent+2)
		}
	})
}

// value renders a validated JSON value span as Python would re-serialise what
// json.loads made of it.
func (e *encoder) value(raw []byte, indent int) {
	switch raw[0] {
	case '"':
		e.str(raw[1:len(raw)-1], -1)
	case '{':
		e.object(raw, indent)
	case '[':
		e.array(raw, indent)
	case 't', 'f', 'n':
		e.buf = append(e.buf, raw...)
	default:
		e.number(raw)
	}
}

func (e *encoder) object(raw []byte, indent int) {
	ms := dedupe(members(raw))
	e.members(len(ms), indent, func(k int) {
		e.str(ms[k].key, -1)
		e.buf = append(e.buf, `: `...)
		e.value(ms[k].val, indent+2)
	})
}

// members renders an object of n members, "{}" when n is 0, each on its own
// line at indent+2; member writes the k-th key and value. It stops once the
// rendering is full.
func (e *encoder) members(n, indent int, member func(k int)) {
	if n == 0 {
		e.buf = append(e.buf, "{}"...)
		return
	}
	e.buf = append(e.buf, '{')
	for k := range n {
		if e.full() {
			return
		}
		if k > 0 {
			e.buf = append(e.buf, ',')
		}
		e.newline(indent + 2)
		member(k)
	}
	e.newline(indent)
	e.buf = append(e.buf, '}')
}

// dedupe applies dict semantics to an object's members: a repeated key keeps
// the position of its first occurrence and the value of its last.
func dedupe(ms []member) []member {
	if len(ms) < 2 {
		return ms
	}
	seen := make(map[string]int, len(ms))
	out := ms[:0:0]
	for _, m := range ms {
		k := decodeKey(m.key)
		if at, ok := seen[k]; ok {
			out[at].val = m.val
			continue
		}
		seen[k] = len(out)
		out = append(out, m)
	}
	return out
}

func (e *encoder) array(raw []byte, indent int) {
	s := scanner{data: raw}
	i := s.ws(1)
	if raw[i] == ']' {
		e.buf = append(e.buf, "[]"...)
		return
	}
	e.buf = append(e.buf, '[')
	for first := true; ; first = false {
		if !first {
			e.buf = append(e.buf, ',')
		}
		e.newline(indent + 2)
		end := skip(raw, i)
		e.value(raw[i:end], indent+2)
		i = s.ws(end)
		if raw[i] == ']' || e.full() {
			break
		}
		i = s.ws(i + 1)
	}
	e.newline(indent)
	e.buf = append(e.buf, ']')
}

// str renders a string from its raw content. With budget >= 0, a string longer
// than budget code points keeps its first budget code points followed by
// TruncatedMarker, inside the quotes.
func (e *encoder) str(content []byte, budget int) {
	e.buf = append(e.buf, '"')
	n := 0
	for i := 0; i < len(content); {
		if e.full() {
			return
		}
		if budget >= 0 && n == budget {
			for _, r := range TruncatedMarker {
				e.char(r)
			}
			break
		}
		r, w := jsonstr.DecodeRune(content[i:])
		e.char(r)
		i += w
		n++
	}
	e.buf = append(e.buf, '"')
}

// char writes one code point with json.dumps's ensure_ascii escaping.
func (e *encoder) char(r rune) {
	switch {
	case r == '"':
		e.buf = append(e.buf, `\"`...)
	case r == '\\':
		e.buf = append(e.buf, `\\`...)
	case 0x20 <= r && r < 0x7f:
		e.buf = append(e.buf, byte(r))
	case r == '\n':
		e.buf = append(e.buf, `\n`...)
	case r == '\r':
		e.buf = append(e.buf, `\r`...)
	case r == '\t':
		e.buf = append(e.buf, `\t`...)
	case r == '\b':
		e.buf = append(e.buf, `\b`...)
	case r == '\f':
		e.buf = append(e.buf, `\f`...)
	case r >= 0x10000:
		r -= 0x10000
		e.u16(0xD800 | (r>>10)&0x3FF)
		e.u16(0xDC00 | r&0x3FF)
	default:
		e.u16(r)
	}
}

func (e *encoder) u16(r rune) {
	e.buf = append(e.buf, '\\', 'u',
		hexDigits[r>>12&0xF], hexDigits[r>>8&0xF], hexDigits[r>>4&0xF], hexDigits[r&0xF])
}

// number renders a JSON number as Python spells what json.loads made of it: an
// integer literal becomes an int (arbitrary precision, so only "-0" changes),
// anything with a fraction or exponent becomes a float and is written with
// float.__repr__.
func (e *encoder) number(raw []byte) {
	isFloat := false
	for _, c := range raw {
		if c == '.' || c == 'e' || c == 'E' {
			isFloat = true
			break
		}
	}
	if !isFloat {
		if raw[0] == '-' && strings.Trim(string(raw[1:]), "0") == "" {
			raw = raw[1:]
		}
		e.buf = append(e.buf, raw...)
		return
	}
	f, _ := strconv.ParseFloat(string(raw), 64) // out of range yields ±Inf, as float() does
	e.buf = appendPyFloat(e.buf, f)
}

// appendPyFloat appends Python's repr of f (and json.dumps's spelling of the
// infinities): the shortest round-tripping digits, positional notation for
// decimal exponents in [-4, 16) with at least one fractional digit, otherwise
// d.ddde±XX.
func appendPyFloat(b []byte, f float64) []byte {
	switch {
	case math.IsInf(f, 1):
		return append(b, "Infinity"...)
	case math.IsInf(f, -1):
		return append(b, "-Infinity"...)
	case math.IsNaN(f):
		return append(b, "NaN"...)
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // [-]d[.ddd]e±XX, exponent at least two digits
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		return append(b, s...)
	}
	if mant[0] == '-' {
		b = append(b, '-')
		mant = mant[1:]
	}
	digits := strings.Replace(mant, ".", "", 1)
	if exp < 0 {
		b = append(b, "0."...)
		b = append(b, strings.Repeat("0", -exp-1)...)
		return append(b, digits...)
	}
	if len(digits) <= exp+1 {
		b = append(b, digits...)
		b = append(b, strings.Repeat("0", exp+1-len(digits))...)
		return append(b, ".0"...)
	}
	b = append(b, digits[:exp+1]...)
	b = append(b, '.')
	return append(b, digits[exp+1:]...)
}
