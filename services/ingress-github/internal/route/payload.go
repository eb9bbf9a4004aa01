package route

import (
	"encoding/json"
	"errors"
	"strconv"
)

// obj is a decoded JSON object. Every accessor is total: a missing key, a
// null or a value of the wrong type reads as the zero value, so a payload of
// any shape can be routed without a panic (the fuzz target checks this).
type obj map[string]any

// ErrNotObject: the payload is valid JSON but not an object.
var ErrNotObject = errors.New("payload is not a JSON object")

// Payload is a decoded webhook payload.
type Payload struct{ o obj }

// Action is the payload's action, if any.
func (p Payload) Action() string { return p.o.str("action") }

// Decode parses a payload, keeping numbers exact (ids exceed 2^53). It fails
// on anything that is not one JSON object.
func Decode(payload []byte) (Payload, error) {
	v, err := parseJSON(payload)
	if err != nil {
		return Payload{}, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return Payload{}, ErrNotObject
	}
	return Payload{obj(m)}, nil
}

func (o obj) obj(key string) obj {
	if o == nil {
		return nil
	}
	m, _ := o[key].(map[string]any)
	return obj(m)
}

func (o obj) has(key string) bool {
	if o == nil {
		return false
	}
	_, ok := o[key]
	return ok
}

func (o obj) str(key string) string {
	if o == nil {
		return ""
	}
	s, _ := o[key].(string)
	return s
}

// int returns an integer field; ok is false when it is absent, not a number,
// or not an integer.
func (o obj) int(key string) (int64, bool) {
	if o == nil {
		return 0, false
	}
	n, isNum := o[key].(json.Number)
	if !isNum {
		return 0, false
	}
	v, err := strconv.ParseInt(string(n), 10, 64)
	return v, err == nil
}

func (o obj) list(key string) []any {
	if o == nil {
		return nil
	}
	l, _ := o[key].([]any)
	return l
}

func (o obj) objs(key string) []obj {
	var out []obj
	for _, v := range o.list(key) {
		if m, ok := v.(map[string]any); ok {
			out = append(out, obj(m))
		}
	}
	return out
}

func login(o obj) string { return o.obj("user").str("login") }
