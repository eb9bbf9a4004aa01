package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/graph"
)

// Report is what Migrate did: one line per move, and notes for what the
// operator still has to do by hand.
type Report struct {
	Moves []string
	Notes []string
}

// Changed reports whether Migrate changed anything.
func (r Report) Changed() bool { return len(r.Moves) > 0 }

// Render prints the report the way `the-loop migrate-config` shows it.
func (r Report) Render(w io.Writer) error {
	var b strings.Builder
	if !r.Changed() {
		b.WriteString("config is already current; nothing to migrate\n")
	} else {
		b.WriteString("migrated the config:\n")
		for _, m := range r.Moves {
			b.WriteString("  · " + m + "\n")
		}
		for _, n := range r.Notes {
			b.WriteString("  note: " + n + "\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (r *Report) move(format string, args ...any) {
	r.Moves = append(r.Moves, fmt.Sprintf(format, args...))
}
func (r *Report) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Migrate rewrites an operator YAML into version 0.7.0 (R7.2):
//
//   - channels.slack.events becomes channels.slack.subscribe; when subscribe is
//     already there it wins and events is dropped, reported;
//   - each member id of channels.slack.authorizedUsers becomes a {slack: <id>}
//     entry of routing.authorizedUsers, unless an entry already has that slack
//     id; the old key goes, and a note asks the operator to fold each id into
//     the person's GitHub entry;
//   - version becomes 0.7.0.
//
// It edits the YAML node tree, so comments and key order survive (the
// original's migrate lost them). Nothing is ever widened: ids move one to one
// and nothing is merged into an existing person.
//
// Migrate is idempotent: on a current file it returns src itself, byte for
// byte, and a report that says nothing changed. It checks its own output reads
// back as current, and returns an error rather than a file it could not
// migrate again. A file declaring a newer version is refused.
func Migrate(src []byte) ([]byte, Report, error) {
	var rep Report
	root, err := decodeOne(src)
	if err != nil {
		return nil, rep, err
	}
	if root == nil {
		return src, rep, nil
	}
	if root.Kind != yaml.MappingNode {
		return nil, rep, errors.New("migrate: the config must be a mapping (version, routing, channels)")
	}
	if err := checkMigratableVersion(root); err != nil {
		return nil, rep, err
	}
	if len(pending(root)) == 0 {
		return src, rep, nil
	}

	if slack := mappingAt(root, "channels", "slack"); slack != nil {
		migrateEvents(slack, &rep)
		for keyIndex(slack, "authorizedUsers") >= 0 {
			if err := migrateSlackUsers(root, slack, &rep); err != nil {
				return nil, Report{}, err
			}
		}
	}
	keepOriginalProcess(root, &rep)
	bumpVersion(root, &rep)

	doc := &yaml.Node{Kind: yaml.DocumentNode, Content: []*yaml.Node{root}}
	if d := documentOf(src); d != nil {
		doc.HeadComment, doc.LineComment, doc.FootComment = d.HeadComment, d.LineComment, d.FootComment
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, Report{}, fmt.Errorf("migrate: write YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, Report{}, fmt.Errorf("migrate: write YAML: %w", err)
	}
	// The result must read back as current, or a second run would not be a
	// no-op; refuse rather than hand back a file that cannot settle.
	back, err := decodeOne(out.Bytes())
	if err != nil {
		return nil, Report{}, fmt.Errorf("migrate: the rewritten file does not read back (%v); migrate it by hand", err)
	}
	if left := pending(back); back == nil || len(left) > 0 {
		return nil, Report{}, fmt.Errorf("migrate: the rewritten file still needs %s; migrate it by hand", strings.Join(left, ", "))
	}
	return out.Bytes(), rep, nil
}

// keepOriginalProcess names the original's work-item loop in graphs.workItem
// of a file written for the original (it declares a version older than
// 0.7.0) that names none: such a file follows that loop as it is
// (WrittenForOriginal), and must go on following it once its version says
// 0.7.0 (docs/decisions/112-the-originals-graphs.md).
func keepOriginalProcess(root *yaml.Node, rep *Report) {
	c, ok := compareVersion(scalarValue(hasKey(root, "version")), Version)
	if !ok || c >= 0 || mappingAt(root, "graphs") != nil && keyIndex(mappingAt(root, "graphs"), "workItem") >= 0 {
		return
	}
	graphs := mappingAt(root, "graphs")
	if graphs == nil {
		if hasKey(root, "graphs") != nil {
			return // not a mapping: Parse says so, with its line
		}
		graphs = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		root.Content = append(root.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "graphs"}, graphs)
	}
	graphs.Content = append(graphs.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: "workItem"},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: graph.PDLCWorkItemGraph})
	rep.move("graphs.workItem: %s, the original's work-item loop, which this file followed as it was", graph.PDLCWorkItemGraph)
}

// documentOf returns src's document node, for its comments.
func documentOf(src []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(src)).Decode(&doc); err != nil || doc.Kind != yaml.DocumentNode {
		return nil
	}
	return &doc
}

// pending lists what a migration would change in root; empty means current.
// Migrate uses it both to decide and to check its own output, so the two can
// never disagree about "current".
func pending(root *yaml.Node) []string {
	var out []string
	if slack := mappingAt(root, "channels", "slack"); slack != nil {
		for _, k := range []string{"events", "authorizedUsers"} {
			if keyIndex(slack, k) >= 0 {
				out = append(out, "channels.slack."+k)
			}
		}
	}
	v := hasKey(root, "version")
	if c, ok := compareVersion(scalarValue(v), Version); v == nil || !ok || c != 0 {
		out = append(out, "version "+Version)
	}
	return out
}

func scalarValue(n *yaml.Node) string {
	if n = resolve(n); n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

func checkMigratableVersion(root *yaml.Node) error {
	v := resolve(hasKey(root, "version"))
	if v == nil || isNull(v) {
		return nil
	}
	c, ok := compareVersion(scalarValue(v), Version)
	if !ok {
		return fmt.Errorf("migrate: version %q is not a version such as %q; fix it by hand first", clip(scalarValue(v)), Version)
	}
	if c > 0 {
		return fmt.Errorf("migrate: version %s is newer than this the-loop knows (%s); nothing to do here", clip(v.Value), Version)
	}
	return nil
}

// mappingAt follows keys from m and returns the mapping at the end, or nil.
func mappingAt(m *yaml.Node, keys ...string) *yaml.Node {
	for _, k := range keys {
		m = resolve(hasKey(m, k))
		if m == nil || m.Kind != yaml.MappingNode {
			return nil
		}
	}
	return m
}

// keyIndex returns the Content index of key in mapping m, or -1.
func keyIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if k := m.Content[i]; k.Kind == yaml.ScalarNode && k.Value == key {
			return i
		}
	}
	return -1
}

func removePair(m *yaml.Node, i int) {
	m.Content = append(m.Content[:i:i], m.Content[i+2:]...)
}

// flow renders a small node on one line for a report.
func flow(n *yaml.Node) string {
	c := *resolve(n)
	c.Style = yaml.FlowStyle
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	b, err := yaml.Marshal(&c)
	if err != nil {
		return "…"
	}
	return clip(strings.TrimSpace(string(b)))
}

func migrateEvents(slack *yaml.Node, rep *Report) {
	for {
		i := keyIndex(slack, "events")
		if i < 0 {
			return
		}
		val := resolve(slack.Content[i+1])
		switch {
		case keyIndex(slack, "subscribe") >= 0:
			rep.move("dropped channels.slack.events %s: channels.slack.subscribe is already set and wins", flow(val))
			removePair(slack, i)
		case val != nil && val.Kind == yaml.SequenceNode && len(val.Content) == 0:
			// 12.1 read `events: []` as the default; `subscribe: []` now means
			// nothing (docs/decisions/002). Dropping the key keeps the
			// behaviour the operator had.
			rep.move("dropped channels.slack.events []: it meant the default [%s], which an absent subscribe still means", DefaultSubscribe()[0])
			rep.note("channels.slack.subscribe: [] now means the channel hears nothing; the migration kept your default instead")
			removePair(slack, i)
		default:
			// Renaming the key node in place keeps its comments and position.
			slack.Content[i].Value = "subscribe"
			rep.move("renamed channels.slack.events to channels.slack.subscribe")
		}
	}
}

func migrateSlackUsers(root, slack *yaml.Node, rep *Report) error {
	i := keyIndex(slack, "authorizedUsers")
	if i < 0 {
		return nil
	}
	oldKey, old := slack.Content[i], resolve(slack.Content[i+1])
	var ids []string
	var items []*yaml.Node
	switch {
	case isNull(old):
	case old.Kind == yaml.SequenceNode:
		for _, it := range old.Content {
			id := scalarValue(it)
			if id = strings.TrimSpace(id); id == "" || resolve(it).Kind != yaml.ScalarNode {
				rep.note("dropped %s from channels.slack.authorizedUsers: not a member id", flow(it))
				continue
			}
			if !containsString(ids, id) {
				ids = append(ids, id)
				items = append(items, it)
			}
		}
	default:
		rep.note("channels.slack.authorizedUsers was not a list (%s); nothing was moved, so add {slack: <member id>} entries under routing.authorizedUsers by hand", flow(old))
	}

	users, err := authorizedUsersSeq(root)
	if err != nil {
		return err
	}
	added := 0
	for j, id := range ids {
		if at := entryWithSlack(users, id); at >= 0 {
			rep.move("kept Slack member %s out of routing.authorizedUsers: entry %d already has it", id, at)
			continue
		}
		val := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: id}
		e := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "slack"}, val,
		}}
		// Comments about the ids travel with them: the list's own comment onto
		// the first new entry, each id's comment onto its entry.
		if added == 0 {
			e.HeadComment = joinComments(oldKey.HeadComment, old.HeadComment)
		}
		val.LineComment = joinComments(items[j].HeadComment, items[j].LineComment)
		users.Content = append(users.Content, e)
		added++
		rep.move("moved Slack member %s from channels.slack.authorizedUsers to routing.authorizedUsers as {slack: %s}", id, id)
		rep.note("fold {slack: %s} into that person's GitHub entry ({github: <login>, slack: %s}); until then %s may act on Slack only, never on what reads GitHub logins", id, id, id)
	}
	removePair(slack, i)
	if len(ids) == 0 {
		rep.move("removed channels.slack.authorizedUsers (it held no member id)")
	} else {
		rep.move("removed channels.slack.authorizedUsers")
	}
	return nil
}

func joinComments(cs ...string) string {
	var out []string
	for _, c := range cs {
		if c != "" {
			out = append(out, c)
		}
	}
	return strings.Join(out, "\n")
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// authorizedUsersSeq returns routing.authorizedUsers, creating routing and the
// list when absent.
func authorizedUsersSeq(root *yaml.Node) (*yaml.Node, error) {
	routing := ensureKey(root, "routing", yaml.MappingNode, "!!map")
	if routing == nil {
		return nil, errors.New("migrate: routing is not a mapping, so the Slack ids have nowhere to go; fix it by hand first")
	}
	users := ensureKey(routing, "authorizedUsers", yaml.SequenceNode, "!!seq")
	if users == nil {
		return nil, errors.New("migrate: routing.authorizedUsers is not a list, so the Slack ids have nowhere to go; fix it by hand first")
	}
	return users, nil
}

// ensureKey returns the value of key in the mapping parent, of kind (tag):
// appended when absent, and a null turned into an empty one in place, its
// position and comments kept. It returns nil when the value is of another
// kind.
func ensureKey(parent *yaml.Node, key string, kind yaml.Kind, tag string) *yaml.Node {
	v := resolve(hasKey(parent, key))
	switch {
	case v == nil:
		v = &yaml.Node{Kind: kind, Tag: tag}
		parent.Content = append(parent.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
	case isNull(v):
		*v = yaml.Node{Kind: kind, Tag: tag, Line: v.Line, Column: v.Column,
			HeadComment: v.HeadComment, LineComment: v.LineComment, FootComment: v.FootComment}
	case v.Kind != kind:
		return nil
	}
	return v
}

// entryWithSlack returns the index of the entry of users whose slack id is id,
// or -1.
func entryWithSlack(users *yaml.Node, id string) int {
	for i, e := range users.Content {
		if e = resolve(e); e != nil && e.Kind == yaml.MappingNode && scalarValue(hasKey(e, "slack")) == id {
			return i
		}
	}
	return -1
}

func bumpVersion(root *yaml.Node, rep *Report) {
	i := keyIndex(root, "version")
	if i < 0 {
		root.Content = append([]*yaml.Node{
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: "version"},
			{Kind: yaml.ScalarNode, Tag: "!!str", Value: Version, Style: yaml.DoubleQuotedStyle},
		}, root.Content...)
		rep.move("set version to %s (it was not set)", Version)
		return
	}
	old := root.Content[i+1]
	if c, ok := compareVersion(scalarValue(old), Version); ok && c == 0 && old.Kind == yaml.ScalarNode {
		return
	}
	// A fresh node rather than an edit: the old one may be an alias target.
	nv := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: Version, Style: yaml.DoubleQuotedStyle,
		HeadComment: old.HeadComment, LineComment: old.LineComment, FootComment: old.FootComment}
	root.Content[i+1] = nv
	rep.move("version %s → %s", displayVersion(old), Version)
}

func displayVersion(n *yaml.Node) string {
	if v := scalarValue(n); v != "" {
		return clip(v)
	}
	return "(unset)"
}
