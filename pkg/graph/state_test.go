package graph

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
)

var t0 = time.Date(2026, 5, 4, 9, 30, 0, 0, time.UTC)

const ref = "github:octo/repo#15"

func builtin(t *testing.T, name string) *Graph {
	t.Helper()
	g, ok := Builtin(name)
	if !ok {
		t.Fatalf("no built-in %s", name)
	}
	return g
}

// at returns a state of g parked at node (entered directly).
func at(t *testing.T, g *Graph, node string) *State {
	t.Helper()
	s := &State{Ref: ref}
	if _, err := s.Enter(g, node, t0); err != nil {
		t.Fatal(err)
	}
	return s
}

func types(ns []Notification) []catalog.Type {
	var out []catalog.Type
	for _, n := range ns {
		out = append(out, n.Type)
	}
	return out
}

type edge struct {
	from    string
	outcome Outcome
	to      string
	status  Status
	notify  []catalog.Type
}

// The complete transition tables of the two built-in graphs.
var transitions = map[string][]edge{
	WorkItemGraph: {
		{"phase-selection", OutcomeExecute, "requirements", StatusActive, nil},
		{"phase-selection", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
		{"requirements", OutcomeDone, "requirements-approval", StatusWaiting, []catalog.Type{catalog.PhaseApprovalPending}},
		{"requirements", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
		{"requirements-approval", OutcomeApproved, "design", StatusActive, nil},
		{"requirements-approval", OutcomeApprovedWithComments, "design", StatusActive, nil},
		{"requirements-approval", OutcomeChangesRequested, "requirements", StatusActive, nil},
		{"requirements-approval", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
		{"design", OutcomeDone, "design-approval", StatusWaiting, []catalog.Type{catalog.PhaseApprovalPending}},
		{"design", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
		{"design-approval", OutcomeApproved, "implementation", StatusActive, nil},
		{"design-approval", OutcomeApprovedWithComments, "implementation", StatusActive, nil},
		{"design-approval", OutcomeChangesRequested, "design", StatusActive, nil},
		{"design-approval", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
		{"implementation", OutcomeDone, "review", StatusWaiting, []catalog.Type{catalog.PRReviewPending}},
		{"implementation", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
		{"review", OutcomeApproved, "complete", StatusComplete, []catalog.Type{catalog.WorkItemComplete}},
		{"review", OutcomeApprovedWithComments, "complete", StatusComplete, []catalog.Type{catalog.WorkItemComplete}},
		{"review", OutcomeChangesRequested, "implementation", StatusActive, nil},
		{"review", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
	},
	AdhocGraph: {
		{"work", OutcomeDone, "review", StatusWaiting, []catalog.Type{catalog.DecisionPending}},
		{"work", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
		{"review", OutcomeDone, "complete", StatusComplete, []catalog.Type{catalog.WorkItemComplete}},
		{"review", OutcomeMoreWork, "work", StatusActive, nil},
		{"review", OutcomeEscalate, "escalated", StatusEscalated, []catalog.Type{catalog.ConflictEscalated}},
	},
}

func TestTransitions(t *testing.T) {
	t.Parallel()
	for name, edges := range transitions {
		g := builtin(t, name)
		// The table is the whole graph: every declared edge, nothing else.
		declared := 0
		for _, n := range g.Nodes {
			declared += len(n.On)
		}
		if declared != len(edges) {
			t.Errorf("%s declares %d edges, the table has %d", name, declared, len(edges))
		}
		for _, e := range edges {
			t.Run(fmt.Sprintf("%s/%s/%s", name, e.from, e.outcome), func(t *testing.T) {
				t.Parallel()
				s := at(t, g, e.from)
				v := s.Version
				tr, err := s.Advance(g, e.outcome, t0.Add(time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				if tr.From != e.from || tr.To != e.to || s.Current != e.to || s.Status != e.status {
					t.Errorf("got %s -> %s (current %s, %s), want %s -> %s (%s)", tr.From, tr.To, s.Current, s.Status, e.from, e.to, e.status)
				}
				if diff := cmp.Diff(e.notify, types(tr.Notifications)); diff != "" {
					t.Errorf("notifications (-want +got):\n%s", diff)
				}
				if s.Version <= v {
					t.Errorf("version did not grow: %d -> %d", v, s.Version)
				}
				last := s.History[len(s.History)-2]
				if last.Node != e.from || last.Outcome != e.outcome || !last.ExitedAt.Equal(t0.Add(time.Minute)) {
					t.Errorf("exited step = %+v", last)
				}
			})
		}
	}
}

func TestAdvanceErrors(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	adhoc := builtin(t, AdhocGraph)
	tests := []struct {
		name    string
		s       *State
		g       *Graph
		outcome Outcome
		want    error
	}{
		{"no edge", at(t, g, "requirements"), g, OutcomeApproved, ErrNoEdge},
		{"wait", at(t, g, "review"), g, OutcomeWait, ErrNoEdge},
		{"terminal", at(t, g, "complete"), g, OutcomeDone, ErrTerminal},
		{"other graph", at(t, g, "review"), adhoc, OutcomeDone, ErrWrongGraph},
		{"unknown node", &State{Graph: WorkItemGraph, Current: "gone"}, g, OutcomeDone, ErrWrongGraph},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			before := *tt.s
			if _, err := tt.s.Advance(tt.g, tt.outcome, t0); !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want %v", err, tt.want)
			}
			if tt.s.Current != before.Current || tt.s.Version != before.Version {
				t.Errorf("state changed on error")
			}
		})
	}
}

func TestAtHumanGate(t *testing.T) {
	t.Parallel()
	want := map[string]map[string]bool{
		WorkItemGraph: {
			"phase-selection": true, "requirements": false, "requirements-approval": true, "design": false,
			"design-approval": true, "implementation": false, "review": true, "complete": false, "escalated": false,
		},
		AdhocGraph: {"work": false, "review": true, "complete": false, "escalated": false},
	}
	for name, nodes := range want {
		g := builtin(t, name)
		for node, w := range nodes {
			if got := at(t, g, node).AtHumanGate(g); got != w {
				t.Errorf("%s/%s: AtHumanGate = %v, want %v", name, node, got, w)
			}
		}
	}
	// docs/requirements.md R6.3: it does not depend on any "parked" marker, only
	// on the node.
	g := builtin(t, WorkItemGraph)
	s, _, _ := New(g, ref, t0)
	if !s.AtHumanGate(g) || s.Status != StatusWaiting {
		t.Errorf("fresh work item not at its phase-selection gate: %+v", s)
	}
	if s.AtHumanGate(builtin(t, AdhocGraph)) {
		t.Error("AtHumanGate true for a different graph")
	}
}

func TestNewEntersStart(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	s, notes, err := New(g, ref, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Notification{{
		Type: catalog.DecisionPending, Ref: ref, Node: "phase-selection", Phase: "selection",
		Text: "github:octo/repo#15 waits for a human decision at phase-selection (phase selection).",
	}}
	if diff := cmp.Diff(want, notes); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s.Current != "phase-selection" || s.V != StateVersion || s.Version != 1 {
		t.Errorf("state = %+v", s)
	}
}

func TestNotificationCarriesArtifact(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	s := at(t, g, "requirements")
	tr, err := s.Advance(g, OutcomeDone, t0)
	if err != nil {
		t.Fatal(err)
	}
	want := []Notification{{
		Type: catalog.PhaseApprovalPending, Ref: ref, Node: "requirements-approval", Phase: "requirements",
		Artifact: "requirements.md|bugfix.md",
		Text:     "github:octo/repo#15: requirements.md or bugfix.md is ready for approval at requirements-approval (phase requirements).",
	}}
	if diff := cmp.Diff(want, tr.Notifications); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// everyone authorizes the logins of the tests.
func everyone(login string) bool { return login == "alice" || login == "bob" || login == "operator" }

func relayed(text, member string) string {
	return "📨 Relayed from `" + member + "` on the **slack** channel:\n\n" + text +
		"\n\n<!-- the-loop:envelope {\"v\":1,\"id\":\"slack:Ev1\",\"type\":\"gate.feedback\",\"sig\":\"x\"} -->\n"
}

// walk drives g from its start to the end through the given gate answers
// (one comment each) and agent completions, returning every notification
// published on the way.
func walk(t *testing.T, g *Graph, steps []string) (*State, []catalog.Type) {
	t.Helper()
	s, notes, err := New(g, ref, t0)
	if err != nil {
		t.Fatal(err)
	}
	all := types(notes)
	for i, step := range steps {
		when := t0.Add(time.Duration(i+1) * time.Minute)
		var tr Transition
		if step == "done" && !s.AtHumanGate(g) {
			tr, err = s.Advance(g, OutcomeDone, when)
		} else if step == "escalate" {
			tr, err = s.Advance(g, OutcomeEscalate, when)
		} else {
			tr, err = s.Apply(g, GateInput{
				Comments:       []Comment{{Author: "alice", Body: step, Provenance: Provenance{Channel: "github", RecordURL: fmt.Sprintf("https://github.com/octo/repo/issues/15#issuecomment-%d", i)}}},
				Authorized:     everyone,
				ExecuteKeyword: "the-loop execute",
				At:             when,
			})
		}
		if err != nil {
			t.Fatalf("step %d %q at %s: %v", i, step, s.Current, err)
		}
		if !tr.Moved() {
			t.Fatalf("step %d %q at %s did not move: %s", i, step, s.Current, tr.Reason)
		}
		all = append(all, types(tr.Notifications)...)
	}
	return s, all
}

func TestCompletePublishesWorkItemCompleteOnEveryRoute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		graph string
		steps []string
	}{
		{"work-item straight", WorkItemGraph, []string{"the-loop execute", "done", "LGTM", "done", ApproveText, "done", "Approved"}},
		{"work-item with comments", WorkItemGraph, []string{"the-loop execute", "done", "approved, one nit", "done", "LGTM but rename X", "done", "looks good, but a nit"}},
		{"work-item with rework", WorkItemGraph, []string{
			"the-loop execute", "done", RequestChangesText, "done", "lgtm", "done", "rejected", "done", "ship it",
			"done", "changes requested", "done", ApproveText,
		}},
		{"adhoc first reply", AdhocGraph, []string{"done", "all done, thanks"}},
		{"adhoc after more work", AdhocGraph, []string{"done", "also add a test", "done", "that's all"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g := builtin(t, tt.graph)
			s, notes := walk(t, g, tt.steps)
			if s.Current != NodeComplete || s.Status != StatusComplete {
				t.Fatalf("ended at %s (%s)", s.Current, s.Status)
			}
			n := 0
			for _, ty := range notes {
				if ty == catalog.WorkItemComplete {
					n++
				}
			}
			if n != 1 || notes[len(notes)-1] != catalog.WorkItemComplete {
				t.Errorf("work-item-complete published %d times; notifications %v", n, notes)
			}
		})
	}
}

// Entering complete directly (an operator forcing it, or a skip chain)
// publishes work-item-complete too, even from a graph whose complete node
// does not say so.
func TestCompleteAlwaysPublishes(t *testing.T) {
	t.Parallel()
	g, err := Load([]byte(valid)) // its complete node has no notify
	if err != nil {
		t.Fatal(err)
	}
	s := at(t, g, "g")
	tr, err := s.Advance(g, OutcomeDone, t0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]catalog.Type{catalog.WorkItemComplete}, types(tr.Notifications)); diff != "" {
		t.Error(diff)
	}
	custom := strings.Replace(strings.Replace(valid, "complete", "shipped", -1), "    terminal: true\n", "    terminal: true\n    end: complete\n    notify: team.shipped\n", 1)
	g2, err := Load([]byte(custom))
	if err != nil {
		t.Fatal(err)
	}
	s2 := at(t, g2, "g")
	tr2, err := s2.Advance(g2, OutcomeDone, t0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]catalog.Type{"team.shipped", catalog.WorkItemComplete}, types(tr2.Notifications)); diff != "" {
		t.Error(diff)
	}
	// Forced entry.
	s3 := at(t, builtin(t, WorkItemGraph), "design")
	notes, err := s3.Enter(builtin(t, WorkItemGraph), NodeComplete, t0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]catalog.Type{catalog.WorkItemComplete}, types(notes)); diff != "" {
		t.Error(diff)
	}
}

func TestSkipRouteIntoComplete(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	s, _, _ := New(g, ref, t0)
	tr, err := s.Apply(g, GateInput{
		Comments:       []Comment{{Author: "alice", Body: "the-loop execute"}},
		Authorized:     everyone,
		ExecuteKeyword: "the-loop execute",
		Skip:           []string{"requirements", "requirements-approval", "design", "design-approval", "complete", "nonsense"},
		At:             t0,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tr.To != "implementation" || s.Status != StatusActive || len(tr.Notifications) != 0 {
		t.Fatalf("after execute: %+v", tr)
	}
	if diff := cmp.Diff([]string{"requirements", "requirements-approval", "design", "design-approval"}, s.Skips); diff != "" {
		t.Errorf("skips (-want +got):\n%s", diff)
	}
	var skipped []string
	for _, st := range s.History {
		if st.Skipped {
			skipped = append(skipped, st.Node)
		}
	}
	if diff := cmp.Diff(s.Skips, skipped); diff != "" {
		t.Errorf("skipped steps (-want +got):\n%s", diff)
	}
	// Skip the review too, then finish: complete is entered through a skip
	// chain and still publishes.
	s.Skips = append(s.Skips, "review")
	tr, err = s.Advance(g, OutcomeDone, t0)
	if err != nil {
		t.Fatal(err)
	}
	if s.Current != NodeComplete || diff(types(tr.Notifications), []catalog.Type{catalog.WorkItemComplete}) {
		t.Errorf("skip into complete: %+v", tr)
	}
}

func diff[T comparable](a, b []T) bool { return cmp.Diff(a, b) != "" }

func TestApplyFiltersComments(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	tests := []struct {
		name       string
		comments   []Comment
		authorized func(string) bool
		want       Outcome
		reason     string
	}{
		{"nobody authorized (nil)", []Comment{{Author: "alice", Body: "LGTM"}}, nil, OutcomeWait, ReasonNoComments},
		{"unauthorized author", []Comment{{Author: "mallory", Body: "LGTM"}}, everyone, OutcomeWait, ReasonNoComments},
		{"empty author", []Comment{{Body: "LGTM"}}, func(string) bool { return true }, OutcomeWait, ReasonNoComments},
		{"self-authored", []Comment{{Author: "alice", Body: envelope.MarkSelfAuthored("LGTM")}}, everyone, OutcomeWait, ReasonNoComments},
		{"attribution and envelope only", []Comment{{Author: "operator", Body: relayed("", "U1")}}, everyone, OutcomeWait, ReasonNoComments},
		{"unauthorized objection ignored", []Comment{{Author: "alice", Body: "LGTM"}, {Author: "mallory", Body: "not approved"}}, everyone, OutcomeApproved, ReasonApproved},
		{"relayed approval", []Comment{{Author: "alice", Body: relayed(ApproveText, "U1")}}, everyone, OutcomeApproved, ReasonApproved},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := at(t, g, "design-approval")
			tr, err := s.Apply(g, GateInput{Comments: tt.comments, Authorized: tt.authorized, At: t0})
			if err != nil {
				t.Fatal(err)
			}
			if tr.Outcome != tt.want || tr.Reason != tt.reason {
				t.Errorf("outcome %s (%s), want %s (%s)", tr.Outcome, tr.Reason, tt.want, tt.reason)
			}
			if tt.want == OutcomeWait && (tr.Moved() || s.Current != "design-approval" || s.Reason != tt.reason) {
				t.Errorf("a wait moved or did not record its reason: %+v", s)
			}
		})
	}
}

func TestApplyNotAtGate(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	for _, node := range []string{"requirements", "complete", "escalated"} {
		s := at(t, g, node)
		if _, err := s.Apply(g, GateInput{Comments: []Comment{{Author: "alice", Body: "LGTM"}}, Authorized: everyone}); !errors.Is(err, ErrNotAtGate) {
			t.Errorf("%s: err = %v, want ErrNotAtGate", node, err)
		}
	}
}

func TestApprovedBy(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	s := at(t, g, "design-approval")
	slack := Provenance{Channel: "slack", Member: "U012AB3CD", RecordURL: "https://github.com/octo/repo/issues/15#issuecomment-7", EventID: "slack:Ev7"}
	tr, err := s.Apply(g, GateInput{
		Comments: []Comment{
			// Relayed from Slack: posted by the operator, re-attributed to alice.
			{Author: "alice", Body: relayed(ApproveText, "U012AB3CD"), Provenance: slack},
			{Author: "bob", Body: "the naming in §2 could be tighter"},
		},
		Authorized: everyone,
		At:         t0,
	})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Outcome != OutcomeApprovedWithComments || tr.To != "implementation" {
		t.Fatalf("transition %+v", tr)
	}
	want := []Approval{{Login: "alice", Node: "design-approval", At: t0, Provenance: slack}}
	if d := cmp.Diff(want, s.ApprovedBy); d != "" {
		t.Errorf("approvedBy (-want +got):\n%s", d)
	}
	if d := cmp.Diff(want, tr.Approvals); d != "" {
		t.Errorf("transition approvals (-want +got):\n%s", d)
	}
	wantDec := []Decision{{Node: "design-approval", Outcome: OutcomeApprovedWithComments, At: t0, By: []string{"alice"}, Records: []string{slack.RecordURL}, Events: []string{slack.EventID}}}
	if d := cmp.Diff(wantDec, s.Decisions); d != "" {
		t.Errorf("decisions (-want +got):\n%s", d)
	}
	if len(tr.Comments) != 2 {
		t.Errorf("classified comments = %d, want 2", len(tr.Comments))
	}

	// A typed GitHub approval defaults to channel github.
	s2 := at(t, g, "review")
	if _, err := s2.Apply(g, GateInput{Comments: []Comment{{Author: "bob", Body: "LGTM", Provenance: Provenance{RecordURL: "u"}}}, Authorized: everyone, At: t0}); err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]Approval{{Login: "bob", Node: "review", At: t0, Provenance: Provenance{Channel: "github", RecordURL: "u"}}}, s2.ApprovedBy); d != "" {
		t.Error(d)
	}

	// Changes requested records a decision, no approval.
	s3 := at(t, g, "review")
	if _, err := s3.Apply(g, GateInput{Comments: []Comment{{Author: "bob", Body: "LGTM but please change the API"}}, Authorized: everyone, At: t0}); err != nil {
		t.Fatal(err)
	}
	if len(s3.ApprovedBy) != 0 || len(s3.Decisions) != 1 || s3.Decisions[0].Outcome != OutcomeChangesRequested {
		t.Errorf("changes requested: %+v", s3)
	}
}

func TestStateJSONRoundTrip(t *testing.T) {
	t.Parallel()
	g := builtin(t, WorkItemGraph)
	s, _ := walk(t, g, []string{"the-loop execute", "done", "LGTM", "done", RequestChangesText})
	s.Skips = []string{"design"}
	s.Reason = ReasonNotDecisive
	data, err := s.Encode()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(s, back); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	// The JSON names are part of the contract with ingress-slack.
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"v", "graph", "ref", "current", "status", "history", "decisions", "approvedBy", "skips", "reason", "version"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, data)
		}
	}
	if strings.Contains(string(data), "LGTM") {
		t.Errorf("state carries comment text: %s", data)
	}
	if !back.AtHumanGate(g) && back.Current != "design" {
		t.Errorf("decoded state at %s", back.Current)
	}
}

func TestDecodeRefuses(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`nope`,
		`{"v":2,"graph":"work-item","current":"review","status":"waiting"}`,
		`{"v":1,"graph":"","current":"review","status":"waiting"}`,
		`{"v":1,"graph":"work-item","current":"review","status":"parked"}`,
	} {
		if _, err := Decode([]byte(in)); !errors.Is(err, ErrBadState) {
			t.Errorf("Decode(%s) = %v, want ErrBadState", in, err)
		}
	}
}
