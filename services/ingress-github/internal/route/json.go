package route

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/jsonstr"
)

// parseJSON decodes one JSON value as encoding/json does into an any with
// UseNumber — objects map[string]any (the last of a repeated key wins),
// arrays []any, numbers json.Number, strings with invalid UTF-8 and lone
// surrogates replaced by U+FFFD — and refuses what encoding/json refuses,
// trailing data included. It is the webhook's hot path: encoding/json's
// reflection costs several times as much on a GitHub payload (tens of
// kilobytes, most of it never read). FuzzParseJSON holds it to
// encoding/json.
func parseJSON(b []byte) (any, error) {
	p := jsonParser{b: b, s: string(b)}
	v, err := p.value(0)
	if err != nil {
		return nil, err
	}
	p.space()
	if p.i != len(p.b) {
		return nil, p.fail("trailing data after the JSON value")
	}
	return v, nil
}

// maxJSONDepth is encoding/json's nesting limit.
const maxJSONDepth = 10000

type jsonParser struct {
	b []byte
	s string // b as one string: strings and numbers without escapes are slices of it
	i int
}

type jsonError struct {
	msg string
	at  int
}

func (e *jsonError) Error() string {
	return "invalid JSON at byte " + strconv.Itoa(e.at) + ": " + e.msg
}

func (p *jsonParser) fail(msg string) error { return &jsonError{msg: msg, at: p.i} }

var errJSONEnd = errors.New("unexpected end of JSON input")

func (p *jsonParser) space() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonParser) value(depth int) (any, error) {
	p.space()
	if p.i >= len(p.b) {
		return nil, errJSONEnd
	}
	switch c := p.b[p.i]; {
	case c == '{':
		if depth >= maxJSONDepth {
			return nil, p.fail("exceeded max depth")
		}
		return p.object(depth + 1)
	case c == '[':
		if depth >= maxJSONDepth {
			return nil, p.fail("exceeded max depth")
		}
		return p.array(depth + 1)
	case c == '"':
		return p.str()
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.fail("invalid character")
}

func (p *jsonParser) literal(word string) error {
	if len(p.b)-p.i < len(word) {
		if string(p.b[p.i:]) == word[:len(p.b)-p.i] {
			return errJSONEnd
		}
		return p.fail("invalid literal")
	}
	if string(p.b[p.i:p.i+len(word)]) != word {
		return p.fail("invalid literal")
	}
	p.i += len(word)
	return nil
}

func (p *jsonParser) object(depth int) (any, error) {
	p.i++ // {
	m := map[string]any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == '}' {
		p.i++
		return m, nil
	}
	for {
		p.space()
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		if p.b[p.i] != '"' {
			return nil, p.fail("object key is not a string")
		}
		k, err := p.str()
		if err != nil {
			return nil, err
		}
		p.space()
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		if p.b[p.i] != ':' {
			return nil, p.fail("missing ':' after object key")
		}
		p.i++
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		m[k] = v
		if done, err := p.after('}', "missing ',' or '}' in object"); done || err != nil {
			return m, err
		}
	}
}

func (p *jsonParser) array(depth int) (any, error) {
	p.i++ // [
	a := []any{}
	p.space()
	if p.i < len(p.b) && p.b[p.i] == ']' {
		p.i++
		return a, nil
	}
	for {
		v, err := p.value(depth)
		if err != nil {
			return nil, err
		}
		a = append(a, v)
		if done, err := p.after(']', "missing ',' or ']' in array"); done || err != nil {
			return a, err
		}
	}
}

// after reads past what follows a member or element: a ',' (more follow)
// or the closing bracket (done).
func (p *jsonParser) after(closing byte, missing string) (done bool, err error) {
	p.space()
	if p.i >= len(p.b) {
		return false, errJSONEnd
	}
	switch p.b[p.i] {
	case ',':
		p.i++
		return false, nil
	case closing:
		p.i++
		return true, nil
	}
	return false, p.fail(missing)
}

func (p *jsonParser) number() (any, error) {
	start := p.i
	digits := func() int {
		n := 0
		for p.i < len(p.b) && p.b[p.i] >= '0' && p.b[p.i] <= '9' {
			p.i++
			n++
		}
		return n
	}
	if p.b[p.i] == '-' {
		p.i++
	}
	if p.i >= len(p.b) {
		return nil, errJSONEnd
	}
	switch c := p.b[p.i]; {
	case c == '0':
		p.i++
	case c >= '1' && c <= '9':
		digits()
	default:
		return nil, p.fail("invalid number")
	}
	if p.i < len(p.b) && p.b[p.i] == '.' {
		p.i++
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	if p.i < len(p.b) && (p.b[p.i] == 'e' || p.b[p.i] == 'E') {
		p.i++
		if p.i < len(p.b) && (p.b[p.i] == '+' || p.b[p.i] == '-') {
			p.i++
		}
		if p.i >= len(p.b) {
			return nil, errJSONEnd
		}
		if digits() == 0 {
			return nil, p.fail("invalid number")
		}
	}
	return json.Number(p.s[start:p.i]), nil
}

// str reads a string; the fast path is one without escapes, control
// characters or bytes outside ASCII.
func (p *jsonParser) str() (string, error) {
	p.i++ // "
	start := p.i
	for p.i < len(p.b) {
		c := p.b[p.i]
		if c == '"' {
			s := p.s[start:p.i]
			p.i++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= utf8.RuneSelf {
			return p.slowStr(start)
		}
		p.i++
	}
	return "", errJSONEnd
}

func (p *jsonParser) slowStr(start int) (string, error) {
	out := make([]byte, 0, p.i-start+16)
	out = append(out, p.b[start:p.i]...)
	for p.i < len(p.b) {
		c := p.b[p.i]
		switch {
		case c == '"':
			p.i++
			return string(out), nil
		case c < 0x20:
			return "", p.fail("control character in string")
		case c == '\\':
			r, n := jsonstr.DecodeRune(p.b[p.i:])
			switch {
			case n == 0 && p.i+1 >= len(p.b):
				return "", errJSONEnd
			case n == 0:
				return "", p.fail("invalid escape in string")
			case jsonstr.IsSurrogate(r):
				// Not half of a pair (a pair decodes to one rune): U+FFFD,
				// and the escape after it is read on its own.
				r = utf8.RuneError
			}
			out = utf8.AppendRune(out, r)
			p.i += n
		case c < utf8.RuneSelf:
			out = append(out, c)
			p.i++
		default:
			r, size := utf8.DecodeRune(p.b[p.i:])
			if r == utf8.RuneError && size == 1 {
				out = utf8.AppendRune(out, utf8.RuneError)
			} else {
				out = append(out, p.b[p.i:p.i+size]...)
			}
			p.i += size
		}
	}
	return "", errJSONEnd
}
