package graph

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/pkg/catalog"
)

func TestBuiltinsLoad(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		start string
		nodes []string
	}{
		{WorkItemGraph, "phase-selection", []string{
			"phase-selection", "requirements", "requirements-approval", "design", "design-approval",
			"implementation", "review", "complete", "escalated",
		}},
		{AdhocGraph, "work", []string{"work", "review", "complete", "escalated"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, ok := Builtin(tt.name)
			if !ok {
				t.Fatalf("no built-in %s", tt.name)
			}
			var names []string
			for _, n := range g.Nodes {
				names = append(names, n.Name)
			}
			if diff := cmp.Diff(tt.nodes, names); diff != "" {
				t.Errorf("nodes (-want +got):\n%s", diff)
			}
			if g.Start != tt.start {
				t.Errorf("start = %q, want %q", g.Start, tt.start)
			}
			if c := g.CustomNotifications(); len(c) != 0 {
				t.Errorf("built-in uses custom notifications %v", c)
			}
			// Every gate can escalate, and complete/escalated end as named.
			for _, n := range g.Nodes {
				if n.IsGate() && n.On[OutcomeEscalate] != NodeEscalated {
					t.Errorf("gate %s does not escalate to %s", n.Name, NodeEscalated)
				}
			}
			if g.Node(NodeComplete).End != EndComplete || g.Node(NodeEscalated).End != EndEscalated {
				t.Errorf("terminal ends wrong")
			}
		})
	}
	if _, ok := Builtin("nope"); ok {
		t.Error("Builtin(nope) found something")
	}
}

func TestBuiltinArtifacts(t *testing.T) {
	t.Parallel()
	g, _ := Builtin(WorkItemGraph)
	if diff := cmp.Diff([]string{"requirements.md", "bugfix.md"}, g.Node("requirements-approval").Artifacts()); diff != "" {
		t.Error(diff)
	}
	if got := g.Node("implementation").Artifacts(); got != nil {
		t.Errorf("implementation artifacts = %v", got)
	}
}

// valid is a small graph every error case below breaks in one way.
const valid = `name: mini
start: a
nodes:
  a:
    actor: agent
    phase: work
    on: {done: g}
  g:
    actor: human
    phase: review
    gate: reply
    notify: decision-pending
    on: {done: complete, more-work: a}
  complete:
    actor: agent
    terminal: true
`

func TestLoadValid(t *testing.T) {
	t.Parallel()
	g, err := Load([]byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if g.Node("complete").End != EndComplete {
		t.Errorf("complete end = %q", g.Node("complete").End)
	}
}

func TestLoadErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want []string // substrings of the error, all required
	}{
		{"empty", ``, []string{"empty document"}},
		{"not a mapping", `- a`, []string{"a graph is a YAML mapping"}},
		{"two documents", valid + "---\nname: x\n", []string{"exactly one YAML document"}},
		{"syntax", "name: [", []string{"invalid graph"}},
		{"unknown top-level key", valid + "colour: red\n", []string{`graph "mini": line 17: unknown key "colour"`}},
		{"unknown node key", strings.Replace(valid, "    phase: work\n", "    phase: work\n    timeout: 5m\n", 1),
			[]string{`node "a": line 7: unknown key "timeout"`}},
		{"duplicate node", valid + "  a:\n    actor: agent\n", []string{`"a" already defined`}},
		{"missing name", strings.Replace(valid, "name: mini\n", "", 1), []string{"graph: name is missing"}},
		{"bad name", strings.Replace(valid, "name: mini", "name: Mini Graph", 1), []string{"name must match"}},
		{"missing start", strings.Replace(valid, "start: a\n", "", 1), []string{`graph "mini": start is missing`}},
		{"start unknown node", strings.Replace(valid, "start: a", "start: zz", 1), []string{`start names unknown node "zz"`}},
		{"no nodes", "name: x\nstart: a\n", []string{"nodes is missing or empty"}},
		{"missing actor", strings.Replace(valid, "    actor: agent\n    phase: work\n", "    phase: work\n", 1),
			[]string{`node "a": actor is missing`}},
		{"bad actor", strings.Replace(valid, "    actor: agent\n    phase: work\n", "    actor: robot\n    phase: work\n", 1),
			[]string{`node "a": actor "robot" is neither agent nor human`}},
		{"edge to nowhere", strings.Replace(valid, "more-work: a", "more-work: b", 1),
			[]string{`node "g": on.more-work: edge to nowhere (no node "b")`}},
		{"edge to empty", strings.Replace(valid, "more-work: a", "more-work: ''", 1),
			[]string{`node "g": on.more-work: edge to nowhere (empty target)`}},
		{"unreachable node", valid + "  island:\n    actor: agent\n    on: {done: complete}\n",
			[]string{`node "island" is unreachable from start "a"`}},
		{"cannot reach terminal", strings.Replace(valid, "done: complete, more-work: a", "done: a, more-work: a", 1) +
			"  other:\n    actor: agent\n    on: {done: complete}\n",
			[]string{`node "a" can reach no terminal node`, `node "g" can reach no terminal node`}},
		{"human without classifier", strings.Replace(valid, "    gate: reply\n", "", 1),
			[]string{`node "g": human node has no gate classifier`}},
		{"unknown classifier", strings.Replace(valid, "gate: reply", "gate: vibes", 1),
			[]string{`node "g": gate "vibes" is not a classifier`}},
		{"classifier on agent", strings.Replace(valid, "    phase: work\n", "    phase: work\n    gate: feedback\n", 1),
			[]string{`node "a": gate "feedback" on an agent node`}},
		{"terminal with edges", strings.Replace(valid, "    terminal: true\n", "    terminal: true\n    on: {done: a}\n", 1),
			[]string{`node "complete": terminal node has edges (on: done)`}},
		{"terminal with classifier", strings.Replace(valid, "    actor: agent\n    terminal: true\n", "    actor: human\n    gate: reply\n    terminal: true\n", 1),
			[]string{`node "complete": terminal node has a gate classifier "reply"`}},
		{"terminal without end", strings.Replace(strings.Replace(valid, "complete", "finished", -1), "finished:", "finished:", 1),
			[]string{`node "finished": terminal node needs end: complete or end: escalated`}},
		{"bad end", strings.Replace(valid, "    terminal: true\n", "    terminal: true\n    end: maybe\n", 1),
			[]string{`end "maybe" is neither complete nor escalated`}},
		{"end contradicts name", strings.Replace(valid, "    terminal: true\n", "    terminal: true\n    end: escalated\n", 1),
			[]string{`node "complete": end "escalated" contradicts the node's name`}},
		{"end on non-terminal", strings.Replace(valid, "    phase: work\n", "    phase: work\n    end: complete\n", 1),
			[]string{`node "a": end is only for terminal nodes`}},
		{"complete not terminal", strings.Replace(valid, "    terminal: true\n", "    on: {done: a}\n", 1),
			[]string{`a node called "complete" must be terminal: true`}},
		{"start is terminal", strings.Replace(valid, "start: a", "start: complete", 1),
			[]string{`start node "complete" is terminal`}},
		{"agent without done", strings.Replace(valid, "on: {done: g}", "on: {escalate: g}", 1),
			[]string{`node "a": agent node has no edge for outcome done`}},
		{"agent node outcome", strings.Replace(valid, "on: {done: g}", "on: {done: g, approved: g}", 1),
			[]string{`node "a": on: outcome "approved" is not one a agent node can have (done, escalate)`}},
		{"gate outcome of another classifier", strings.Replace(valid, "more-work: a", "more-work: a, approved: a", 1),
			[]string{`node "g": on: outcome "approved" is not one a human reply node can have (done, more-work, escalate)`}},
		{"gate missing outcome", strings.Replace(valid, ", more-work: a", "", 1),
			[]string{`node "g": gate reply has no edge for outcome more-work`}},
		{"wait is not an edge", strings.Replace(valid, "more-work: a", "more-work: a, wait: a", 1),
			[]string{`node "g": on: wait is not an outcome`}},
		{"notify catalog type the graph does not raise", strings.Replace(valid, "notify: decision-pending", "notify: gate.feedback", 1),
			[]string{`node "g": notify "gate.feedback" is a catalog type the graph does not raise`}},
		{"notify bad name", strings.Replace(valid, "notify: decision-pending", "notify: 'Say Hi'", 1),
			[]string{`node "g": notify "Say Hi" must match`}},
		{"artifact empty alternative", strings.Replace(valid, "    phase: work\n", "    phase: work\n    artifact: a.md||b.md\n", 1),
			[]string{`node "a": artifact "a.md||b.md" has an empty or space-padded alternative`}},
		{"artifact escapes", strings.Replace(valid, "    phase: work\n", "    phase: work\n    artifact: ../secrets.md\n", 1),
			[]string{`node "a": artifact "../secrets.md" must be a relative path`}},
		{"bad node name", strings.Replace(valid, "  a:\n", "  A_1:\n", 1) + "", []string{`node "A_1": name must match`}},
		{"wrong type", strings.Replace(valid, "    terminal: true\n", "    terminal: sometimes\n", 1), []string{"cannot unmarshal"}},
		{"too big", strings.Repeat("#", MaxGraphBytes+1), []string{"over the"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, err := Load([]byte(tt.yaml))
			if err == nil {
				t.Fatalf("Load succeeded: %+v", g)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nlacks %q", err, w)
				}
			}
		})
	}
}

func TestLoadReportsEveryProblem(t *testing.T) {
	t.Parallel()
	y := strings.Replace(strings.Replace(valid, "more-work: a", "more-work: b", 1), "    gate: reply\n", "", 1)
	_, err := Load([]byte(y))
	if err == nil {
		t.Fatal("Load succeeded")
	}
	for _, w := range []string{"has no gate classifier", "edge to nowhere"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

func TestCustomNotifications(t *testing.T) {
	t.Parallel()
	y := strings.Replace(valid, "notify: decision-pending", "notify: team.qa-ready", 1)
	g, err := Load([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]catalog.Type{"team.qa-ready"}, g.CustomNotifications()); diff != "" {
		t.Error(diff)
	}
	s, notes, err := New(g, "github:o/r#1", t0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Advance(g, OutcomeDone, t0); err != nil {
		t.Fatal(err)
	}
	_ = notes
	if s.Current != "g" {
		t.Fatalf("current = %s", s.Current)
	}
}

func TestRegistry(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	builtins := []string{WorkItemGraph, AdhocGraph, PDLCWorkItemGraph, PDLCPRGraph, PDLCContributionGraph, PDLCAdhocGraph}
	if diff := cmp.Diff(builtins, r.Names()); diff != "" {
		t.Error(diff)
	}
	g, err := r.AddYAML("graphs/mini.yaml", []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := r.Get("mini"); !ok || got != g {
		t.Error("Get(mini) did not return the added graph")
	}
	if _, err := r.AddYAML("graphs/again.yaml", []byte(valid)); !errors.Is(err, ErrNameClash) || !strings.Contains(err.Error(), "graphs/again.yaml") {
		t.Errorf("second mini: %v", err)
	}
	wi, _ := BuiltinYAML(WorkItemGraph)
	if _, err := r.AddYAML("graphs/wi.yaml", wi); !errors.Is(err, ErrNameClash) {
		t.Errorf("clash with built-in: %v", err)
	}
	if _, err := r.AddYAML("graphs/bad.yaml", []byte("name: x\n")); !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "graphs/bad.yaml: ") {
		t.Errorf("bad file: %v", err)
	}
	if !slices.Equal(r.Names(), append(builtins, "mini")) {
		t.Errorf("names = %v", r.Names())
	}
}
