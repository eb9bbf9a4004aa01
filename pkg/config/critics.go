package config

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// routing.critics: the other harnesses a session may ask for a review
// round of a node's artifact (`the-loop critic run`). A critic is
// executable configuration: its argv is spawned by the dispatcher. It is
// read from the operator's config only, never from the repository a
// session works in, which the agent itself writes
// (docs/decisions/120-critics.md).

// Critic is one routing.critics entry.
type Critic struct {
	// Name is how a session names the critic.
	Name string
	// Harness labels the critic's findings; a built-in kind (claude,
	// cursor) also gives the command when Command is empty.
	Harness string
	// Model fills {model} (and the built-in kinds' model flag).
	Model string
	// Command is argv[0]: a name looked up on the session's PATH, or an
	// absolute path.
	Command string
	// Args follow Command, each element with its placeholders replaced; a
	// value never becomes more than the one element it stands in.
	Args []string
	// Output is how the critic's standard output is read: text as it is,
	// json by the first of its text keys (result, response, text, …).
	Output string
	// Timeout bounds one round.
	Timeout time.Duration
	// Enabled: false keeps the entry listed and refuses to run it.
	Enabled bool
}

// Argv is the critic's whole argument template: its command first.
func (c Critic) Argv() []string {
	if c.Command != "" {
		return append([]string{c.Command}, c.Args...)
	}
	b := builtinCritics[c.Harness]
	argv := slices.Clone(b.argv)
	if c.Model != "" {
		argv = append(argv, b.model, PlaceholderModel)
	}
	return append(argv, c.Args...)
}

// OutputFormat is how the critic's output is read: Output, else the
// built-in kind's.
func (c Critic) OutputFormat() string {
	if c.Output != "" {
		return c.Output
	}
	if c.Command == "" {
		return builtinCritics[c.Harness].output
	}
	return CriticOutputText
}

// Critic output formats.
const (
	CriticOutputText = "text"
	CriticOutputJSON = "json"
)

// Placeholders of routing.critics[].args, replaced element-wise by the
// dispatcher when a round starts.
const (
	// PlaceholderModel is the critic's model.
	PlaceholderModel = "{model}"
	// PlaceholderPromptFile is a file holding the prompt (PlaceholderPrompt
	// is the prompt itself).
	PlaceholderPromptFile = "{promptFile}"
	// PlaceholderArtifact is the artifact's absolute path ("" when the
	// round reviews none).
	PlaceholderArtifact = "{artifact}"
	// PlaceholderWorkItem is the work item's ref.
	PlaceholderWorkItem = "{workItem}"
	// PlaceholderSpecDir is the work item's spec directory.
	PlaceholderSpecDir = "{specDir}"
	// PlaceholderCwd is the checkout the critic runs in.
	PlaceholderCwd = "{cwd}"
)

// CriticPlaceholders are the placeholders routing.critics[].args may hold.
func CriticPlaceholders() []string {
	return []string{PlaceholderPrompt, PlaceholderPromptFile, PlaceholderModel, PlaceholderArtifact,
		PlaceholderWorkItem, PlaceholderSpecDir, PlaceholderCwd}
}

// Bounds of routing.critics[].timeout.
const (
	DefaultCriticTimeout = 15 * time.Minute
	MaxCriticTimeout     = 2 * time.Hour
)

// builtinCritic is a harness kind whose one-shot invocation the-loop
// knows: the argv before the entry's own args, the flag that names a model,
// and how its output is read.
type builtinCritic struct {
	argv   []string
	model  string
	output string
}

// builtinCritics are the kinds a critic may name without a command. Both
// print their answer and exit, editing nothing unless their own arguments
// allow it.
var builtinCritics = map[string]builtinCritic{
	HarnessClaude: {argv: []string{"claude", "-p", PlaceholderPrompt, "--output-format", "json"}, model: "--model", output: CriticOutputJSON},
	HarnessCursor: {argv: []string{"cursor-agent", "-p", PlaceholderPrompt, "--output-format", "json"}, model: "-m", output: CriticOutputJSON},
}

// criticName is what a critic may be called: it is typed on a command line
// and printed in comments.
var criticName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)

// placeholderRE finds {name} in an argument.
var placeholderRE = regexp.MustCompile(`\{[A-Za-z][A-Za-z0-9_]*\}`)

// critics reads routing.critics. An entry that cannot run as written is
// refused at load, naming the problem: a critic is executable
// configuration, and running something else than what the operator wrote
// would be worse than not starting.
func (p *parser) critics(v *yaml.Node, path string) {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, ErrInvalid, "want a list of critics (name, command or harness, args, …)")
		return
	}
	var out []Critic
	for i, it := range v.Content {
		at := fmt.Sprintf("%s[%d]", path, i)
		c := Critic{Timeout: DefaultCriticTimeout, Enabled: true}
		var timeout string
		p.mapping(it, at, map[string]field{
			"name":    p.str(&c.Name),
			"harness": p.str(&c.Harness),
			"model":   p.str(&c.Model),
			"command": p.str(&c.Command),
			"args": func(v *yaml.Node, path string) {
				if list, ok := p.argList(v, path); ok {
					c.Args = list
				}
			},
			"output":  enumField(p, &c.Output, CriticOutputText, CriticOutputText, CriticOutputJSON),
			"timeout": p.str(&timeout),
			"enabled": p.boolean(&c.Enabled),
		})
		it = resolve(it)
		if it.Kind != yaml.MappingNode {
			continue
		}
		if timeout != "" {
			d, err := time.ParseDuration(timeout)
			switch {
			case err != nil:
				p.fail(it, at+".timeout", ErrInvalid, "%q is not a duration such as 15m", clip(timeout))
			case d <= 0 || d > MaxCriticTimeout:
				p.fail(it, at+".timeout", ErrInvalid, "%s: want more than 0 and at most %s", d, MaxCriticTimeout)
			default:
				c.Timeout = d
			}
		}
		if err := c.check(); err != "" {
			p.fail(it, at, ErrInvalid, "%s", err)
			continue
		}
		if slices.ContainsFunc(out, func(o Critic) bool { return o.Name == c.Name }) {
			p.fail(it, at+".name", ErrInvalid, "%q names another critic already; a session runs a critic by its name", c.Name)
			continue
		}
		out = append(out, c)
	}
	p.cfg.Routing.Critics = out
}

// check says why c cannot run as written, "" when it can.
func (c Critic) check() string {
	if !criticName.MatchString(c.Name) {
		return fmt.Sprintf("name %q: want 1 to 64 lower-case letters, digits, '.', '_' or '-', starting with a letter or digit", clip(c.Name))
	}
	if c.Command == "" {
		if _, ok := builtinCritics[c.Harness]; !ok {
			return fmt.Sprintf("critic %s: set command (and args), or a harness whose invocation the-loop knows (%s)", c.Name, strings.Join(slices.Sorted(maps.Keys(builtinCritics)), ", "))
		}
	} else if strings.TrimSpace(c.Command) != c.Command || strings.ContainsAny(c.Command, "{}") {
		return fmt.Sprintf("critic %s: command %q is one executable's name or path, without spaces around it or placeholders", c.Name, clip(c.Command))
	}
	known := CriticPlaceholders()
	handed := false
	for _, a := range c.Argv() {
		for _, ph := range placeholderRE.FindAllString(a, -1) {
			if !slices.Contains(known, ph) {
				return fmt.Sprintf("critic %s: unknown placeholder %s; the placeholders are %s", c.Name, ph, strings.Join(known, " "))
			}
			handed = handed || ph == PlaceholderPrompt || ph == PlaceholderPromptFile
		}
	}
	if !handed {
		return fmt.Sprintf("critic %s: its args hold neither %s nor %s, so it would review nothing", c.Name, PlaceholderPrompt, PlaceholderPromptFile)
	}
	return ""
}

// Critic is the enabled-or-not critic called name.
func (r Routing) Critic(name string) (Critic, bool) {
	for _, c := range r.Critics {
		if c.Name == name {
			return c, true
		}
	}
	return Critic{}, false
}

// criticsReference documents routing.critics for ReferenceMarkdown.
func criticsReference() []refKey {
	return []refKey{
		{"routing.critics", "list", "`[]`", "Critics: other harnesses a session may ask for a review round of a node's artifact (`the-loop critic run NAME`); the dispatcher runs the critic's argv without a shell, in the work item's checkout, sandboxed as the session is, with the session's environment but not its endpoint token, and records what it printed (or why it failed) on the work item as `critic.findings`, which the session then receives. Read from this file only, never from a repository's (an agent writes its checkout). An entry that cannot run as written refuses the config (docs/decisions/120-critics.md)."},
		{"routing.critics[].name", "string", "required", "How a session names the critic: lower-case letters, digits, `.`, `_`, `-`; unique."},
		{"routing.critics[].command", "string", "from `harness`", "The executable: a name found on the session's `PATH`, or an absolute path. Without it, `harness` must be `claude` (`claude -p {prompt} --output-format json`) or `cursor` (`cursor-agent -p {prompt} --output-format json`)."},
		{"routing.critics[].args", "list of strings", "`[]`", "The arguments after the command (after the built-in ones for a `harness`), each element's placeholders replaced: `" + strings.Join(CriticPlaceholders(), "` `") + "`. A value fills only the element it stands in, never adds one. They must hand over `{prompt}` or `{promptFile}`."},
		{"routing.critics[].harness", "string", "`\"\"`", "Labels the findings; `claude` or `cursor` also gives the command when `command` is empty."},
		{"routing.critics[].model", "string", "`\"\"`", "Fills `{model}`; with a built-in `harness`, passed with its model flag."},
		{"routing.critics[].output", "`text`, `json`", "`text` (`json` for a built-in `harness`)", "How the critic's standard output is read: as it is, or as a JSON object whose `result`, `response`, `text`, `output`, `content` or `message` holds the findings (else the output as it is). Unknown: warning, `text`."},
		{"routing.critics[].timeout", "duration", "`15m`", "Bounds one round (at most `2h`); a critic still running then is killed, and what it printed so far is recorded with the timeout."},
		{"routing.critics[].enabled", "bool", "`true`", "`false` lists the critic and refuses to run it."},
	}
}
