package graph

import (
	"bytes"
	"embed"
	"fmt"
	"path"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// ArtifactSchema is what validate-artifacts requires of an artifact: front
// matter keys with a value, and sections (markdown headings) that are there
// and not empty. The schemas ship embedded (schemas/*.yaml); a graph names
// one by Name.
type ArtifactSchema struct {
	Name        string   `yaml:"name"`
	FrontMatter []string `yaml:"front-matter"`
	Sections    []string `yaml:"sections"`
}

//go:embed schemas/*.yaml
var schemaFS embed.FS

var schemas = loadSchemas()

func loadSchemas() map[string]ArtifactSchema {
	out := map[string]ArtifactSchema{}
	entries, err := schemaFS.ReadDir("schemas")
	if err != nil {
		panic(fmt.Sprintf("graph: embedded schemas: %v", err))
	}
	for _, e := range entries {
		data, err := schemaFS.ReadFile(path.Join("schemas", e.Name()))
		if err != nil {
			panic(fmt.Sprintf("graph: schema %s: %v", e.Name(), err))
		}
		var s ArtifactSchema
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&s); err != nil || s.Name+".yaml" != e.Name() {
			panic(fmt.Sprintf("graph: schema %s does not load or is misnamed (%v)", e.Name(), err))
		}
		out[s.Name] = s
	}
	return out
}

// Schema returns the embedded artifact schema called name.
func Schema(name string) (ArtifactSchema, bool) {
	s, ok := schemas[name]
	return s, ok
}

// SchemaNames lists the embedded schemas, sorted.
func SchemaNames() []string {
	out := make([]string, 0, len(schemas))
	for n := range schemas {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// CheckArtifact returns what keeps doc, the artifact called name, from
// passing validate-artifacts hook h: each finding one sentence the session
// can act on; none when it passes. doc is the agent's own file, so it is read
// as data only, and a front matter that does not parse is a finding, not an
// error.
func (h Hook) CheckArtifact(name string, doc []byte) []string {
	var findings []string
	bad := func(format string, a ...any) { findings = append(findings, name+": "+fmt.Sprintf(format, a...)) }
	front, body, err := splitFrontMatter(doc)
	if err != nil {
		bad("its front matter is not YAML: %v", err)
	}
	var s ArtifactSchema
	if h.Schema != "" {
		s, _ = Schema(h.Schema)
	}
	for _, k := range s.FrontMatter {
		if v, ok := front[k]; !ok || v == nil || fmt.Sprint(v) == "" {
			bad("the front matter has no %s (schema %s)", k, s.Name)
		}
	}
	if h.Locked {
		if st := strings.TrimSpace(fmt.Sprint(front["status"])); st != "approved" {
			// The agent's own words: one short line of them.
			st = strings.Join(strings.Fields(st), " ")
			if r := []rune(st); len(r) > 40 {
				st = string(r[:40]) + "…"
			}
			if front["status"] == nil {
				st = "(unset)"
			}
			bad("it is not locked: its front matter says status: %s, and this step needs status: approved", st)
		}
	}
	secs := markdownSections(body)
	for _, want := range append(slices.Clone(s.Sections), h.Sections...) {
		text, ok := secs[strings.ToLower(want)]
		switch {
		case !ok:
			bad("the section %q is missing", want)
		case strings.TrimSpace(text) == "":
			bad("the section %q is empty", want)
		}
	}
	if h.Checkmarks {
		if n := strings.Count(body, "- [ ]"); n > 0 {
			bad("%d checkbox(es) are still unticked (- [ ])", n)
		}
	}
	return findings
}

// splitFrontMatter returns doc's YAML front matter as a map (nil when there
// is none) and the body after it.
func splitFrontMatter(doc []byte) (map[string]any, string, error) {
	text := strings.ReplaceAll(string(doc), "\r\n", "\n")
	rest, ok := strings.CutPrefix(text, "---\n")
	if !ok {
		return nil, text, nil
	}
	end := strings.Index(rest, "\n---")
	if end < 0 {
		return nil, text, fmt.Errorf("the front matter is not closed by a --- line")
	}
	fm, body := rest[:end], rest[end+len("\n---"):]
	if i := strings.IndexByte(body, '\n'); i >= 0 {
		body = body[i+1:]
	} else {
		body = ""
	}
	var m map[string]any
	if err := yaml.Unmarshal([]byte(fm), &m); err != nil {
		return nil, body, fmt.Errorf("%s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return m, body, nil
}

// markdownSections maps each heading's text (lower case) to the text under
// it up to the next heading of the same or a higher level. Headings inside
// fenced code blocks are not headings.
func markdownSections(body string) map[string]string {
	type open struct {
		name  string
		level int
		b     strings.Builder
	}
	out := map[string]string{}
	var stack []*open
	fenced := false
	for _, line := range strings.Split(body, "\n") {
		trim := strings.TrimSpace(line)
		if strings.HasPrefix(trim, "```") || strings.HasPrefix(trim, "~~~") {
			fenced = !fenced
		}
		level := 0
		for level < len(trim) && level < 7 && trim[level] == '#' {
			level++
		}
		if !fenced && level >= 1 && level <= 6 && (len(trim) == level || trim[level] == ' ') {
			name := strings.ToLower(strings.TrimSpace(strings.TrimRight(strings.TrimSpace(trim[level:]), "#")))
			for len(stack) > 0 && stack[len(stack)-1].level >= level {
				o := stack[len(stack)-1]
				if _, seen := out[o.name]; !seen {
					out[o.name] = o.b.String()
				}
				stack = stack[:len(stack)-1]
			}
			// A subsection's text is its parent's too.
			for _, o := range stack {
				o.b.WriteString(line + "\n")
			}
			stack = append(stack, &open{name: name, level: level})
			continue
		}
		for _, o := range stack {
			o.b.WriteString(line + "\n")
		}
	}
	for _, o := range stack {
		if _, seen := out[o.name]; !seen {
			out[o.name] = o.b.String()
		}
	}
	return out
}
