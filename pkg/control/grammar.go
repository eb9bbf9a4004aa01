package control

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/pychar"
)

// ErrUnknownCommand is returned by New for an override naming no command.
var ErrUnknownCommand = errors.New("control: unknown command")

// ErrInvalidKeyword is returned by New for a keyword that is not valid UTF-8
// or that two commands share.
var ErrInvalidKeyword = errors.New("control: invalid keyword")

// Grammar is the configured control vocabulary (routing.control): whether
// comments are parsed for commands at all, and each command's keyword. The
// zero Grammar is disabled and has no keywords; use Default or New.
type Grammar struct {
	enabled  bool
	keywords [numCommands]string // "" = that command is disabled
	patterns [numCommands]pattern
}

// Default is the shipped grammar: enabled, every command on its default
// keyword.
func Default() Grammar {
	g, _ := New(true, nil)
	return g
}

// New builds a grammar from routing.control.enabled and
// routing.control.keywords. overrides is keyed by command name; each value is
// trimmed of surrounding whitespace, and an empty value disables that one
// command. Override names that are not commands are an error naming them all,
// as is a keyword that is not valid UTF-8 or that two commands would share
// (every comment carrying it would be ambiguous).
//
// enabled=false makes Parse find nothing; it does not empty Keywords or
// Defang, which protect text that a grammar elsewhere may read.
func New(enabled bool, overrides map[string]string) (Grammar, error) {
	g := Grammar{enabled: enabled}
	for i, s := range spec {
		g.keywords[i] = s.keyword
	}
	var unknown []string
	for name, value := range overrides {
		i := Command(name).index()
		if i < 0 {
			unknown = append(unknown, fmt.Sprintf("%q", name))
			continue
		}
		g.keywords[i] = strings.TrimFunc(value, pychar.IsSpace)
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return Grammar{}, fmt.Errorf("%w: %s (known: %s)", ErrUnknownCommand,
			strings.Join(unknown, ", "), joinCommands(Commands()))
	}
	for i, kw := range g.keywords {
		if !utf8.ValidString(kw) {
			return Grammar{}, fmt.Errorf("%w: %s: %q is not valid UTF-8", ErrInvalidKeyword, spec[i].command, kw)
		}
		for j := range i {
			if kw != "" && strings.EqualFold(kw, g.keywords[j]) {
				return Grammar{}, fmt.Errorf("%w: %s and %s share the keyword %q",
					ErrInvalidKeyword, spec[j].command, spec[i].command, kw)
			}
		}
		g.patterns[i] = compile(kw)
	}
	return g, nil
}

func joinCommands(cs []Command) string {
	parts := make([]string, len(cs))
	for i, c := range cs {
		parts[i] = string(c)
	}
	return strings.Join(parts, ", ")
}

// Enabled reports whether Parse looks for commands at all.
func (g Grammar) Enabled() bool { return g.enabled }

// Keyword returns c's configured keyword, or "" when c is disabled or invalid.
func (g Grammar) Keyword(c Command) string {
	if i := c.index(); i >= 0 {
		return g.keywords[i]
	}
	return ""
}

// Keywords returns every enabled command's keyword (each once), longest first
// in characters, ties in byte order. It ignores the global enabled switch:
// this is the list a ledger envelope must refuse to carry and Defang must
// break, whatever this instance does with comments.
func (g Grammar) Keywords() []string {
	return sortKeywords(g.keywords[:])
}

// sortKeywords returns the non-empty keywords, each once, longest first in
// characters (Python's len), ties in byte order. The original iterates a set
// there, so its tie order is arbitrary; no two shipped keywords of one length
// can overlap, so the tie order only has to be deterministic.
func sortKeywords(keywords []string) []string {
	var out []string
	for _, kw := range keywords {
		if kw != "" && !slices.Contains(out, kw) {
			out = append(out, kw)
		}
	}
	slices.SortFunc(out, func(a, b string) int {
		if d := utf8.RuneCountInString(b) - utf8.RuneCountInString(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return out
}

// Result is what a body asked for: nothing, one command, or an ambiguous mix.
type Result struct {
	// Command is the one command found; "" when none or ambiguous.
	Command Command
	// Ambiguous is set when two or more different commands were found; the
	// caller must then execute nothing and forward nothing.
	Ambiguous bool
	// Matched lists the commands found, in the fixed order; nil when none.
	Matched []Command
}

// Found reports whether the body carried any command, ambiguous or not.
func (r Result) Found() bool { return r.Command != "" || r.Ambiguous }

// Parse finds the control command body carries. Each enabled command's keyword
// is searched for, in the fixed order, case-insensitively and as a whole token
// (the character before and after must not be a word character, '-' or ':').
// No whitespace is folded and code fences are not stripped: a keyword quoted
// in a code block counts. A command repeated is that command; two different
// ones are ambiguous. A disabled grammar or an empty body finds nothing.
//
// Parse returns constants, never body text.
func (g Grammar) Parse(body string) Result {
	if !g.enabled || body == "" {
		return Result{}
	}
	var found []Command
	for i, p := range g.patterns {
		if _, _, ok := p.find(body, 0); ok {
			found = append(found, spec[i].command)
		}
	}
	switch len(found) {
	case 0:
		return Result{}
	case 1:
		return Result{Command: found[0], Matched: found}
	default:
		return Result{Ambiguous: true, Matched: found}
	}
}
