package repoinfo

import (
	"bytes"
	"iter"
	"strings"

	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// leaders are what may open a comment or docstring line, longest first
// where one begins another. "*" is the leader of a block comment's inner
// lines; stripping it again and again also takes "/**".
var leaders = []string{"///", "//!", "//", "/*", "#", "*", `"""`, `'''`, "--"}

// trailers are what may close a comment or docstring at a line's end.
var trailers = []string{"*/", `"""`, `'''`}

// stripLine is line without its comment leaders, closing marks and
// surrounding blank space: what a Gherkin keyword is looked for in.
func stripLine(line string) string {
	s := strings.TrimSpace(line)
	for range 4 { // "// #", " * //": a few leaders deep at most
		t := s
		for _, l := range leaders {
			if strings.HasPrefix(t, l) {
				t = strings.TrimSpace(t[len(l):])
				break
			}
		}
		if t == s {
			break
		}
		s = t
	}
	for _, t := range trailers {
		s = strings.TrimSpace(strings.TrimSuffix(s, t))
	}
	return s
}

// keyword is s's text after prefix, and whether s starts with it.
func keyword(s, prefix string) (string, bool) {
	rest, ok := strings.CutPrefix(s, prefix)
	return strings.TrimSpace(rest), ok
}

// isStep: s is a Given/When/Then/And/But step.
func isStep(s string) bool {
	for _, k := range []string{"Given", "When", "Then", "And", "But"} {
		if rest, ok := strings.CutPrefix(s, k); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
			return true
		}
	}
	return false
}

// neutral: s may sit inside a scenario's block without ending it: a blank
// line, an Examples table and its rows, a tag, a doc string fence.
func neutral(s string) bool {
	if s == "" {
		return true
	}
	switch s[0] {
	case '|', '@':
		return true
	}
	return strings.HasPrefix(s, "Examples:") || strings.HasPrefix(s, "Scenarios:") || strings.HasPrefix(s, "```")
}

// clean makes s fit for an answer: valid UTF-8, at most MaxLineBytes.
func clean(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > MaxLineBytes {
		s = cutUTF8(s, MaxLineBytes-len("…")) + "…"
	}
	return s
}

// parse yields the scenarios declared in text, the content of the file
// named file, whatever its language. A line is read once its comment
// leaders are gone (stripLine), and is:
//
//   - "Feature: <name>": the feature of the scenarios that follow in the
//     file, until the next Feature line;
//   - "Scenario: <name>" or "Scenario Outline: <name>": a scenario, at
//     that line, carrying the current feature;
//   - a step, "Given|When|Then|And|But <text>": the open scenario's;
//   - "Requirement: <ref>": the open scenario's requirement; right after a
//     Feature line (before its first scenario), the default requirement of
//     the feature's scenarios; otherwise that of the scenario that starts
//     next in the same block. Several are joined with ", ";
//   - "Background:" or "Rule:": closes the open scenario;
//   - blank, a table row, a tag, "Examples:", a fence: nothing;
//   - anything else (code, prose) ends the block: the open scenario is
//     closed, and later steps are nobody's.
//
// So a scenario's steps and requirement are the lines right under it, as
// in the repository's own tests; a step in a comment further down, among
// the code, is not taken for one of its steps.
func parse(file string, text []byte) iter.Seq[sessionapi.Scenario] {
	return func(yield func(sessionapi.Scenario) bool) {
		var (
			feature    string
			featureReq []string // requirements right under the Feature line
			afterFeat  bool     // still in the Feature line's block
			pending    []string // requirements waiting for the next scenario
			cur        *sessionapi.Scenario
			curReq     []string
		)
		flush := func() bool {
			if cur == nil {
				return true
			}
			s := *cur
			cur = nil
			reqs := curReq
			if len(reqs) == 0 {
				reqs = featureReq
			}
			s.Requirement = clean(strings.Join(reqs, ", "))
			return yield(s)
		}
		lineNo := 0
		for len(text) > 0 {
			lineNo++
			var raw []byte
			if i := bytes.IndexByte(text, '\n'); i >= 0 {
				raw, text = text[:i], text[i+1:]
			} else {
				raw, text = text, nil
			}
			s := stripLine(string(raw))
			if v, ok := keyword(s, "Feature:"); ok {
				if !flush() {
					return
				}
				feature, featureReq, pending, afterFeat = clean(v), nil, nil, true
				continue
			}
			name, ok := keyword(s, "Scenario Outline:")
			if !ok {
				name, ok = keyword(s, "Scenario:")
			}
			if ok {
				if !flush() {
					return
				}
				cur = &sessionapi.Scenario{Feature: feature, Scenario: clean(name), File: file, Line: lineNo}
				curReq, pending, afterFeat = pending, nil, false
				continue
			}
			if v, ok := keyword(s, "Requirement:"); ok {
				if v == "" {
					continue
				}
				switch {
				case cur != nil:
					curReq = append(curReq, v)
				case afterFeat:
					featureReq = append(featureReq, v)
				default:
					pending = append(pending, v)
				}
				continue
			}
			if isStep(s) {
				if cur != nil {
					cur.Steps = append(cur.Steps, clean(s))
				}
				continue
			}
			if strings.HasPrefix(s, "Background:") || strings.HasPrefix(s, "Rule:") {
				if !flush() {
					return
				}
				pending = nil
				continue
			}
			if neutral(s) {
				continue
			}
			if !flush() {
				return
			}
			pending, afterFeat = nil, false
		}
		flush()
	}
}
