package redact

import (
	"os"
	"os/user"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/pychar"
)

// The placeholders, one per rule.
const (
	PlaceholderEnv   = "<redacted:env>"
	PlaceholderHome  = "<redacted:home>"
	PlaceholderPath  = "<redacted:path>"
	PlaceholderUser  = "<redacted:user>"
	PlaceholderHost  = "<redacted:host>"
	PlaceholderEmail = "<redacted:email>"
	PlaceholderToken = "<redacted:token>"
)

// Thresholds, in characters: anything shorter is not masked, because masking
// it would eat ordinary text.
const (
	MinEnvValue = 6
	MinHome     = 4
	MinUser     = 3
	MinHost     = 4
	MinToken    = 20
)

// sensitiveName marks an environment variable whose value is a credential.
var sensitiveName = regexp.MustCompile(`(?i)TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|AUTH`)

// email is the original's [\w.+-]+@[\w-]+(?:\.[\w-]+)+ with Python's Unicode
// \w (letters, numbers, '_'). RE2's leftmost-first matching gives the same
// matches as Python's backtracking for a pattern without lookaround.
var email = regexp.MustCompile(`[\p{L}\p{N}_.+-]+@[\p{L}\p{N}_-]+(?:\.[\p{L}\p{N}_-]+)+`)

// Options are the machine facts a Scrubber masks. An empty field (or nil Env)
// disables its rule.
type Options struct {
	// Env is the process environment, name to value. Only values of names
	// matching TOKEN|SECRET|KEY|PASSWORD|PASSWD|CREDENTIAL|AUTH
	// (case-insensitive) and at least MinEnvValue characters long are masked.
	Env map[string]string
	// Home is the home directory.
	Home string
	// User is the local OS user name.
	User string
	// Host is the host name.
	Host string
}

// Scrubber masks one machine's data. The zero Scrubber still applies the
// rules that need no machine facts (paths, emails, tokens).
type Scrubber struct {
	envValues []string // longest first
	home      string
	user      string
	host      string
}

// New returns a Scrubber for the given facts.
func New(o Options) Scrubber {
	var s Scrubber
	for name, value := range o.Env {
		if sensitiveName.MatchString(name) && utf8.RuneCountInString(value) >= MinEnvValue && !slices.Contains(s.envValues, value) {
			s.envValues = append(s.envValues, value)
		}
	}
	// Longest first, as the original; it keeps the environment's order among
	// equal lengths, a Go map has none, so ties go in byte order.
	slices.SortFunc(s.envValues, func(a, b string) int {
		if d := utf8.RuneCountInString(b) - utf8.RuneCountInString(a); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	if utf8.RuneCountInString(o.Home) >= MinHome {
		s.home = o.Home
	}
	if utf8.RuneCountInString(o.User) >= MinUser {
		s.user = o.User
	}
	if utf8.RuneCountInString(o.Host) >= MinHost && o.Host != "localhost" {
		s.host = o.Host
	}
	return s
}

// FromOS returns a Scrubber for this process's machine: its environment, home
// directory (os.UserHomeDir, else the passwd entry), user name (LOGNAME, USER,
// LNAME or USERNAME as Python's getpass.getuser, else the passwd entry) and
// host name. A fact that cannot be read is left empty, so its rule is off.
func FromOS() Scrubber {
	env := map[string]string{}
	withheldMu.Lock()
	for name, value := range withheld {
		env[name] = value
	}
	withheldMu.Unlock()
	for _, kv := range os.Environ() {
		if name, value, ok := strings.Cut(kv, "="); ok {
			env[name] = value
		}
	}
	o := Options{Env: env}
	var account *user.User
	lookup := func() *user.User {
		if account == nil {
			account, _ = user.Current()
		}
		return account
	}
	if home, err := os.UserHomeDir(); err == nil && home != "" {
		o.Home = home
	} else if u := lookup(); u != nil {
		o.Home = u.HomeDir
	}
	for _, name := range []string{"LOGNAME", "USER", "LNAME", "USERNAME"} {
		if v := os.Getenv(name); v != "" {
			o.User = v
			break
		}
	}
	if o.User == "" {
		if u := lookup(); u != nil {
			o.User = u.Username
		}
	}
	o.Host, _ = os.Hostname()
	return New(o)
}

// Scrub returns text with, in this order:
//
//  1. credential environment values (longest first) → <redacted:env>;
//  2. the home directory → <redacted:home>;
//  3. Windows paths, then POSIX and ~ paths that start the text or follow
//     whitespace, a quote, '=', '(', ':' or ',' → <redacted:path> (so
//     "/the-loop:…" and a bare "/api/v1" are masked too);
//  4. the user name as a whole token → <redacted:user>;
//  5. the host name → <redacted:host>;
//  6. email addresses → <redacted:email>;
//  7. token-shaped runs: at least 20 of [A-Za-z0-9_-] with a digit, not
//     preceded by a word character or '/' → <redacted:token>.
//
// Each rule sees the previous rule's output. Scrub is idempotent except where
// a fact collides with the placeholders themselves (a host or user named
// "host" or "redacted", an env value inside a placeholder) or where masking
// the host, which has no token boundary and runs after the user rule, leaves
// the user name newly standing alone ("buildboxalice" → "<redacted:host>alice"),
// which the next Scrub masks.
func (s Scrubber) Scrub(text string) string {
	for _, v := range s.envValues {
		text = strings.ReplaceAll(text, v, PlaceholderEnv)
	}
	if s.home != "" {
		text = strings.ReplaceAll(text, s.home, PlaceholderHome)
	}
	text = replaceWindowsPaths(text)
	text = replacePOSIXPaths(text)
	if s.user != "" {
		text = replaceWholeToken(text, s.user, PlaceholderUser)
	}
	if s.host != "" {
		text = strings.ReplaceAll(text, s.host, PlaceholderHost)
	}
	text = email.ReplaceAllLiteralString(text, PlaceholderEmail)
	return replaceTokens(text)
}

// before returns the rune ending text[:i], or -1 at the start of the text.
func before(text string, i int) rune {
	if i == 0 {
		return -1
	}
	r, _ := utf8.DecodeLastRuneInString(text[:i])
	return r
}

// at returns the rune starting text[i:] and its width, or (-1, 0) at the end.
func at(text string, i int) (rune, int) {
	if i >= len(text) {
		return -1, 0
	}
	return utf8.DecodeRuneInString(text[i:])
}

// substitute is re.sub with a hand-written matcher: match(i) returns the end
// of a match starting at i, or -1; matches are tried at every code point from
// the left and never overlap. Lookbehind-style checks in match see the text as
// it was before this rule.
func substitute(text, placeholder string, match func(i int) int) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(text); {
		if end := match(i); end > i {
			b.WriteString(text[last:i])
			b.WriteString(placeholder)
			last, i = end, end
			continue
		}
		_, size := utf8.DecodeRuneInString(text[i:])
		i += size
	}
	if last == 0 {
		return text
	}
	b.WriteString(text[last:])
	return b.String()
}

// replaceWindowsPaths is [A-Za-z]:\\[^\s"']+ (no left boundary).
func replaceWindowsPaths(text string) string {
	if !strings.Contains(text, `:\`) {
		return text
	}
	return substitute(text, PlaceholderPath, func(i int) int {
		if i+3 > len(text) || !isASCIILetter(text[i]) || text[i+1] != ':' || text[i+2] != '\\' {
			return -1
		}
		j := i + 3
		for {
			r, size := at(text, j)
			if size == 0 || pychar.IsSpace(r) || r == '"' || r == '\'' {
				break
			}
			j += size
		}
		if j == i+3 {
			return -1
		}
		return j
	})
}

func isASCIILetter(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' }

// pathStart reports whether a path may start after r (-1 = start of text).
func pathStart(r rune) bool {
	switch r {
	case -1, '"', '\'', '`', '=', '(', ':', ',':
		return true
	}
	return pychar.IsSpace(r)
}

// isSegment is [\w@.+~-]; isTilde adds '/'.
func isSegment(r rune) bool {
	switch r {
	case '@', '.', '+', '~', '-':
		return true
	}
	return pychar.IsWord(r)
}

// replacePOSIXPaths is
// (?:(?<=^)|(?<=[\s"'`=(:,]))(?:~[\w@./+~-]*|/[\w@.+~-]+(?:/[\w@.+~-]+)*).
func replacePOSIXPaths(text string) string {
	if !strings.ContainsAny(text, "/~") {
		return text
	}
	return substitute(text, PlaceholderPath, func(i int) int {
		c := text[i]
		if c != '/' && c != '~' || !pathStart(before(text, i)) {
			return -1
		}
		if c == '~' {
			j := i + 1
			for {
				r, size := at(text, j)
				if size == 0 || !(r == '/' || isSegment(r)) {
					return j
				}
				j += size
			}
		}
		// One or more /segment, each segment non-empty.
		end := -1
		for j := i; j < len(text) && text[j] == '/'; {
			k := j + 1
			for {
				r, size := at(text, k)
				if size == 0 || !isSegment(r) {
					break
				}
				k += size
			}
			if k == j+1 {
				break
			}
			end, j = k, k
		}
		return end
	})
}

// replaceWholeToken replaces literal (case-sensitive) where it is not
// adjacent to a word character or '-': (?<![\w-])literal(?![\w-]).
func replaceWholeToken(text, literal, placeholder string) string {
	if !strings.Contains(text, literal) {
		return text
	}
	blocked := func(r rune) bool { return r == '-' || pychar.IsWord(r) }
	return substitute(text, placeholder, func(i int) int {
		if !strings.HasPrefix(text[i:], literal) || blocked(before(text, i)) {
			return -1
		}
		end := i + len(literal)
		if r, size := at(text, end); size > 0 && blocked(r) {
			return -1
		}
		return end
	})
}

// replaceTokens is (?<![\w/])(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{20,}(?![\w-]).
//
// The run is greedy and must be followed by neither a word character nor '-',
// so only a maximal run can match, and then only if it holds an ASCII digit
// (a Unicode digit after the run satisfies the lookahead but is a word
// character, so the match fails). A run may still match from just after a '-'
// inside it when its real start is blocked ("/abc-<20 more>").
func replaceTokens(text string) string {
	runEnd, lastDigit := -1, -1 // cached for the run containing i
	return substitute(text, PlaceholderToken, func(i int) int {
		if !isTokenByte(text[i]) {
			return -1
		}
		if i >= runEnd {
			runEnd, lastDigit = i, -1
			for runEnd < len(text) && isTokenByte(text[runEnd]) {
				if '0' <= text[runEnd] && text[runEnd] <= '9' {
					lastDigit = runEnd
				}
				runEnd++
			}
		}
		if runEnd-i < MinToken || lastDigit < i {
			return -1
		}
		if r := before(text, i); r == '/' || r != -1 && pychar.IsWord(r) {
			return -1
		}
		if r, size := at(text, runEnd); size > 0 && pychar.IsWord(r) {
			return -1
		}
		return runEnd
	})
}

func isTokenByte(c byte) bool {
	return c == '_' || c == '-' || '0' <= c && c <= '9' || isASCIILetter(c)
}

// withheld are the variables Withhold took out of this process's
// environment, with their values: FromOS still masks them.
var (
	withheldMu sync.Mutex
	withheld   = map[string]string{}
)

// Withhold removes the named variables from this process's environment,
// once their values were read, so that neither a child process (a tmux
// server, a git command) nor a same-user process reading
// /proc/<pid>/environ finds them; FromOS goes on masking their values.
func Withhold(names ...string) {
	withheldMu.Lock()
	defer withheldMu.Unlock()
	for _, n := range names {
		if v, ok := os.LookupEnv(n); ok {
			if v != "" {
				withheld[n] = v
			}
			os.Unsetenv(n)
		}
	}
}
