package config

import (
	"fmt"
	"log/slog"
)

// Secret holds a credential read from the environment. Every way Go prints a
// value — fmt verbs, %#v, slog, encoding/json, encoding/text — shows only
// whether it is set, so a config struct can be logged or dumped whole without
// leaking it (SECURITY.md: secrets never appear in logs, events, status output
// or errors). Reveal is the one way to get the value, and is meant for the
// call that hands it to an API client.
type Secret struct {
	value string
}

const (
	redacted = "[redacted]"
	unset    = "[unset]"
)

// NewSecret wraps a value, for tests and for `up`, which generates its own
// envelope key.
func NewSecret(v string) Secret { return Secret{value: v} }

// Reveal returns the secret value. Call it where the value is used, never to
// build a message.
func (s Secret) Reveal() string { return s.value }

// IsSet reports whether the secret is non-empty.
func (s Secret) IsSet() bool { return s.value != "" }

func (s Secret) shown() string {
	if s.IsSet() {
		return redacted
	}
	return unset
}

// String implements fmt.Stringer.
func (s Secret) String() string { return s.shown() }

// GoString implements fmt.GoStringer, for %#v.
func (s Secret) GoString() string { return "config.Secret(" + s.shown() + ")" }

// Format implements fmt.Formatter so that no verb (%x, %d, %+v …) falls back
// to printing the struct's field.
func (s Secret) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = f.Write([]byte(s.GoString()))
		return
	}
	_, _ = f.Write([]byte(s.shown()))
}

// LogValue implements slog.LogValuer.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.shown()) }

// MarshalText implements encoding.TextMarshaler (also used by YAML encoders).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.shown()), nil }

// MarshalJSON implements json.Marshaler.
func (s Secret) MarshalJSON() ([]byte, error) { return []byte(`"` + s.shown() + `"`), nil }

// UnmarshalText implements encoding.TextUnmarshaler, so the environment loader
// (and envconfig) can fill a Secret. It never fails: an error here could only
// quote the value.
func (s *Secret) UnmarshalText(b []byte) error {
	s.value = string(b)
	return nil
}
