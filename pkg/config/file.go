package config

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/identity"
)

// Version is the operator YAML version this build reads and Migrate writes.
const Version = "0.7.0"

// Config is the operator YAML (LOOP_CONFIG), parsed and resolved: defaults
// applied, soft problems turned into warnings, the authorizedUsers entries
// built into a directory. Treat a *Config as read-only; Watcher hands the same
// value to every reader.
//
// It models what the channel, ledger and identity requirements read,
// routing.control, which the control grammar needs, and graphs, the
// operator's process graphs. Every other key of the original's configuration
// loads too (original.go): the ones that are process settings here end up in
// Settings, the rest are built in or warned about.
type Config struct {
	// Version is the version the file declares, "" when it declares none.
	Version  string
	Routing  Routing
	Channels Channels
	Graphs   Graphs
	// Settings are the process settings (LOOP_*) the file sets through the
	// original's keys, in file order; ApplySettings applies them at start.
	Settings []FileSetting
}

// Graphs is the graphs section: the process graphs work items follow.
type Graphs struct {
	// Files are the operator's graph files as read: a relative path in the
	// file is resolved against the config file's directory.
	Files []string
	// WorkItem is the graph a work item follows when its session spawns
	// (default graph.WorkItemGraph); a do command's session follows
	// graph.AdhocGraph.
	WorkItem string

	registry *graph.Registry
}

// Registry holds the graphs this config knows: the built-ins and those of
// Files, each validated when the config was loaded. Every service reads it
// from the config in force, so the dispatcher, ingress-slack and `the-loop
// graph` judge a work item by the same graph. Read-only.
func (g Graphs) Registry() *graph.Registry {
	if g.registry == nil {
		return builtinGraphs()
	}
	return g.registry
}

// builtinGraphs is the registry of a config that adds no graph, shared:
// a registry is only read once built.
var builtinGraphs = sync.OnceValue(graph.NewRegistry)

// Routing is the routing section.
type Routing struct {
	// AuthorizedUsers are the people who may direct the loop, looked up by any
	// channel's id. Empty authorizes nobody.
	AuthorizedUsers *identity.Directory
	Control         Control
}

// Control is routing.control: the control-keyword grammar's settings.
type Control struct {
	// Enabled: when false no comment or message is parsed for keywords.
	Enabled bool
	// RequireStartCommand: a label arms a work item, a start keyword starts it.
	RequireStartCommand bool
	// Keywords overrides the default keyword of a command (start, stop, …).
	// An empty string disables that command. Commands not named keep their
	// default, which the control package owns.
	Keywords map[string]string
}

// ControlCommands are the commands routing.control.keywords may name.
var ControlCommands = []string{"start", "stop", "pause", "resume", "execute", "contribute", "cleanup", "do"}

// Channels is the channels section.
type Channels struct {
	// Ledger is the channel of record; "github" is the only one (R3.1).
	Ledger string
	Slack  SlackChannel
}

// LedgerGitHub is the only accepted channels.ledger.
const LedgerGitHub = "github"

// SlackChannel is channels.slack.
type SlackChannel struct {
	Enabled bool
	// Channel is the Slack channel id (C…) posts go to.
	Channel string
	// Subscribe are the event types the channel receives. Names outside the
	// catalog are kept: a custom graph may fire a custom notify event.
	Subscribe []catalog.Type
	// Publish are the event types a message on the channel may become. Names
	// the catalog knows but does not mark publishable have been removed.
	Publish   []catalog.Type
	Verbosity Verbosity
	Read      SlackRead
	// MaxChars caps an excerpt carried into a Slack message.
	MaxChars int
	Kickoff  Kickoff
}

// Subscribes reports whether the channel receives events of type t.
func (s SlackChannel) Subscribes(t catalog.Type) bool { return slices.Contains(s.Subscribe, t) }

// CanPublish reports whether a message on the channel may become t. It is
// false for any type the catalog does not mark publishable, whatever the list
// says.
func (s SlackChannel) CanPublish(t catalog.Type) bool {
	return catalog.Publishable(t) && slices.Contains(s.Publish, t)
}

// SlackRead is channels.slack.read.
type SlackRead struct {
	Mode            ReadMode
	IntervalSeconds int
}

// Interval is the poll cadence.
func (r SlackRead) Interval() time.Duration { return time.Duration(r.IntervalSeconds) * time.Second }

// Kickoff is channels.slack.kickoff: where a top-level message may start a
// work item (R6.5).
type Kickoff struct {
	// Repo is owner/repo; empty disables kickoff whatever the grants say.
	Repo string
	// Labels are put on the new issue, and are the only labels that arm it
	// (abuse case 7).
	Labels []string
}

// Verbosity is channels.slack.verbosity; each level is a strict superset of
// the one before.
type Verbosity string

// Verbosity levels.
const (
	VerbosityQuiet   Verbosity = "quiet"
	VerbosityNormal  Verbosity = "normal"
	VerbosityVerbose Verbosity = "verbose"
)

// ReadMode is channels.slack.read.mode: how ingress-slack reads the channel.
type ReadMode string

// Read modes. ReadEvents is the Events API over HTTP.
const (
	ReadPoll   ReadMode = "poll"
	ReadSocket ReadMode = "socket"
	ReadEvents ReadMode = "events"
	ReadOff    ReadMode = "off"
)

// Defaults (R2.2 and the original's documented defaults).
const (
	DefaultReadInterval = 30
	MinReadInterval     = 5
	DefaultMaxChars     = 3000
	// MaxMaxChars is Slack's limit on one section block's text.
	MaxMaxChars = 3000
)

// DefaultSubscribe and DefaultPublish are the grants of a channel whose config
// names no list (R2.2): hear the agent's questions, answer them, nothing more.
func DefaultSubscribe() []catalog.Type { return []catalog.Type{catalog.SessionAwaitingInput} }

// DefaultPublish is the publish grant of a channel that names no list.
func DefaultPublish() []catalog.Type { return []catalog.Type{catalog.WorkItemReply} }

// Default is the configuration of an empty file: nobody authorized, Slack
// off, GitHub the ledger.
func Default() *Config {
	dir, _ := identity.New(nil)
	return &Config{
		Routing: Routing{
			AuthorizedUsers: dir,
			Control:         Control{Enabled: true, RequireStartCommand: true},
		},
		Channels: Channels{
			Ledger: LedgerGitHub,
			Slack: SlackChannel{
				Subscribe: DefaultSubscribe(),
				Publish:   DefaultPublish(),
				Verbosity: VerbosityNormal,
				Read:      SlackRead{Mode: ReadPoll, IntervalSeconds: DefaultReadInterval},
				MaxChars:  DefaultMaxChars,
			},
		},
		Graphs: Graphs{WorkItem: graph.WorkItemGraph},
	}
}

// Sentinels for errors.Is on what Parse returns.
var (
	// ErrUnknownKey: a key this version does not know, usually a typo.
	ErrUnknownKey = errors.New("unknown key")
	// ErrRemovedKey: a key an older version had; migrate-config moves it.
	ErrRemovedKey = errors.New("removed key")
	// ErrInvalid: a value of the wrong type or out of range.
	ErrInvalid = errors.New("invalid value")
)

// KeyError is one refusal, naming the key path (channels.slack.read.mode) and
// the line it is on.
type KeyError struct {
	Path string
	Line int
	Kind error // ErrUnknownKey, ErrRemovedKey or ErrInvalid
	Msg  string
}

func (e *KeyError) Error() string {
	where := e.Path
	if where == "" {
		where = "(top level)"
	}
	if e.Line > 0 {
		where += " (line " + strconv.Itoa(e.Line) + ")"
	}
	return where + ": " + e.Msg
}

// Unwrap returns the kind, for errors.Is.
func (e *KeyError) Unwrap() error { return e.Kind }

// Warning is a problem the loader resolved on its own — a value it replaced by
// the default, a grant it ignored, an entry it dropped — and that the operator
// should still hear about.
type Warning struct {
	Path    string
	Line    int
	Message string
}

func (w Warning) String() string {
	if w.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s", w.Path, w.Line, w.Message)
	}
	return w.Path + ": " + w.Message
}

// LogValue implements slog.LogValuer.
func (w Warning) LogValue() slog.Value {
	return slog.GroupValue(slog.String("path", w.Path), slog.Int("line", w.Line), slog.String("message", w.Message))
}

// LogWarnings logs each warning at Warn level.
func LogWarnings(log *slog.Logger, file string, ws []Warning) {
	for _, w := range ws {
		log.Warn("config warning", slog.String("file", file), slog.String("path", w.Path), slog.Int("line", w.Line), slog.String("reason", w.Message))
	}
}

// LoadFile reads and parses the operator YAML at path; graph files it names
// by a relative path are read from path's directory.
func LoadFile(path string) (*Config, []Warning, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read config: %w", err)
	}
	cfg, ws, _, err := parseIn(src, filepath.Dir(path))
	if err != nil {
		return nil, ws, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, ws, nil
}

// Parse reads an operator YAML strictly: an unknown key, a removed key, a
// value of the wrong type, an unknown channels.ledger and a graph file that
// does not load are errors, all of them reported at once. What the
// requirements resolve softly — a malformed grant list, an unknown verbosity
// or read mode, a bad authorizedUsers entry — comes back as warnings next to
// a usable config. An empty file is Default().
//
// Graph files named by a relative path are read from the current directory;
// LoadFile and Watcher read them from the config file's.
func Parse(src []byte) (*Config, []Warning, error) {
	cfg, ws, _, err := parseIn(src, "")
	return cfg, ws, err
}

// ParseAt is Parse with graph files named by a relative path read from dir
// (a file's own directory), as LoadFile reads them: for a config that is not
// in a file yet, such as the result of Migrate.
func ParseAt(src []byte, dir string) (*Config, []Warning, error) {
	cfg, ws, _, err := parseIn(src, dir)
	return cfg, ws, err
}

// parseIn is Parse with relative graph files read from dir. It also returns
// the graph files the config names, as read, even when it refuses the
// config: a Watcher rereads it when one of them changes.
func parseIn(src []byte, dir string) (*Config, []Warning, []graphFile, error) {
	root, err := decodeOne(src)
	if err != nil {
		return nil, nil, nil, err
	}
	p := &parser{cfg: Default(), dir: dir}
	if root != nil {
		p.top(root)
		p.settle()
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, p.warnings, p.graphFiles, err
	}
	return p.cfg, p.warnings, p.graphFiles, nil
}

// decodeOne parses exactly one YAML document; nil means an empty file.
func decodeOne(src []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		return nil, fmt.Errorf("parse YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, fmt.Errorf("parse YAML: %w", err)
		}
		return nil, &KeyError{Line: extra.Line, Kind: ErrInvalid, Msg: "the file holds more than one YAML document; the config is one"}
	}
	if len(doc.Content) == 0 {
		return nil, nil
	}
	return doc.Content[0], nil
}

type parser struct {
	cfg      *Config
	warnings []Warning
	errs     []error
	// dir is where relative graph files are read from ("": the current
	// directory); graphFiles are the ones read.
	dir        string
	graphFiles []graphFile
	// legacy gathers the original's keys that make one setting together.
	legacy legacy
}

func (p *parser) fail(n *yaml.Node, path string, kind error, format string, args ...any) {
	p.errs = append(p.errs, &KeyError{Path: path, Line: n.Line, Kind: kind, Msg: fmt.Sprintf(format, args...)})
}

func (p *parser) warn(n *yaml.Node, path, format string, args ...any) {
	p.warnings = append(p.warnings, Warning{Path: path, Line: n.Line, Message: fmt.Sprintf(format, args...)})
}

// field handles one key's value; it is not called for an explicit null, which
// leaves the default in place.
type field func(v *yaml.Node, path string)

// removedKey says what replaced a key, and what ignoring it would silently
// change — the reason it is refused rather than skipped (R7.2, decision 004).
type removedKey struct{ replacement, ignoring string }

var removedKeys = map[string]removedKey{
	"channels.slack.events": {
		replacement: "it is now channels.slack.subscribe (the same list of event types)",
		ignoring:    "what the channel hears",
	},
	"channels.slack.authorizedUsers": {
		replacement: "Slack member ids now go in routing.authorizedUsers entries as {slack: <member id>}, best folded into the person's own entry ({github: <login>, slack: <member id>})",
		ignoring:    "who may act from Slack",
	},
}

// removedMessage is the refusal of a removed key; KeyError puts the key's
// path in front of it.
func removedMessage(path string) string {
	k := removedKeys[path]
	return fmt.Sprintf("removed in config %s; %s. It is not ignored, because that would silently change %s. Run `the-loop migrate-config` to rewrite the file.",
		Version, k.replacement, k.ignoring)
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// resolve follows an alias to the node it names.
func resolve(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 16; i++ {
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

// mapping walks a mapping's keys. Every key must be in fields (or be a
// removed key, refused with its own message); duplicates are refused too,
// since YAML's "last one wins" would hide the first.
func (p *parser) mapping(n *yaml.Node, path string, fields map[string]field) {
	n = resolve(n)
	if isNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		p.fail(n, path, ErrInvalid, "want a mapping of %s", knownList(fields))
		return
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			p.fail(k, path, ErrInvalid, "a key must be a plain name")
			continue
		}
		kp := join(path, k.Value)
		if seen[k.Value] {
			p.fail(k, kp, ErrInvalid, "the key appears twice")
			continue
		}
		seen[k.Value] = true
		if _, ok := removedKeys[kp]; ok {
			p.fail(k, kp, ErrRemovedKey, "%s", removedMessage(kp))
			continue
		}
		f, ok := fields[k.Value]
		if !ok {
			p.fail(k, kp, ErrUnknownKey, "unknown key; %s accepts %s", orTop(path), knownList(fields))
			continue
		}
		if v = resolve(v); isNull(v) {
			continue
		}
		f(v, kp)
	}
}

func orTop(path string) string {
	if path == "" {
		return "the top level"
	}
	return path
}

func knownList(fields map[string]field) string {
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return strings.Join(keys, ", ")
}

func (p *parser) str(dst *string) field {
	return func(v *yaml.Node, path string) {
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
			p.fail(v, path, ErrInvalid, "want a string")
			return
		}
		*dst = v.Value
	}
}

// boolean accepts YAML 1.1's yes/no/on/off too, as the original's PyYAML did,
// so an old file keeps its meaning (R7.3).
func (p *parser) boolean(dst *bool) field {
	return func(v *yaml.Node, path string) {
		var b bool
		if v.Kind != yaml.ScalarNode || v.Decode(&b) != nil {
			p.fail(v, path, ErrInvalid, "want true or false")
			return
		}
		*dst = b
	}
}

func (p *parser) integer(dst *int, lo, hi int, why string) field {
	return func(v *yaml.Node, path string) {
		var n int
		if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!int" || v.Decode(&n) != nil {
			p.fail(v, path, ErrInvalid, "want a whole number")
			return
		}
		if n < lo || n > hi {
			p.fail(v, path, ErrInvalid, "is %d: %s", n, why)
			return
		}
		*dst = n
	}
}

// strings reads a list of non-empty strings, strictly.
func (p *parser) strings(dst *[]string) field {
	return func(v *yaml.Node, path string) {
		list, ok := stringList(v)
		if !ok {
			p.fail(v, path, ErrInvalid, "want a list of non-empty strings")
			return
		}
		*dst = list
	}
}

// stringList returns the items of a sequence of non-empty strings, and false
// for anything else.
func stringList(v *yaml.Node) ([]string, bool) {
	if v.Kind != yaml.SequenceNode {
		return nil, false
	}
	out := make([]string, 0, len(v.Content))
	for _, it := range v.Content {
		it = resolve(it)
		if it == nil || it.Kind != yaml.ScalarNode || it.ShortTag() != "!!str" || strings.TrimSpace(it.Value) == "" {
			return nil, false
		}
		out = append(out, it.Value)
	}
	return out, true
}

func (p *parser) top(n *yaml.Node) {
	n = resolve(n)
	if n.Kind != yaml.MappingNode && !isNull(n) {
		p.fail(n, "", ErrInvalid, "the config must be a mapping (version, routing, channels, graphs)")
		return
	}
	c := p.cfg
	top := map[string]field{
		"version": p.version,
		"routing": func(v *yaml.Node, path string) {
			routing := map[string]field{
				"authorizedUsers": p.authorizedUsers,
				"control": func(v *yaml.Node, path string) {
					p.mapping(v, path, map[string]field{
						"enabled":             p.boolean(&c.Routing.Control.Enabled),
						"requireStartCommand": p.boolean(&c.Routing.Control.RequireStartCommand),
						"keywords":            p.keywords,
					})
				},
			}
			p.originalFields("routing", routing)
			p.mapping(v, path, routing)
		},
		"channels": func(v *yaml.Node, path string) {
			p.mapping(v, path, map[string]field{
				"ledger": p.ledger,
				"slack":  p.slack,
			})
		},
		"graphs": p.graphs,
	}
	p.originalFields("", top)
	p.mapping(n, "", top)
	if hasKey(n, "version") == nil {
		p.warn(n, "version", "not set; read as %s (`the-loop migrate-config` writes it)", Version)
	}
}

func hasKey(n *yaml.Node, key string) *yaml.Node {
	n = resolve(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Kind == yaml.ScalarNode && n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// version implements the version gate (decision 001): an older
// declared version is read as it is, with a warning, because R7.3 promises
// that a config saying nothing new behaves as before; only removed keys are
// refused. A newer version is refused: its keys may mean what this build
// cannot know.
func (p *parser) version(v *yaml.Node, path string) {
	if v.Kind != yaml.ScalarNode {
		p.fail(v, path, ErrInvalid, "want a version such as %q", Version)
		return
	}
	cmp, ok := compareVersion(v.Value, Version)
	switch {
	case !ok:
		p.fail(v, path, ErrInvalid, "%q is not a version such as %q", clip(v.Value), Version)
		return
	case cmp > 0:
		p.fail(v, path, ErrInvalid, "%s is newer than this the-loop reads (%s); upgrade the-loop", clip(v.Value), Version)
		return
	case cmp < 0:
		p.warn(v, path, "declares %s; read as %s, which it is compatible with unless refused below. `the-loop migrate-config` bumps it", clip(v.Value), Version)
	}
	p.cfg.Version = v.Value
}

// compareVersion compares dotted versions by the digits of each part, as the
// original did ("0.6.0", "v0.6", "0.6.0-rc1" all work). ok is false when a part
// has no digits.
func compareVersion(a, b string) (int, bool) {
	pa, ok := versionParts(a)
	if !ok {
		return 0, false
	}
	pb, _ := versionParts(b)
	for i := range max(len(pa), len(pb)) {
		var x, y int
		if i < len(pa) {
			x = pa[i]
		}
		if i < len(pb) {
			y = pb[i]
		}
		if x != y {
			if x < y {
				return -1, true
			}
			return 1, true
		}
	}
	return 0, true
}

func versionParts(s string) ([]int, bool) {
	s = strings.TrimSpace(s)
	if s == "" || len(s) > 64 {
		return nil, false
	}
	var out []int
	for part := range strings.SplitSeq(s, ".") {
		digits := strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, part)
		n, err := strconv.Atoi(digits)
		if err != nil {
			return nil, false
		}
		out = append(out, n)
	}
	return out, true
}

// clip keeps a quoted value short in a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// ledger refuses any channel of record but GitHub at load, where every other
// channels.* problem only warns: a wrong ledger would record nothing anywhere,
// which is worse than not starting (R3.1, decision 004).
func (p *parser) ledger(v *yaml.Node, path string) {
	if v.Kind != yaml.ScalarNode || v.Value != LedgerGitHub {
		p.fail(v, path, ErrInvalid, "%q is not a ledger this the-loop has; the accepted values are: %s", clip(v.Value), LedgerGitHub)
		return
	}
	p.cfg.Channels.Ledger = v.Value
}

func (p *parser) keywords(v *yaml.Node, path string) {
	kw := map[string]string{}
	fields := map[string]field{}
	for _, cmd := range ControlCommands {
		fields[cmd] = func(v *yaml.Node, path string) {
			var s string
			p.str(&s)(v, path)
			kw[cmd] = strings.TrimSpace(s)
		}
	}
	// An explicit null keeps the default keyword, like an absent key.
	p.mapping(v, path, fields)
	p.cfg.Routing.Control.Keywords = kw
}

var repoPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$`)

func (p *parser) slack(v *yaml.Node, path string) {
	s := &p.cfg.Channels.Slack
	fields := map[string]field{
		"enabled":   p.boolean(&s.Enabled),
		"channel":   p.str(&s.Channel),
		"subscribe": p.subscribe,
		"publish":   p.publish,
		"verbosity": func(v *yaml.Node, path string) {
			switch x := Verbosity(v.Value); {
			case v.Kind == yaml.ScalarNode && slices.Contains([]Verbosity{VerbosityQuiet, VerbosityNormal, VerbosityVerbose}, x):
				s.Verbosity = x
			default:
				p.warn(v, path, "%q is not quiet, normal or verbose; using normal", clip(v.Value))
			}
		},
		"read": func(v *yaml.Node, path string) {
			p.mapping(v, path, map[string]field{
				"mode": func(v *yaml.Node, path string) {
					switch x := ReadMode(v.Value); {
					case v.Kind == yaml.ScalarNode && slices.Contains([]ReadMode{ReadPoll, ReadSocket, ReadEvents, ReadOff}, x):
						s.Read.Mode = x
					default:
						// Never guess a reading mode: an unknown one reads nothing.
						s.Read.Mode = ReadOff
						p.warn(v, path, "%q is not poll, socket, events or off; using off (the channel reads nothing)", clip(v.Value))
					}
				},
				"intervalSeconds": p.integer(&s.Read.IntervalSeconds, MinReadInterval, 86400,
					fmt.Sprintf("the poll interval must be between %d and 86400 seconds", MinReadInterval)),
			})
		},
		"maxChars": p.integer(&s.MaxChars, 1, MaxMaxChars,
			fmt.Sprintf("must be between 1 and %d (Slack's limit on one section's text)", MaxMaxChars)),
		"kickoff": func(v *yaml.Node, path string) {
			p.mapping(v, path, map[string]field{
				"repo": func(v *yaml.Node, path string) {
					var repo string
					p.str(&repo)(v, path)
					if repo != "" && !repoPattern.MatchString(repo) {
						p.fail(v, path, ErrInvalid, "%q is not owner/repo", clip(repo))
						return
					}
					s.Kickoff.Repo = repo
				},
				"labels": p.strings(&s.Kickoff.Labels),
			})
		},
	}
	p.originalFields("channels.slack", fields)
	p.mapping(v, path, fields)
	if s.Enabled && s.Channel == "" {
		p.warn(v, join(path, "channel"), "not set while the channel is enabled; every post will fail until it names a channel id (C…)")
	}
}

// grants reads a subscribe or publish list. An explicit [] is kept as empty
// (silence is no; docs/decisions/002); anything but a list of strings is
// malformed and resolves to the default, loudly (R2.5).
func (p *parser) grants(v *yaml.Node, path string, def []catalog.Type) []catalog.Type {
	names, ok := stringList(v)
	if !ok {
		p.warn(v, path, "malformed: want a list of event type names; using the default %v", def)
		return def
	}
	out := make([]catalog.Type, 0, len(names))
	for _, n := range names {
		if t := catalog.Type(n); !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	return out
}

func (p *parser) subscribe(v *yaml.Node, path string) {
	var out []catalog.Type
	for _, t := range p.grants(v, path, DefaultSubscribe()) {
		switch {
		case !catalog.Known(t):
			p.warn(v, path, "%q is not a catalog event; kept, for a custom graph's notify event", clip(string(t)))
		case !catalog.Subscribable(t):
			p.warn(v, path, "%q is not an event a channel may subscribe to; ignored", t)
			continue
		}
		out = append(out, t)
	}
	p.cfg.Channels.Slack.Subscribe = out
}

func (p *parser) publish(v *yaml.Node, path string) {
	var out []catalog.Type
	for _, t := range p.grants(v, path, DefaultPublish()) {
		switch {
		case !catalog.Known(t):
			p.warn(v, path, "%q is not a catalog event; kept, but no message is ever classified as it", clip(string(t)))
		case !catalog.Publishable(t):
			p.warn(v, path, "%q is not an event a channel message may become; the grant is ignored", t)
			continue
		}
		out = append(out, t)
	}
	p.cfg.Channels.Slack.Publish = out
}

// graphs reads the graphs section. A graph file that cannot be read, does not
// validate (an unknown or unreachable node, an edge to nowhere, a human node
// without a classifier, …) or takes a name already taken refuses the config,
// naming the file and the problem: a work item must never follow a graph
// that is half there. graphs.workItem must name a graph the config knows.
func (p *parser) graphs(v *yaml.Node, path string) {
	g := &p.cfg.Graphs
	var workItem *yaml.Node
	p.mapping(v, path, map[string]field{
		"files": func(v *yaml.Node, path string) {
			if v.Kind != yaml.SequenceNode {
				p.fail(v, path, ErrInvalid, "want a list of graph file paths")
				return
			}
			reg := graph.NewRegistry()
			for i, it := range v.Content {
				ip := fmt.Sprintf("%s[%d]", path, i)
				it = resolve(it)
				if it == nil || it.Kind != yaml.ScalarNode || it.ShortTag() != "!!str" || strings.TrimSpace(it.Value) == "" {
					p.fail(v.Content[i], ip, ErrInvalid, "want the path of a graph file")
					continue
				}
				file := it.Value
				if !filepath.IsAbs(file) && p.dir != "" {
					file = filepath.Join(p.dir, file)
				}
				data, err := readGraphFile(file)
				p.graphFiles = append(p.graphFiles, graphFile{path: file, sum: sumGraphFile(data, err)})
				if err != nil {
					p.fail(it, ip, ErrInvalid, "%s: %s", it.Value, describeReadError(err, it.Value, p.dir))
					continue
				}
				if _, err := reg.AddYAML(it.Value, data); err != nil {
					p.fail(it, ip, ErrInvalid, "%v", err)
					continue
				}
				g.Files = append(g.Files, file)
			}
			g.registry = reg
		},
		"workItem": func(v *yaml.Node, path string) {
			var name string
			p.str(&name)(v, path)
			if name = strings.TrimSpace(name); name != "" {
				g.WorkItem, workItem = name, v
			}
		},
	})
	if workItem != nil {
		if _, ok := g.Registry().Get(g.WorkItem); !ok {
			p.fail(workItem, join(path, "workItem"), ErrInvalid, "%q is not a graph this config knows; known: %s",
				clip(g.WorkItem), strings.Join(g.Registry().Names(), ", "))
		}
	}
}

// graphFile is a graph file as the parser read it: its path and the digest
// of its content (or of the read error).
type graphFile struct {
	path string
	sum  [sha256.Size]byte
}

// readGraphFile reads a graph file, refusing anything but a regular file (a
// FIFO or a device would block or never end) and reading at most one byte
// past graph.MaxGraphBytes, which graph.Load refuses with its own message.
func readGraphFile(path string) ([]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, graph.MaxGraphBytes+1))
}

func sumGraphFile(data []byte, err error) [sha256.Size]byte {
	if err != nil {
		return sha256.Sum256([]byte("\x00read error\x00" + err.Error()))
	}
	return sha256.Sum256(data)
}

// describeReadError says why a graph file could not be read, without
// repeating the path the message already names.
func describeReadError(err error, name, dir string) string {
	switch {
	case errors.Is(err, fs.ErrNotExist) && !filepath.IsAbs(name) && dir != "":
		return "no such file (a relative path is read from the config file's directory, " + dir + ")"
	case errors.Is(err, fs.ErrNotExist):
		return "no such file"
	case errors.Is(err, fs.ErrPermission):
		return "permission denied"
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// authorizedUsers reads R5.1's entries. An entry that is neither a string nor
// a well-formed mapping is dropped with a warning (R5.5): dropping can only
// deny someone, never admit anyone.
func (p *parser) authorizedUsers(v *yaml.Node, path string) {
	if v.Kind != yaml.SequenceNode {
		p.fail(v, path, ErrInvalid, "want a list of entries: a GitHub login, or {github: <login>, slack: <member id>, name: <name>}")
		return
	}
	var people []identity.Person
	var paths []string
	var nodes []*yaml.Node
	for i, e := range v.Content {
		ep := fmt.Sprintf("%s[%d]", path, i)
		if person, why := entry(resolve(e)); why != "" {
			p.warn(e, ep, "dropped: %s", why)
		} else {
			people = append(people, person)
			paths = append(paths, ep)
			nodes = append(nodes, e)
		}
	}
	dir, problems := identity.New(people)
	for _, e := range problems {
		if e.Clash >= 0 {
			p.warn(nodes[e.Index], paths[e.Index], "dropped: %s (%s)", e.Reason, paths[e.Clash])
		} else {
			p.warn(nodes[e.Index], paths[e.Index], "dropped: %s", e.Reason)
		}
	}
	p.cfg.Routing.AuthorizedUsers = dir
}

// entry turns one authorizedUsers item into a person, or says why not.
func entry(e *yaml.Node) (identity.Person, string) {
	switch {
	case e == nil:
		return identity.Person{}, "not a string or a mapping"
	case e.Kind == yaml.ScalarNode:
		// A login may be all digits, which YAML reads as an integer.
		if tag := e.ShortTag(); tag != "!!str" && tag != "!!int" {
			return identity.Person{}, "a bare entry must be a GitHub login"
		}
		if strings.TrimSpace(e.Value) == "" {
			return identity.Person{}, "an empty login"
		}
		return identity.Person{GitHub: e.Value}, ""
	case e.Kind == yaml.MappingNode:
		var person identity.Person
		seen := map[string]bool{}
		for i := 0; i+1 < len(e.Content); i += 2 {
			k, val := e.Content[i], resolve(e.Content[i+1])
			if seen[k.Value] {
				return identity.Person{}, fmt.Sprintf("the key %q appears twice", clip(k.Value))
			}
			seen[k.Value] = true
			var dst *string
			switch k.Value {
			case string(identity.ChannelGitHub):
				dst = &person.GitHub
			case string(identity.ChannelSlack):
				dst = &person.Slack
			case "name":
				dst = &person.Name
			default:
				return identity.Person{}, fmt.Sprintf("%q is not a channel an entry may name (github, slack) nor name", clip(k.Value))
			}
			if val == nil || val.Kind != yaml.ScalarNode || (val.ShortTag() != "!!str" && !(k.Value == "github" && val.ShortTag() == "!!int")) {
				return identity.Person{}, fmt.Sprintf("%s must be a string", k.Value)
			}
			if strings.TrimSpace(val.Value) == "" {
				return identity.Person{}, fmt.Sprintf("%s is empty", k.Value)
			}
			*dst = val.Value
		}
		if len(person.IDs()) == 0 {
			return identity.Person{}, "names no github or slack id"
		}
		return person, ""
	}
	return identity.Person{}, "not a string or a mapping"
}
