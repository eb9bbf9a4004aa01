package graph

import (
	"strings"
	"testing"
)

func TestContext(t *testing.T) {
	t.Parallel()
	wi := builtin(t, WorkItemGraph)
	adhoc := builtin(t, AdhocGraph)
	waiting := at(t, wi, "design-approval")
	waiting.Reason = ReasonNotDecisive
	tests := []struct {
		name string
		s    *State
		g    *Graph
		opts ContextOptions
	}{
		{"phase-selection", at(t, wi, "phase-selection"), wi, ContextOptions{}},
		{"requirements", at(t, wi, "requirements"), wi, ContextOptions{}},
		{"design-approval-waiting", waiting, wi, ContextOptions{}},
		{"review-classified-first", at(t, wi, "review"), wi, ContextOptions{Verdict: OutcomeChangesRequested}},
		{"implementation", at(t, wi, "implementation"), wi, ContextOptions{}},
		{"complete", at(t, wi, "complete"), wi, ContextOptions{}},
		{"escalated", at(t, wi, "escalated"), wi, ContextOptions{}},
		{"adhoc-review", at(t, adhoc, "review"), adhoc, ContextOptions{}},
		{"adhoc-work-non-github", func() *State { s := at(t, adhoc, "work"); s.Ref = "standing:triage"; return s }(), adhoc, ContextOptions{}},
	}
	var all strings.Builder
	for _, tt := range tests {
		got := ContextWith(tt.s, tt.g, tt.opts)
		if !strings.HasSuffix(got, ContextFooter+"\n") {
			t.Errorf("%s: no footer:\n%s", tt.name, got)
		}
		all.WriteString("== " + tt.name + "\n" + got)
	}
	golden(t, "context.golden", all.String())
}

func TestContextEmpty(t *testing.T) {
	t.Parallel()
	wi := builtin(t, WorkItemGraph)
	for name, got := range map[string]string{
		"nil state":   Context(nil, wi),
		"no node":     Context(&State{Graph: WorkItemGraph}, wi),
		"other graph": Context(at(t, wi, "review"), builtin(t, AdhocGraph)),
		"gone node":   Context(&State{Graph: WorkItemGraph, Current: "gone"}, wi),
		"nil graph":   Context(at(t, wi, "review"), nil),
	} {
		if got != "" {
			t.Errorf("%s: %q", name, got)
		}
	}
}

func TestScope(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"github:octo/repo#15":  "issue-15",
		"github:octo/repo#x":   "github:octo/repo#x",
		"standing:triage":      "standing:triage",
		"github:octo/repo#15 ": "github:octo/repo#15 ",
	} {
		if got := Scope(in); got != want {
			t.Errorf("Scope(%q) = %q, want %q", in, got, want)
		}
	}
}
