package config

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/identity"
)

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
			p.routingSessionFields(routing)
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
	if p.cfg.Version != "" && WrittenForOriginal(p.cfg.Version) && !p.workItemSet {
		// A file written for the original follows the original's
		// process (docs/decisions/112-the-originals-graphs.md).
		p.cfg.Graphs.WorkItem = graph.PDLCWorkItemGraph
	}
	if hasKey(n, "version") == nil {
		p.warn(n, "version", "not set; read as %s (`the-loop migrate-config` writes it)", Version)
	}
}

// WrittenForOriginal reports whether a file declaring version was written
// for the original the-loop: it declares a version older than this one's
// first, 0.7.0. Such a file's work items follow the original's work-item
// loop unless it names graphs.workItem.
func WrittenForOriginal(version string) bool {
	c, ok := compareVersion(version, "0.7.0")
	return ok && c < 0
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
	p.cfg.Channels.Slack.Subscribe = p.grantsOf(v, path, DefaultSubscribe(), catalog.Subscribable,
		"kept, for a custom graph's notify event",
		"is not an event a channel may subscribe to; ignored")
}

func (p *parser) publish(v *yaml.Node, path string) {
	p.cfg.Channels.Slack.Publish = p.grantsOf(v, path, DefaultPublish(), catalog.Publishable,
		"kept, but no message is ever classified as it",
		"is not an event a channel message may become; the grant is ignored")
}

// grantsOf is the grant list at v (grants) without the catalog types that
// allowed refuses, each dropped with a warning that it refused; a type the
// catalog does not know is kept, with a warning that says what that means.
func (p *parser) grantsOf(v *yaml.Node, path string, def []catalog.Type, allowed func(catalog.Type) bool, unknownKept, refused string) []catalog.Type {
	var out []catalog.Type
	for _, t := range p.grants(v, path, def) {
		switch {
		case !catalog.Known(t):
			p.warn(v, path, "%q is not a catalog event; %s", clip(string(t)), unknownKept)
		case !allowed(t):
			p.warn(v, path, "%q %s", t, refused)
			continue
		}
		out = append(out, t)
	}
	return out
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
				p.workItemSet = true
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
