package graph

import (
	"regexp"
	"slices"
	"strings"
)

// Phase selection (docs/decisions/114-phase-selection-checklist.md): at a
// graph's execute gate a person answers a checklist of the phases a person
// may choose, ticking what this work item needs, and says the execute
// keyword. The answer yields the set of nodes to skip, a fact frozen into
// the state when the gate passes; it never names a destination. Phases are
// opt-out (ticked by default: unticking one skips it) unless the graph marks
// them opt-in (unticked by default: they run only when ticked). A token that
// names no skippable node or skip set is reported and changes nothing.

// checkLine is one row of a checklist: "- [x] design" or "* [ ] `design`".
var checkLine = regexp.MustCompile("(?m)^\\s*[-*]\\s*\\[([ xX])\\]\\s*`?([A-Za-z0-9][A-Za-z0-9._-]*)`?")

// Selection is a phase selection read from a person's answer.
type Selection struct {
	// Skips are the nodes to skip, in graph order.
	Skips []string
	// Ignored are the tokens that name nothing a person may choose, each
	// with why, for the confirmation and the log.
	Ignored []string
}

// Selectable reports whether g offers a phase selection: it has a node a
// person may skip or opt into.
func (g *Graph) Selectable() bool {
	for _, n := range g.Nodes {
		if n.Skippable {
			return true
		}
	}
	return false
}

// SelectPhases reads the checklist in text (a person's answer at g's execute
// gate; RelayedText is applied first) and returns what to skip. With no
// checklist rows, every opt-in node is skipped and nothing else.
func SelectPhases(g *Graph, text string) Selection {
	var sel Selection
	skip := map[string]bool{}
	for _, n := range g.Nodes {
		if n.OptIn {
			skip[n.Name] = true
		}
	}
	for _, m := range checkLine.FindAllStringSubmatch(RelayedText(text), -1) {
		ticked, token := m[1] != " ", m[2]
		if members, ok := g.SkipSets[token]; ok {
			for _, name := range members {
				skip[name] = !ticked
			}
			continue
		}
		n := g.Node(token)
		switch {
		case n == nil:
			sel.Ignored = append(sel.Ignored, token+": no such phase")
		case !n.Skippable && !ticked:
			sel.Ignored = append(sel.Ignored, token+": not one a person may skip")
		case n.Skippable:
			skip[n.Name] = !ticked
		}
	}
	for _, n := range g.Nodes {
		if skip[n.Name] {
			sel.Skips = append(sel.Skips, n.Name)
		}
	}
	return sel
}

// Checklist is the checklist a person answers at g's execute gate: the
// opt-out phases ticked, then the opt-in ones unticked, each with its
// description; "" when g has nothing to choose.
func (g *Graph) Checklist() string {
	if !g.Selectable() {
		return ""
	}
	var out, in []string
	for _, n := range g.Nodes {
		if !n.Skippable {
			continue
		}
		row := "- [x] " + n.Name
		if n.OptIn {
			row = "- [ ] " + n.Name
		}
		if n.Description != "" {
			row += " — " + n.Description
		}
		if n.OptIn {
			in = append(in, row)
		} else {
			out = append(out, row)
		}
	}
	var b strings.Builder
	b.WriteString("Phases this work item walks (untick what it does not need):\n")
	b.WriteString(strings.Join(out, "\n"))
	if len(in) > 0 {
		b.WriteString("\nOptional phases (tick to add):\n")
		b.WriteString(strings.Join(in, "\n"))
	}
	if len(g.SkipSets) > 0 {
		names := make([]string, 0, len(g.SkipSets))
		for name := range g.SkipSets {
			names = append(names, name)
		}
		slices.Sort(names)
		b.WriteString("\nA row may also name a group: " + strings.Join(names, ", ") + ".")
	}
	b.WriteString("\nReply with the checklist and the execute keyword.")
	return b.String()
}
