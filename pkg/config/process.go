package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// This file reads settings into the structs that declare them: the process's
// (Common, Up, Session) in this package, each service's in its own package
// (services/<name>/config.go). The host hands Process, CheckEnv and Usage the
// structs it composes; this package knows no service.

// setting is one environment variable bound to a struct field. The key is
// derived exactly as envconfig derives it (a test pins the two together).
type setting struct {
	key   string
	field reflect.Value
	tag   reflect.StructTag
}

// Process fills each spec — a pointer to a struct of fields tagged in
// envconfig's vocabulary, which may embed the shared structs of this package —
// from env, then runs the spec's Validate (see validate). All problems come
// back at once, joined, so an operator fixes them in one pass. Unknown LOOP_*
// variables are CheckEnv's to find: only the host knows every setting.
//
// It follows envconfig's tags (envconfig, default, required, desc) but reads
// env instead of the process environment: envconfig v1.4.0's Process and
// CheckDisallowed read os.Environ directly, which tests must not touch. Two
// deliberate differences: a variable set to "" counts as unset (so a .env
// line `LOOP_ADMIN_ADDR=` keeps the default and `required` means non-empty),
// and there is no fallback to the bare name without the prefix.
func Process(env Env, specs ...any) error {
	var errs []error
	for _, spec := range specs {
		settings, err := gather(Prefix, spec)
		if err != nil {
			return err
		}
		var filled []error
		for _, s := range settings {
			filled = append(filled, s.set(env))
		}
		errs = append(errs, filled...)
		if errors.Join(filled...) != nil {
			// Validating a half-filled struct would only repeat the errors.
			continue
		}
		errs = append(errs, validate(reflect.ValueOf(spec).Elem()))
	}
	return errors.Join(errs...)
}

// validator is a settings struct that checks what its types cannot.
type validator interface{ Validate() error }

// validate runs v's Validate, which covers what v embeds; a struct without
// one — or whose embedded structs' Validate methods collide, so that none
// is promoted — has each of its struct fields validated instead.
func validate(v reflect.Value) error {
	if c, ok := v.Addr().Interface().(validator); ok {
		return c.Validate()
	}
	var errs []error
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Struct && f.CanSet() {
			errs = append(errs, validate(f))
		}
	}
	return errors.Join(errs...)
}

// DefaultsOf is a settings struct T as its default tags alone fill it, as
// Process does from an empty environment, without validating: a service's
// defaults are where its settings are declared, and its tests start from
// them. A default its field cannot hold is the program's own error: it
// panics (each service's tests read its defaults).
func DefaultsOf[T any]() T {
	var spec T
	settings, err := gather(Prefix, &spec)
	if err != nil {
		panic(err)
	}
	for _, s := range settings {
		if err := s.set(Env{}); err != nil {
			panic(err)
		}
	}
	return spec
}

// CheckEnv reports every LOOP_* variable in env that none of specs reads,
// naming it and the nearest known name. The host hands it every spec of
// every service, not only those it runs, because services share one .env
// (compose, a laptop shell): `serve ledger-writer` must not refuse
// LOOP_SLACK_BOT_TOKEN that is there for ingress-slack. A typo still fails,
// in every service. Variables under LOOP_TEST_ belong to the test suites and
// pass.
func CheckEnv(env Env, specs ...any) error {
	known := Keys(specs...)
	var unknown []string
	for k := range env {
		if !strings.HasPrefix(k, Prefix+"_") || strings.HasPrefix(k, testPrefix) || slices.Contains(known, k) {
			continue
		}
		unknown = append(unknown, k)
	}
	slices.Sort(unknown)
	errs := make([]error, 0, len(unknown))
	for _, k := range unknown {
		msg := fmt.Sprintf("unknown environment variable %s", k)
		if near := nearest(k, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}

// Keys lists the settings specs read (pointers to settings structs), in
// field order, each once: two services' structs may embed the same shared
// struct.
func Keys(specs ...any) []string {
	var keys []string
	for _, spec := range specs {
		settings, err := gather(Prefix, spec)
		if err != nil {
			panic(err) // specs are the program's own structs
		}
		for _, s := range settings {
			if !slices.Contains(keys, s.key) {
				keys = append(keys, s.key)
			}
		}
	}
	return keys
}

// nearest returns the known key closest to k by edit distance, if it is
// close enough to be the likely intent.
func nearest(k string, known []string) string {
	best, bestD := "", 4
	for _, c := range known {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// CheckAddr accepts host:port or :port with a port from 0 to 65535.
func CheckAddr(name, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s is %q: want host:port or :port", name, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s is %q: the port must be a number from 0 to 65535", name, addr)
	}
	return nil
}

// CheckURL accepts an absolute URL with one of the schemes. It quotes the
// value, so it must only see settings that are not secret.
func CheckURL(name, raw string, schemes ...string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || !slices.Contains(schemes, u.Scheme) {
		return fmt.Errorf("%s is %q: want an absolute %s URL", name, raw, strings.Join(schemes, "/"))
	}
	return nil
}

// List is a comma-separated setting as its items, trimmed, empty ones
// dropped (LOOP_GITHUB_POLL_REPOS, LOOP_SESSION_ENV).
func List(v string) []string {
	var out []string
	for item := range strings.SplitSeq(v, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// CheckNonNegative accepts a duration of zero or more.
func CheckNonNegative(key string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s is %s: it must not be negative", key, d)
	}
	return nil
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// gather walks spec the way envconfig's gatherInfo does: an embedded struct
// shares its parent's prefix, a named struct field extends it, and a field's
// key is its envconfig tag (or its name), upper-cased, after the prefix.
func gather(prefix string, spec any) ([]setting, error) {
	v := reflect.ValueOf(spec)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("config: a spec must be a pointer to a struct, not %T", spec)
	}
	return gatherValue(prefix, v.Elem()), nil
}

func gatherValue(prefix string, v reflect.Value) []setting {
	var out []setting
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		f := v.Field(i)
		if !f.CanSet() || sf.Tag.Get("ignored") == "true" {
			continue
		}
		key := sf.Name
		if tag := sf.Tag.Get("envconfig"); tag != "" {
			key = tag
		}
		key = strings.ToUpper(prefix + "_" + key)
		if f.Kind() == reflect.Struct && !reflect.PointerTo(f.Type()).Implements(textUnmarshaler) {
			inner := prefix
			if !sf.Anonymous {
				inner = key
			}
			out = append(out, gatherValue(inner, f)...)
			continue
		}
		out = append(out, setting{key: key, field: f, tag: sf.Tag})
	}
	return out
}

// set fills the field from env or its default. Its errors quote the value only
// when the field is not a Secret.
func (s setting) set(env Env) error {
	raw, _ := env.Lookup(s.key)
	if raw == "" {
		raw = s.tag.Get("default")
	}
	if raw == "" {
		if s.tag.Get("required") == "true" {
			return fmt.Errorf("%s is required and not set: %s", s.key, s.tag.Get("desc"))
		}
		s.field.Set(reflect.Zero(s.field.Type()))
		return nil
	}
	if s.field.Type() == reflect.TypeOf(slog.Level(0)) {
		// slog's own error names slog; the person set a variable.
		var l slog.Level
		if err := l.UnmarshalText([]byte(raw)); err != nil {
			return fmt.Errorf("%s is %q: want debug, info, warn or error", s.key, raw)
		}
		s.field.SetInt(int64(l))
		return nil
	}
	if u, ok := s.field.Addr().Interface().(encoding.TextUnmarshaler); ok {
		if err := u.UnmarshalText([]byte(raw)); err != nil {
			return fmt.Errorf("%s is %q: %w", s.key, raw, err)
		}
		return nil
	}
	if s.field.Type() == reflect.TypeOf(time.Duration(0)) {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%s is %q: want a duration such as 60s or 5m", s.key, raw)
		}
		s.field.SetInt(int64(d))
		return nil
	}
	switch s.field.Kind() {
	case reflect.String:
		s.field.SetString(raw)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || s.field.OverflowInt(n) {
			return fmt.Errorf("%s is %q: want a whole number", s.key, raw)
		}
		s.field.SetInt(n)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%s is %q: want true or false", s.key, raw)
		}
		s.field.SetBool(b)
	default:
		return fmt.Errorf("config: %s has unsupported type %s", s.key, s.field.Type())
	}
	return nil
}

// usageFormat is envconfig's table with the columns the docs print.
const usageFormat = "SETTING\tTYPE\tDEFAULT\tREQUIRED\tDESCRIPTION\n" +
	"{{range .}}{{usage_key .}}\t{{usage_type .}}\t{{usage_default .}}\t{{usage_required .}}\t{{usage_description .}}\n{{end}}"

// Usage writes the table of the settings specs read — name, type, default,
// required, description — each once, in the order of specs: for
// `the-loop serve X --help` and the docs.
func Usage(w io.Writer, specs ...any) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var seen []string
	for i, spec := range specs {
		var rows bytes.Buffer
		if err := envconfig.Usagef(Prefix, spec, &rows, usageFormat); err != nil {
			return fmt.Errorf("usage: %w", err)
		}
		for j, l := range strings.SplitAfter(rows.String(), "\n") {
			key, _, _ := strings.Cut(l, "\t")
			if l == "" || j == 0 && i > 0 || j > 0 && slices.Contains(seen, key) {
				continue
			}
			seen = append(seen, key)
			if _, err := io.WriteString(tw, l); err != nil {
				return err
			}
		}
	}
	return tw.Flush()
}
