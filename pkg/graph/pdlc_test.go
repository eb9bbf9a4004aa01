package graph

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/pkg/catalog"
)

func nodeNames(g *Graph) []string {
	var out []string
	for _, n := range g.Nodes {
		out = append(out, n.Name)
	}
	return out
}

// The original's four graphs ship with their nodes, in the original's order;
// security-sign-off is the human gate of ours after the agent's security
// review.
func TestOriginalGraphsShip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		start string
		nodes []string
	}{
		{PDLCWorkItemGraph, "phase-selection", []string{
			"phase-selection", "brainstorming", "requirements-definition", "requirements-approval", "design",
			"design-critic-review", "test-planning", "design-approval", "tasks-breakdown", "implementation",
			"verification", "self-review", "critic-review", "security-review", "security-sign-off", "evidence",
			"capability-docs", "reviewer-briefing", "human-approval", "complete", "escalated",
		}},
		{PDLCPRGraph, "implementation", []string{
			"implementation", "verification", "self-review", "critic-review", "security-review",
			"security-sign-off", "reviewer-briefing", "pr-approval", "complete", "escalated",
		}},
		{PDLCContributionGraph, "goal-definition", []string{
			"goal-definition", "phase-selection", "context-intake", "scoped-plan", "plan-approval",
			"implementation", "verification", "self-review", "critic-review", "security-review",
			"security-sign-off", "reviewer-briefing", "human-approval", "complete", "escalated",
		}},
		{PDLCAdhocGraph, "work", []string{"work", "review", "complete", "escalated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := builtin(t, tt.name)
			if diff := cmp.Diff(tt.nodes, nodeNames(g)); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			if g.Start != tt.start {
				t.Errorf("start = %s, want %s", g.Start, tt.start)
			}
			for _, n := range g.Nodes {
				if _, ok := n.On[OutcomeEscalate]; !n.Terminal && !ok {
					t.Errorf("%s has no escalate edge", n.Name)
				}
			}
		})
	}
}

// Every phase of the work-item loop but the selection is the person's to
// skip; design-critic-review is opt-in; the security review raises its
// sign-off; the agent steps carry the original's checks.
func TestWorkItemLoopMarkers(t *testing.T) {
	t.Parallel()
	g := builtin(t, PDLCWorkItemGraph)
	for _, n := range g.Nodes {
		want := !n.Terminal && n.Name != "phase-selection"
		if n.Skippable != want {
			t.Errorf("%s: skippable = %v, want %v", n.Name, n.Skippable, want)
		}
		if n.OptIn != (n.Name == "design-critic-review") {
			t.Errorf("%s: opt-in = %v", n.Name, n.OptIn)
		}
	}
	if n := g.Node("security-review"); g.Node(n.On[OutcomeDone]).Notify != catalog.SecuritySignOffPending {
		t.Errorf("security-review leads to %s, which does not raise %s", n.On[OutcomeDone], catalog.SecuritySignOffPending)
	}
	if g.Node("phase-selection").Notify != catalog.DecisionPending || g.Node("human-approval").Notify != catalog.PRReviewPending {
		t.Error("entry notify hooks did not set the nodes' notifications")
	}
	req := g.Node("requirements-definition").ExitHooks(HookValidateArtifacts)
	if len(req) != 1 || req[0].Schema != "requirements" || !req[0].Locked || req[0].Artifact != "requirements.md|bugfix.md" {
		t.Errorf("requirements-definition's validate-artifacts = %+v", req)
	}
	if len(g.Node("implementation").ExitHooks(HookVerifyTests)) != 1 || len(g.Node("verification").ExitHooks(HookVerifyTests)) != 1 {
		t.Error("implementation and verification must run verify-tests")
	}
	if fb := g.Node("design-approval").Exit; len(fb) != 2 || fb[0].Artifact != "design.md" || fb[1].Artifact != "testing-plan.md" {
		t.Errorf("design-approval's record-feedback = %+v", fb)
	}
	for _, name := range []string{"critic-review", "design-critic-review"} {
		if !strings.Contains(g.Node(name).Instructions, "the-loop critic run") {
			t.Errorf("%s does not tell the agent to run a critic round", name)
		}
	}
	c, _ := Builtin(PDLCContributionGraph)
	if c.Node("plan-approval").Publish != "contribution.md" || c.Node("human-approval").Publish != "contribution.md" {
		t.Error("publish-artifact did not set what the contribution gates publish")
	}
}

func TestHookAndSkipValidation(t *testing.T) {
	t.Parallel()
	const head = "name: x\nstart: a\n"
	const tail = "  complete: {actor: agent, terminal: true}\n  escalated: {actor: human, terminal: true}\n"
	tests := []struct{ name, nodes, want string }{
		{"unknown hook", "  a: {actor: agent, on: {done: complete}, exit: [run-my-script]}\n", `hook "run-my-script" is not one the-loop runs`},
		{"exit hook on entry", "  a: {actor: agent, on: {done: complete}, entry: [verify-tests]}\n", "hook verify-tests belongs in exit"},
		{"record-feedback on an agent", "  a: {actor: agent, artifact: x.md, on: {done: complete}, exit: [record-feedback]}\n", "no feedback gate"},
		{"validate on a gate", "  a: {actor: human, gate: feedback, artifact: x.md, on: {approved: complete, approved-with-comments: complete, changes-requested: a}, exit: [validate-artifacts]}\n", "no agent node"},
		{"unknown parameter", "  a: {actor: agent, artifact: x.md, on: {done: complete}, exit: [{hook: validate-artifacts, with: {shell: rm}}]}\n", `unknown parameter "shell"`},
		{"unknown schema", "  a: {actor: agent, artifact: x.md, on: {done: complete}, exit: [{hook: validate-artifacts, with: {schema: nope}}]}\n", `schema "nope" is not one the-loop ships`},
		{"nothing to validate", "  a: {actor: agent, on: {done: complete}, exit: [validate-artifacts]}\n", "no artifact to validate"},
		{"escaping artifact", "  a: {actor: agent, on: {done: complete}, exit: [{hook: validate-artifacts, with: {validates: ../../etc/passwd}}]}\n", "inside the work item's spec directory"},
		{"bad checkmarks", "  a: {actor: agent, artifact: x.md, on: {done: complete}, exit: [{hook: validate-artifacts, with: {checkmarks: some}}]}\n", "checkmarks is complete or absent"},
		{"huge timeout", "  a: {actor: agent, on: {done: complete}, exit: [{hook: verify-tests, with: {timeoutSeconds: 99999}}]}\n", "timeoutSeconds"},
		{"two notifications", "  a: {actor: agent, notify: decision-pending, on: {done: complete}, entry: [{hook: notify, with: {event: pr-review-pending}}]}\n", "a node raises one notification"},
		{"skippable selection", "  a: {actor: human, gate: execute, skippable: true, on: {execute: complete}}\n", "nothing may route around the act of choosing"},
		{"skippable terminal", "  a: {actor: agent, on: {done: complete}}\n  complete: {actor: agent, terminal: true, skippable: true}\n", "terminal node cannot be skippable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			doc := head + "nodes:\n" + tt.nodes
			if !strings.Contains(tt.nodes, "  complete:") {
				doc += tail
			}
			_, err := Load([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Load = %v, want an error with %q", err, tt.want)
			}
		})
	}
	sets := "name: x\nstart: a\nskip-sets:\n  %s\nnodes:\n  a: {actor: agent, skippable: true, on: {done: b}}\n  b: {actor: agent, opt-in: true, on: {done: complete}}\n  c: {actor: agent, on: {done: complete}}\n  complete: {actor: agent, terminal: true}\n"
	for set, want := range map[string]string{
		"g: [b]": "which is opt-in", "g: [c]": "which is not skippable", "g: [zz]": `unknown node "zz"`, "a: [a]": "also a node's name",
	} {
		doc := strings.Replace(sets, "%s", set, 1)
		doc = strings.Replace(doc, "c: {actor: agent, on: {done: complete}}", "c: {actor: agent, on: {done: complete}}", 1)
		if _, err := Load([]byte(doc)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("skip-sets %s: %v, want %q", set, err, want)
		}
	}
}

func TestSelectPhases(t *testing.T) {
	t.Parallel()
	g := builtin(t, PDLCWorkItemGraph)
	tests := []struct {
		name, text string
		skips      []string
		ignored    int
	}{
		{"no checklist: opt-in off", "the-loop execute", []string{"design-critic-review"}, 0},
		{"untick one", "- [ ] brainstorming\n- [x] design\nthe-loop execute", []string{"brainstorming", "design-critic-review"}, 0},
		{"tick the opt-in", "- [x] design-critic-review\n* [ ] `evidence`", []string{"evidence"}, 0},
		{"a whole set", "- [ ] spec-chain", []string{"brainstorming", "requirements-definition", "requirements-approval", "design", "design-critic-review", "test-planning", "design-approval", "tasks-breakdown"}, 0},
		{"the selection itself cannot go", "- [ ] phase-selection\n- [ ] nonsense", []string{"design-critic-review"}, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			sel := SelectPhases(g, tt.text)
			if diff := cmp.Diff(tt.skips, sel.Skips); diff != "" {
				t.Errorf("skips (-want +got):\n%s", diff)
			}
			if len(sel.Ignored) != tt.ignored {
				t.Errorf("ignored = %v", sel.Ignored)
			}
		})
	}
}

// The person who says the keyword signs the checklist in their comment: the
// skips are frozen into the state and walked over, and the phase-selection
// ping carries the checklist to answer.
func TestExecuteFreezesTheSelection(t *testing.T) {
	t.Parallel()
	g := builtin(t, PDLCWorkItemGraph)
	s, notes, err := New(g, ref, t0)
	if err != nil {
		t.Fatal(err)
	}
	if len(notes) != 1 || !strings.Contains(notes[0].Text, "- [x] brainstorming") || !strings.Contains(notes[0].Text, "- [ ] design-critic-review") {
		t.Fatalf("the phase-selection ping has no checklist: %+v", notes)
	}
	tr, err := s.Apply(g, GateInput{
		Comments:   []Comment{{Author: "alice", Body: "- [ ] spec-chain\n- [ ] bogus\n\nthe-loop execute"}},
		Authorized: everyone, ExecuteKeyword: "the-loop execute", At: t0,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tr.To != "implementation" || s.Current != "implementation" {
		t.Fatalf("moved to %s, want implementation", tr.To)
	}
	if len(tr.Ignored) != 1 {
		t.Errorf("ignored = %v", tr.Ignored)
	}
	var skipped []string
	for _, h := range s.History {
		if h.Skipped {
			skipped = append(skipped, h.Node)
		}
	}
	if !slices.Contains(skipped, "design-critic-review") || !slices.Contains(skipped, "tasks-breakdown") || len(skipped) != 8 {
		t.Errorf("skipped = %v", skipped)
	}
	// The 5-step graph offers no selection: its ping has no checklist.
	_, notes, _ = New(builtin(t, WorkItemGraph), ref, t0)
	if strings.Contains(notes[0].Text, "- [x]") {
		t.Errorf("work-item's ping carries a checklist: %s", notes[0].Text)
	}
}

func TestCheckArtifact(t *testing.T) {
	t.Parallel()
	g := builtin(t, PDLCWorkItemGraph)
	reqHook := g.Node("requirements-definition").ExitHooks(HookValidateArtifacts)[0]
	good := "---\nstatus: approved\n---\n# Requirements\n\nIt SHALL work.\n\n## Security considerations\n\nNone beyond the usual.\n"
	if f := reqHook.CheckArtifact("requirements.md", []byte(good)); len(f) != 0 {
		t.Errorf("a good artifact: %v", f)
	}
	tests := []struct{ name, doc, want string }{
		{"no front matter", "# Requirements\nx\n## Security considerations\ny\n", "front matter has no status"},
		{"not locked", "---\nstatus: draft\n---\n# Requirements\nx\n## Security considerations\ny\n", "status: draft"},
		{"missing section", "---\nstatus: approved\n---\n# Requirements\nx\n", `"Security considerations" is missing`},
		{"empty section", "---\nstatus: approved\n---\n# Requirements\n\n# Security considerations\ny\n", `"Requirements" is empty`},
		{"a heading in code is none", "---\nstatus: approved\n---\n# Requirements\nx\n```\n## Security considerations\n```\n", `"Security considerations" is missing`},
		{"unclosed front matter", "---\nstatus: approved\n# Requirements\n", "not closed"},
	}
	for _, tt := range tests {
		if f := reqHook.CheckArtifact("requirements.md", []byte(tt.doc)); !strings.Contains(strings.Join(f, "\n"), tt.want) {
			t.Errorf("%s: findings %v, want %q", tt.name, f, tt.want)
		}
	}
	impl := g.Node("implementation").ExitHooks(HookValidateArtifacts)[0]
	if f := impl.CheckArtifact("tasks.md", []byte("# Task list\n- [x] one\n- [ ] two\n")); len(f) != 1 || !strings.Contains(f[0], "1 checkbox") {
		t.Errorf("an unticked task: %v", f)
	}
}

func TestContextTellsTheChecks(t *testing.T) {
	t.Parallel()
	g := builtin(t, PDLCWorkItemGraph)
	s := at(t, g, "critic-review")
	c := Context(s, g)
	for _, want := range []string{"the-loop critic run", "execution-log.md has front matter status; Review cycles", "the-loop graph escalate"} {
		if !strings.Contains(c, want) {
			t.Errorf("context lacks %q:\n%s", want, c)
		}
	}
}

func TestAppendFeedback(t *testing.T) {
	t.Parallel()
	doc := []byte("---\nstatus: approved\n---\n# Design\n\nA cache.\n")
	out := string(AppendFeedback(doc, "design-approval", OutcomeChangesRequested, t0, []Comment{
		{Author: "alice", Body: "Please use a bounded cache.\nAnd measure it.", Provenance: Provenance{Channel: "slack", RecordURL: "https://x/1"}},
		{Author: "bob", Body: "<!-- only an envelope -->"},
	}))
	for _, want := range []string{"# Design\n\nA cache.\n\n## Feedback at design-approval (changes-requested, 2026-05-04T09:30:00Z)",
		"- @alice (via slack, https://x/1):\n  > Please use a bounded cache.\n  > And measure it.\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("feedback lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "@bob") {
		t.Errorf("a comment without words was recorded:\n%s", out)
	}
	if got := AppendFeedback(doc, "x", OutcomeApproved, t0, nil); string(got) != string(doc) {
		t.Error("no comments changed the document")
	}
}

// Each of the original's loops reaches complete from its start when every
// agent says done and every person approves, raising each gate's
// notification on the way and work-item-complete at the end.
func TestOriginalLoopsWalkToComplete(t *testing.T) {
	t.Parallel()
	for _, name := range []string{PDLCWorkItemGraph, PDLCPRGraph, PDLCContributionGraph, PDLCAdhocGraph} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			g := builtin(t, name)
			s, notes, err := New(g, ref, t0)
			if err != nil {
				t.Fatal(err)
			}
			raised := types(notes)
			for steps := 0; !s.Terminal(); steps++ {
				if steps > 2*len(g.Nodes) {
					t.Fatalf("no end after %d steps: at %s", steps, s.Current)
				}
				n := g.Node(s.Current)
				var tr Transition
				if n.IsGate() {
					body := map[Classifier]string{Feedback: "LGTM", Reply: "done", Execute: "- [x] design-critic-review\nthe-loop execute"}[n.Gate]
					tr, err = s.Apply(g, GateInput{Comments: []Comment{{Author: "alice", Body: body}}, Authorized: everyone,
						ExecuteKeyword: "the-loop execute", At: t0})
				} else {
					tr, err = s.Advance(g, OutcomeDone, t0)
				}
				if err != nil || !tr.Moved() {
					t.Fatalf("at %s: %v (moved %v)", n.Name, err, tr.Moved())
				}
				raised = append(raised, types(tr.Notifications)...)
			}
			if s.Current != NodeComplete || s.Status != StatusComplete {
				t.Fatalf("ended at %s (%s)", s.Current, s.Status)
			}
			for _, n := range g.Nodes {
				if n.IsGate() && !slices.Contains(raised, n.Notify) {
					t.Errorf("gate %s never raised %s", n.Name, n.Notify)
				}
			}
			if !slices.Contains(raised, catalog.WorkItemComplete) {
				t.Error("no work-item-complete")
			}
		})
	}
}
