package graph

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/catalog"
)

// HookName names one of the hooks a node may declare. Hooks are the-loop's
// own code: a graph names them and sets their parameters, and a name this
// package does not know is refused at load, so a graph (an operator's or a
// repository's) can never make the dispatcher run code of its choosing
// (docs/decisions/113-node-hooks.md).
type HookName string

// The hooks.
const (
	// HookValidateArtifacts, on an agent node's exit: the artifact has the
	// front matter and the non-empty sections its schema and the hook name.
	HookValidateArtifacts HookName = "validate-artifacts"
	// HookVerifyTests, on an agent node's exit: the repository's test
	// command passes in the work item's workspace, run under the session's
	// sandbox.
	HookVerifyTests HookName = "verify-tests"
	// HookRecordFeedback, on a feedback gate's exit: the deciding comments
	// are appended to the artifact they concern.
	HookRecordFeedback HookName = "record-feedback"
	// HookPublishArtifact, on entry: the node's notification carries an
	// excerpt of this artifact.
	HookPublishArtifact HookName = "publish-artifact"
	// HookNotify, on entry: the notification to publish (the node's notify).
	HookNotify HookName = "notify"
)

// entryHooks and exitHooks are where each hook may be declared.
var (
	entryHooks = []HookName{HookNotify, HookPublishArtifact}
	exitHooks  = []HookName{HookValidateArtifacts, HookVerifyTests, HookRecordFeedback}
)

// hookParams are the `with:` keys each hook takes.
var hookParams = map[HookName][]string{
	HookValidateArtifacts: {"validates", "schema", "sections", "locked", "checkmarks", "onlyWhenSkipped"},
	HookVerifyTests:       {"command", "timeoutSeconds"},
	HookRecordFeedback:    {"into"},
	HookPublishArtifact:   {"artifact"},
	HookNotify:            {"event"},
}

// MaxTestTimeoutSeconds bounds verify-tests' timeoutSeconds.
const MaxTestTimeoutSeconds = 3600

// Hook is one hook of a node, with its parameters.
type Hook struct {
	Name HookName
	// Artifact is what validate-artifacts reads (its `validates`, else the
	// node's artifact), what publish-artifact shows, or what record-feedback
	// writes into (its `into`). Alternatives are separated by '|'.
	Artifact string
	// Schema names an embedded artifact schema (Schema) whose front matter
	// and sections validate-artifacts requires.
	Schema string
	// Sections are headings validate-artifacts requires, present and not
	// empty, besides the schema's.
	Sections []string
	// Locked: the artifact's front matter says status: approved.
	Locked bool
	// Checkmarks: no checkbox of the artifact is left unticked.
	Checkmarks bool
	// OnlyWhenSkipped: the hook applies only when the node naming this
	// artifact was skipped by the phase selection (the proof then moves to
	// the hook's own artifact).
	OnlyWhenSkipped string
	// Command is verify-tests' command as the graph binds it (argv, no
	// shell); empty: the repository's own test command.
	Command []string
	// TimeoutSeconds bounds verify-tests (0: the dispatcher's default).
	TimeoutSeconds int
	// Event is notify's notification.
	Event catalog.Type
}

// hookYAML is one entry of entry: or exit: — a hook's name, or
// {hook: NAME, with: {...}}.
type hookYAML struct {
	node *yaml.Node
}

func (h *hookYAML) UnmarshalYAML(n *yaml.Node) error {
	h.node = n
	return nil
}

// hookWith is the union of every hook's parameters.
type hookWith struct {
	Validates       string    `yaml:"validates"`
	Schema          string    `yaml:"schema"`
	Sections        []string  `yaml:"sections"`
	Locked          bool      `yaml:"locked"`
	Checkmarks      string    `yaml:"checkmarks"`
	OnlyWhenSkipped string    `yaml:"onlyWhenSkipped"`
	Command         yaml.Node `yaml:"command"`
	TimeoutSeconds  int       `yaml:"timeoutSeconds"`
	Into            string    `yaml:"into"`
	Artifact        string    `yaml:"artifact"`
	Event           string    `yaml:"event"`
}

// parseHook reads one hook entry of node n's list key ("entry" or "exit").
func (e *nodeErrs) parseHook(n *Node, key string, h hookYAML) (Hook, bool) {
	v := h.node
	if v == nil {
		e.bad("%s: empty hook", key)
		return Hook{}, false
	}
	var name string
	var with *yaml.Node
	switch v.Kind {
	case yaml.ScalarNode:
		name = v.Value
	case yaml.MappingNode:
		for i := 0; i+1 < len(v.Content); i += 2 {
			k, val := v.Content[i], v.Content[i+1]
			switch k.Value {
			case "hook":
				name = val.Value
			case "with":
				with = val
			default:
				e.bad("%s: line %d: unknown key %q in a hook (known: hook, with)", key, k.Line, k.Value)
				return Hook{}, false
			}
		}
	default:
		e.bad("%s: line %d: a hook is its name or {hook: NAME, with: {...}}", key, v.Line)
		return Hook{}, false
	}
	hk := Hook{Name: HookName(name)}
	allowed := exitHooks
	if key == "entry" {
		allowed = entryHooks
	}
	if _, known := hookParams[hk.Name]; !known {
		e.bad("%s: hook %q is not one the-loop runs (%s); a repository's own commands are not graph hooks", key, name, joinHooks(append(slices.Clone(entryHooks), exitHooks...)))
		return Hook{}, false
	}
	if !slices.Contains(allowed, hk.Name) {
		e.bad("%s: hook %s belongs in %s", key, name, map[bool]string{true: "exit", false: "entry"}[key == "entry"])
		return Hook{}, false
	}
	var w hookWith
	if with != nil {
		if with.Kind != yaml.MappingNode {
			e.bad("%s: hook %s: with is a mapping", key, name)
			return Hook{}, false
		}
		for i := 0; i+1 < len(with.Content); i += 2 {
			if k := with.Content[i]; !slices.Contains(hookParams[hk.Name], k.Value) {
				e.bad("%s: hook %s: line %d: unknown parameter %q (known: %s)", key, name, k.Line, k.Value, strings.Join(hookParams[hk.Name], ", "))
				return Hook{}, false
			}
		}
		if err := with.Decode(&w); err != nil {
			e.bad("%s: hook %s: %s", key, name, strings.TrimPrefix(err.Error(), "yaml: "))
			return Hook{}, false
		}
	}
	ok := true
	switch hk.Name {
	case HookValidateArtifacts:
		hk.Artifact, hk.Schema, hk.Locked, hk.OnlyWhenSkipped = w.Validates, w.Schema, w.Locked, w.OnlyWhenSkipped
		if hk.Artifact == "" {
			hk.Artifact = n.Artifact
		}
		for _, s := range w.Sections {
			if s = strings.TrimSpace(s); s != "" {
				hk.Sections = append(hk.Sections, s)
			}
		}
		switch w.Checkmarks {
		case "":
		case "complete":
			hk.Checkmarks = true
		default:
			e.bad("%s: hook %s: checkmarks is complete or absent, not %q", key, name, w.Checkmarks)
			ok = false
		}
		if hk.Artifact == "" {
			e.bad("%s: hook %s: no artifact to validate (the node has none and the hook names none in validates)", key, name)
			ok = false
		}
		if hk.Schema != "" {
			if _, found := Schema(hk.Schema); !found {
				e.bad("%s: hook %s: schema %q is not one the-loop ships (%s)", key, name, hk.Schema, strings.Join(SchemaNames(), ", "))
				ok = false
			}
		}
	case HookVerifyTests:
		switch w.Command.Kind {
		case 0:
		case yaml.ScalarNode:
			hk.Command = strings.Fields(w.Command.Value)
		case yaml.SequenceNode:
			if err := w.Command.Decode(&hk.Command); err != nil {
				e.bad("%s: hook %s: command: %s", key, name, strings.TrimPrefix(err.Error(), "yaml: "))
				ok = false
			}
		default:
			e.bad("%s: hook %s: command is a string or a list of arguments", key, name)
			ok = false
		}
		if w.TimeoutSeconds < 0 || w.TimeoutSeconds > MaxTestTimeoutSeconds {
			e.bad("%s: hook %s: timeoutSeconds is between 1 and %d", key, name, MaxTestTimeoutSeconds)
			ok = false
		}
		hk.TimeoutSeconds = w.TimeoutSeconds
	case HookRecordFeedback:
		hk.Artifact = w.Into
		if hk.Artifact == "" {
			hk.Artifact = n.Artifact
		}
		if hk.Artifact == "" {
			e.bad("%s: hook %s: into names no artifact", key, name)
			ok = false
		}
	case HookPublishArtifact:
		hk.Artifact = w.Artifact
		if hk.Artifact == "" {
			e.bad("%s: hook %s: artifact is missing", key, name)
			ok = false
		}
	case HookNotify:
		hk.Event = catalog.Type(w.Event)
		if hk.Event == "" {
			e.bad("%s: hook %s: event is missing", key, name)
			ok = false
		}
	}
	for _, a := range []string{hk.Artifact, hk.OnlyWhenSkipped} {
		if a != "" && !validArtifact(a) {
			e.bad("%s: hook %s: artifact %q must be relative paths inside the work item's spec directory", key, name, a)
			ok = false
		}
	}
	return hk, ok
}

// validArtifact reports whether every alternative of pattern is a relative
// path that stays inside the spec directory.
func validArtifact(pattern string) bool {
	for _, a := range strings.Split(pattern, "|") {
		if strings.TrimSpace(a) != a || a == "" || strings.HasPrefix(a, "/") || slices.Contains(strings.Split(a, "/"), "..") {
			return false
		}
	}
	return true
}

func joinHooks(hs []HookName) string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = string(h)
	}
	return strings.Join(s, ", ")
}

// ExitHooks returns n's exit hooks of the given name, in order.
func (n *Node) ExitHooks(name HookName) []Hook {
	if n == nil {
		return nil
	}
	var out []Hook
	for _, h := range n.Exit {
		if h.Name == name {
			out = append(out, h)
		}
	}
	return out
}
