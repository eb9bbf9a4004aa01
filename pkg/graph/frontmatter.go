package graph

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// ApprovedByKey is the front-matter key of a spec artifact that names its
// approvers.
const ApprovedByKey = "approvedBy"

// ErrFrontMatter: the artifact's front matter cannot be edited safely.
var ErrFrontMatter = errors.New("artifact front matter")

// Entry is how a is written into an artifact's approvedBy list: the person's
// GitHub login first (the convention the templates use), then the gate, the
// time and the provenance, e.g.
//
//	@alice (design-approval, 2026-05-04T09:30:00Z, via slack U012AB3CD, https://github.com/o/r/issues/7#issuecomment-1)
func (a Approval) Entry() string {
	var b strings.Builder
	b.WriteString("@" + strings.TrimPrefix(a.Login, "@") + " (" + a.Node)
	if !a.At.IsZero() {
		b.WriteString(", " + a.At.UTC().Format(time.RFC3339))
	}
	if p := a.Provenance; p.Channel != "" {
		b.WriteString(", via " + p.Channel)
		if p.Member != "" {
			b.WriteString(" " + p.Member)
		}
	}
	switch {
	case a.Provenance.RecordURL != "":
		b.WriteString(", " + a.Provenance.RecordURL)
	case a.Provenance.EventID != "":
		b.WriteString(", event " + a.Provenance.EventID)
	}
	b.WriteString(")")
	return b.String()
}

// AddApproval adds a's Entry to the approvedBy list of the markdown
// artifact doc's YAML front matter and returns the new document. Every byte
// outside the edited lines is kept: other keys, comments, quoting and the
// body. The list is created when absent (and the front matter too, when the
// document has none); "approvedBy: []" and an empty value become a block
// list; a one-line flow list is rewritten on its line with its values
// re-quoted. If the list already holds an entry for the same login and node
// (a redelivery, or a second approval of the same gate), doc is returned
// unchanged.
func AddApproval(doc []byte, a Approval) ([]byte, error) {
	if a.Login == "" || a.Node == "" {
		return nil, fmt.Errorf("%w: an approval needs a login and a node", ErrFrontMatter)
	}
	item := strconv.Quote(a.Entry()) // a YAML double-quoted scalar too
	nl := "\n"
	if i := bytes.IndexByte(doc, '\n'); i > 0 && doc[i-1] == '\r' {
		nl = "\r\n"
	}
	lines := splitLines(string(doc))
	if len(lines) == 0 || strings.TrimRight(lines[0], "\r\n") != "---" {
		return []byte("---" + nl + ApprovedByKey + ":" + nl + "  - " + item + nl + "---" + nl + string(doc)), nil
	}
	f, err := parseFrontMatterDoc(lines, nl)
	if err != nil {
		return nil, err
	}
	keyAt := -1
	if f.m != nil {
		for i := 0; i+1 < len(f.m.Content); i += 2 {
			if f.m.Content[i].Value == ApprovedByKey {
				keyAt = i
			}
		}
	}
	if keyAt < 0 {
		return f.replace([]string{ApprovedByKey + ":" + nl, "  - " + item + nl}, f.end, f.end), nil
	}
	key, val := f.m.Content[keyAt], f.m.Content[keyAt+1]
	keyLine := key.Line // index into lines
	if key.Column != 1 || keyLine < 1 || keyLine >= f.end {
		return nil, fmt.Errorf("%w: cannot locate %s", ErrFrontMatter, ApprovedByKey)
	}
	switch {
	case val.Kind == yaml.ScalarNode && val.Tag == "!!null" && val.Line == keyLine:
		return f.replace([]string{ApprovedByKey + ":" + nl, "  - " + item + nl}, keyLine, keyLine+1), nil
	case val.Kind != yaml.SequenceNode:
		return nil, fmt.Errorf("%w: %s is not a list", ErrFrontMatter, ApprovedByKey)
	}
	var have []string
	for _, it := range val.Content {
		if it.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%w: %s holds a non-string entry", ErrFrontMatter, ApprovedByKey)
		}
		have = append(have, it.Value)
	}
	prefix := strings.ToLower("@" + strings.TrimPrefix(a.Login, "@") + " (" + a.Node)
	for _, h := range have {
		if l := strings.ToLower(h); strings.HasPrefix(l, prefix+",") || strings.HasPrefix(l, prefix+")") {
			return doc, nil
		}
	}
	if val.Style&yaml.FlowStyle != 0 {
		return f.addToFlowList(val, keyLine, have, item)
	}
	return f.addToBlockList(val, keyAt, item)
}

// frontMatterDoc is a document cut into lines (each keeping its line end)
// whose front matter, lines[1:end], is parsed.
type frontMatterDoc struct {
	lines []string
	end   int    // the closing --- or ...
	nl    string // the document's line end
	// m is the front matter's mapping; nil when it is empty. Its line
	// numbers are 1-based within the front matter, so lines[k] is its line
	// k.
	m *yaml.Node
}

// parseFrontMatterDoc parses the front matter opened by lines[0].
func parseFrontMatterDoc(lines []string, nl string) (*frontMatterDoc, error) {
	f := &frontMatterDoc{lines: lines, end: -1, nl: nl}
	for i := 1; i < len(lines); i++ {
		if l := strings.TrimRight(lines[i], "\r\n"); l == "---" || l == "..." {
			f.end = i
			break
		}
	}
	if f.end < 0 {
		return nil, fmt.Errorf("%w: the front matter opened by --- is never closed", ErrFrontMatter)
	}
	var root yaml.Node
	if err := yaml.Unmarshal([]byte(strings.Join(lines[1:f.end], "")), &root); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrFrontMatter, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	switch {
	case len(root.Content) == 0:
	case root.Content[0].Kind == yaml.MappingNode:
		f.m = root.Content[0]
	case root.Content[0].Kind == yaml.ScalarNode && root.Content[0].Tag == "!!null":
	default:
		return nil, fmt.Errorf("%w: the front matter is not a mapping", ErrFrontMatter)
	}
	return f, nil
}

// replace returns the document with lines[from:to] replaced by repl.
func (f *frontMatterDoc) replace(repl []string, from, to int) []byte {
	var b strings.Builder
	for _, l := range f.lines[:from] {
		b.WriteString(l)
	}
	for _, l := range repl {
		b.WriteString(l)
	}
	for _, l := range f.lines[to:] {
		b.WriteString(l)
	}
	return []byte(b.String())
}

// addToFlowList rewrites the one-line flow list val (on keyLine, holding
// have) with item added, its values re-quoted; an empty one becomes a block
// list.
func (f *frontMatterDoc) addToFlowList(val *yaml.Node, keyLine int, have []string, item string) ([]byte, error) {
	if val.Line != keyLine || !flowEndsOnLine(f.lines[keyLine]) {
		return nil, fmt.Errorf("%w: %s is a multi-line flow list; write it as a block list", ErrFrontMatter, ApprovedByKey)
	}
	if len(have) == 0 {
		return f.replace([]string{ApprovedByKey + ":" + f.nl, "  - " + item + f.nl}, keyLine, keyLine+1), nil
	}
	quoted := make([]string, 0, len(have)+1)
	for _, h := range have {
		quoted = append(quoted, strconv.Quote(h))
	}
	quoted = append(quoted, item)
	return f.replace([]string{ApprovedByKey + ": [" + strings.Join(quoted, ", ") + "]" + f.nl}, keyLine, keyLine+1), nil
}

// addToBlockList adds item after the last line of the block list val (the
// value of the key at m.Content[keyAt]), indented like its first item.
func (f *frontMatterDoc) addToBlockList(val *yaml.Node, keyAt int, item string) ([]byte, error) {
	first := val.Content[0]
	if first.Line < 1 || first.Line >= f.end {
		return nil, fmt.Errorf("%w: cannot locate %s", ErrFrontMatter, ApprovedByKey)
	}
	firstLine := f.lines[first.Line]
	indent := firstLine[:len(firstLine)-len(strings.TrimLeft(firstLine, " "))]
	stop := f.end // the next top-level key, or the closing ---
	if keyAt+2 < len(f.m.Content) {
		stop = f.m.Content[keyAt+2].Line
	}
	last := stop
	for last-1 > first.Line {
		t := strings.TrimSpace(f.lines[last-1])
		if t != "" && !strings.HasPrefix(t, "#") {
			break
		}
		last--
	}
	if last <= first.Line {
		last = first.Line + 1
	}
	return f.replace([]string{indent + "- " + item + f.nl}, last, last), nil
}

// flowEndsOnLine reports whether a one-line flow list closes on line (a
// trailing comment is allowed).
func flowEndsOnLine(line string) bool {
	t := strings.TrimSpace(line)
	if i := strings.Index(t, " #"); i >= 0 {
		t = strings.TrimSpace(t[:i])
	}
	return strings.HasSuffix(t, "]")
}

// splitLines splits s after every '\n', keeping it.
func splitLines(s string) []string {
	var out []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			out = append(out, s)
			break
		}
		out = append(out, s[:i+1])
		s = s[i+1:]
	}
	return out
}

// maxFeedbackChars bounds one comment as record-feedback writes it.
const maxFeedbackChars = 4000

// AppendFeedback returns doc with the comments that decided gate node
// appended at its end (the record-feedback hook): a heading naming the gate,
// the outcome and the time, then each person's words as RelayedText reads
// them, quoted, under their login and where they came from. The feedback
// travels with the document it concerns. Comments with no words add nothing;
// with none left, doc is returned as it is.
func AppendFeedback(doc []byte, node string, outcome Outcome, at time.Time, comments []Comment) []byte {
	var b strings.Builder
	for _, c := range comments {
		text := strings.TrimSpace(RelayedText(c.Body))
		if text == "" {
			continue
		}
		if r := []rune(text); len(r) > maxFeedbackChars {
			text = string(r[:maxFeedbackChars]) + "…"
		}
		b.WriteString("- @" + strings.TrimPrefix(c.Author, "@"))
		if p := c.Provenance; p.Channel != "" || p.RecordURL != "" {
			var where []string
			if p.Channel != "" {
				where = append(where, "via "+p.Channel)
			}
			if p.RecordURL != "" {
				where = append(where, p.RecordURL)
			}
			b.WriteString(" (" + strings.Join(where, ", ") + ")")
		}
		b.WriteString(":\n")
		for _, line := range strings.Split(text, "\n") {
			b.WriteString("  > " + strings.TrimRight(line, " \t\r") + "\n")
		}
	}
	if b.Len() == 0 {
		return doc
	}
	out := strings.TrimRight(string(doc), "\n") + "\n\n## Feedback at " + node + " (" + string(outcome)
	if !at.IsZero() {
		out += ", " + at.UTC().Format(time.RFC3339)
	}
	return []byte(out + ")\n\n" + b.String())
}
