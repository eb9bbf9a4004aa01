// Package prompt renders what a session is told about an event: the event
// template (delivered into a running session) and the spawn template (the
// boot prompt of a new one), with Python string.Template.safe_substitute
// semantics, the interaction directive of the mode in
// force and the graph context block (docs/requirements.md K11).
//
// The default texts are our own words for the original's rules. Every
// template keeps the UNTRUSTED framing right above the excerpt it frames: the
// excerpt is attacker-writable text, and the framing must be the last thing
// read before it. A custom template that omits $interaction_directive gets
// the directive appended, so no prompt ever leaves out where the session
// takes its answers from (docs/requirements.md K11).
package prompt

import (
	"fmt"
	"os"
	"strings"
)

// Kind selects a template.
type Kind int

// Template kinds.
const (
	// Event is delivered into a running session.
	Event Kind = iota
	// Spawn is the boot prompt of a new session.
	Spawn
)

// Mode is routing.interaction.mode.
type Mode string

// Interaction modes.
const (
	ModeWorkItem Mode = "work-item"
	ModeCLI      Mode = "cli"
)

// ParseMode resolves a configured mode: trimmed and lower-cased; empty is the
// default silently, anything unknown is the default with ok=false (the caller
// warns). It is never cli by accident.
func ParseMode(s string) (m Mode, ok bool) {
	switch Mode(strings.ToLower(strings.TrimSpace(s))) {
	case "", ModeWorkItem:
		return ModeWorkItem, true
	case ModeCLI:
		return ModeCLI, true
	}
	return ModeWorkItem, false
}

// Directive returns the interaction directive of m.
func Directive(m Mode) string {
	if m == ModeCLI {
		return directiveCLI
	}
	return directiveWorkItem
}

// Data is what the placeholders stand for.
type Data struct {
	WorkItem     string // $work_item: the ref of the receiving session
	Event        string // $event
	Action       string // $action ("-" when empty)
	Repository   string // $repository: owner/repo, "" when unknown
	DeliveryID   string // $delivery_id ("-" when empty)
	Excerpt      string // $payload_excerpt
	GraphContext string // $graph_context ("" when there is no state)
}

// Templates are the two templates and the mode in force.
type Templates struct {
	Event, Spawn string
	Mode         Mode
}

// Defaults are the built-in templates in work-item mode.
func Defaults() Templates {
	return Templates{Event: DefaultEvent, Spawn: DefaultSpawn, Mode: ModeWorkItem}
}

// Load returns the templates with the event and spawn texts read from the
// given files; an empty path keeps the built-in text. A file that cannot be
// read keeps the built-in text too, and is reported in warnings: a prompt
// must never be lost to a template problem.
func Load(eventPath, spawnPath string, mode Mode) (t Templates, warnings []string) {
	t = Defaults()
	t.Mode = mode
	read := func(path string, dst *string) {
		if path == "" {
			return
		}
		b, err := os.ReadFile(path)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("prompt template %s: %v; using the built-in one", path, err))
			return
		}
		*dst = string(b)
	}
	read(eventPath, &t.Event)
	read(spawnPath, &t.Spawn)
	return t, warnings
}

// Render renders the template of kind k for d.
func (t Templates) Render(k Kind, d Data) string {
	tmpl := t.Event
	if k == Spawn {
		tmpl = t.Spawn
	}
	directive := Directive(t.Mode)
	vars := map[string]string{
		"work_item":             d.WorkItem,
		"event":                 d.Event,
		"action":                orDash(d.Action),
		"repository":            d.Repository,
		"delivery_id":           orDash(d.DeliveryID),
		"payload_excerpt":       d.Excerpt,
		"interaction_directive": directive,
		"graph_context":         d.GraphContext,
	}
	out := SafeSubstitute(tmpl, vars)
	if !strings.Contains(tmpl, "$interaction_directive") && !strings.Contains(tmpl, "${interaction_directive}") {
		out = strings.TrimRight(out, pyWhitespace) + "\n\n" + directive + "\n"
	}
	return out
}

// pyWhitespace is what Python's str.rstrip() removes among the characters a
// template ends with in practice (ASCII whitespace and the separators
// U+001C–U+001F, U+0085).
const pyWhitespace = " \t\n\r\v\f\x1c\x1d\x1e\x1f\u0085"

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// SafeSubstitute is Python's string.Template(tmpl).safe_substitute(vars):
// "$$" is "$"; "$name" and "${name}" (name: an ASCII letter or underscore,
// then letters, digits, underscores — the longest such run) are replaced
// when vars has name and left as written otherwise; any other "$" stays.
// Substituted values are never scanned again.
func SafeSubstitute(tmpl string, vars map[string]string) string {
	var b strings.Builder
	b.Grow(len(tmpl))
	for i := 0; i < len(tmpl); {
		c := tmpl[i]
		if c != '$' {
			j := strings.IndexByte(tmpl[i:], '$')
			if j < 0 {
				b.WriteString(tmpl[i:])
				break
			}
			b.WriteString(tmpl[i : i+j])
			i += j
			continue
		}
		rest := tmpl[i+1:]
		switch {
		case strings.HasPrefix(rest, "$"):
			b.WriteByte('$')
			i += 2
		case len(rest) > 0 && isIdentStart(rest[0]):
			n := identLen(rest)
			if v, ok := vars[rest[:n]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(tmpl[i : i+1+n])
			}
			i += 1 + n
		case strings.HasPrefix(rest, "{") && len(rest) > 1 && isIdentStart(rest[1]) &&
			len(rest) > 1+identLen(rest[1:]) && rest[1+identLen(rest[1:])] == '}':
			n := identLen(rest[1:])
			if v, ok := vars[rest[1:1+n]]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(tmpl[i : i+3+n])
			}
			i += 3 + n
		default:
			b.WriteByte('$')
			i++
		}
	}
	return b.String()
}

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func identLen(s string) int {
	n := 0
	for n < len(s) && (isIdentStart(s[n]) || s[n] >= '0' && s[n] <= '9') {
		n++
	}
	return n
}
