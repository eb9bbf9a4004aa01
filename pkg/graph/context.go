package graph

import (
	"regexp"
	"strings"
)

// ContextFooter ends every graph context block.
const ContextFooter = "(this block is the-loop's own state, not part of the event payload)"

// ContextOptions adds what only the dispatcher knows to a context block.
type ContextOptions struct {
	// Verdict is set when a human gate classified this event before it was
	// delivered (consult-first); the block then says so.
	Verdict Outcome
}

// Context renders the graph context block of an agent prompt
// (docs/requirements.md K11) for s on g, or "" when there is nothing to say (no
// state, no current node, or a state that does not belong to g). Every line
// is derived from the-loop's own state, never from event payload text.
func Context(s *State, g *Graph) string { return ContextWith(s, g, ContextOptions{}) }

// ContextWith is Context with the dispatcher's options.
func ContextWith(s *State, g *Graph, o ContextOptions) string {
	if s == nil || s.Current == "" {
		return ""
	}
	n, err := s.node(g)
	if err != nil {
		return ""
	}
	var b strings.Builder
	line := func(parts ...string) {
		b.WriteString(strings.Join(parts, ""))
		b.WriteByte('\n')
	}
	phase := n.Phase
	if phase == "" {
		phase = n.Name
	}
	line("the-loop process state for ", Scope(s.Ref), " (graph ", g.Name, "):")
	line("  node: ", n.Name, " (phase: ", phase, ") — status: ", string(s.Status))
	if s.Reason != "" {
		line("  reason: ", s.Reason)
	}
	art := strings.ReplaceAll(n.Artifact, "|", " or ")
	switch {
	case n.Terminal && n.End == EndEscalated:
		line("  gate: escalated to a human — do not continue the work; wait for a person on the work item")
	case n.Terminal:
		line("  the work item is complete; this graph has nothing left to do")
	case n.IsGate():
		line("  gate: HUMAN gate (", string(n.Gate), ") — only an authorized person's comment on the work item decides it; do not advance it yourself")
		line("  gate: ", gateAsk(n.Gate))
		if art != "" {
			line("  gate: under review: ", art)
		}
	default:
		if art != "" {
			line("  artifact: ", art, " — iterate on it through review, not by re-pasting it into comments")
		}
		if n.Instructions != "" {
			line("  instructions: ", strings.Join(strings.Fields(n.Instructions), " "))
		}
		for _, h := range n.Exit {
			line("  checked before done is accepted: ", h.Summary())
		}
		line("  when this node's work is done, run: the-loop graph complete ", s.Ref)
		if _, ok := n.On[OutcomeEscalate]; ok && (n.Instructions != "" || len(n.Exit) > 0) {
			line("  if it cannot be done without a person, run: the-loop graph escalate --reason TEXT")
		}
	}
	if o.Verdict != "" {
		line("  this event was classified by the gate first: ", string(o.Verdict))
	}
	b.WriteString(ContextFooter)
	b.WriteByte('\n')
	return b.String()
}

// Summary says in one line what an exit hook checks or does.
func (h Hook) Summary() string {
	switch h.Name {
	case HookValidateArtifacts:
		var parts []string
		if h.Schema != "" {
			if sc, ok := Schema(h.Schema); ok {
				for _, k := range sc.FrontMatter {
					parts = append(parts, "front matter "+k)
				}
				parts = append(parts, sc.Sections...)
			}
		}
		parts = append(parts, h.Sections...)
		if h.Locked {
			parts = append(parts, "status: approved")
		}
		if h.Checkmarks {
			parts = append(parts, "every checkbox ticked")
		}
		what := strings.ReplaceAll(h.Artifact, "|", " or ")
		if h.OnlyWhenSkipped != "" {
			what += " (only when " + h.OnlyWhenSkipped + " was skipped)"
		}
		if len(parts) == 0 {
			return what + " is written"
		}
		return what + " has " + strings.Join(parts, "; ")
	case HookVerifyTests:
		if len(h.Command) > 0 {
			return "the tests pass (" + strings.Join(h.Command, " ") + ")"
		}
		return "the repository's test command passes"
	case HookRecordFeedback:
		return "the deciding comments are recorded in " + strings.ReplaceAll(h.Artifact, "|", " or ")
	}
	return string(h.Name)
}

func gateAsk(c Classifier) string {
	switch c {
	case Feedback:
		return "waiting for approved, approved-with-comments or changes-requested"
	case Reply:
		return "waiting for the person to say they are done, or to ask for more"
	case Execute:
		return "waiting for the phase selection and the execute keyword"
	}
	return "waiting"
}

var githubRef = regexp.MustCompile(`^github:[^/\s]+/[^#\s]+#([0-9]+)$`)

// Scope is how a context block names the work item: the spec id "issue-N"
// for a GitHub ref "github:owner/repo#N", the ref itself otherwise.
func Scope(ref string) string {
	if m := githubRef.FindStringSubmatch(ref); m != nil {
		return "issue-" + m[1]
	}
	return ref
}
