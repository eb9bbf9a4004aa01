package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

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
	cfg *Config
	// workItemSet: the file names graphs.workItem.
	workItemSet bool
	warnings    []Warning
	errs        []error
	// dir is where relative graph files are read from ("": the current
	// directory); graphFiles are the ones read.
	dir        string
	graphFiles []graphFile
	// legacy gathers the original's keys that make one setting together.
	legacy legacy
	// notified is the notifications section, checked against the
	// collaborators once the whole file is read (alerts.go).
	notified *yaml.Node
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
