package graph

import (
	"errors"
	"slices"
	"testing"

	"github.com/the-loop/bus/pkg/catalog"
)

// TestOverride walks each of the operator's moves on the work-item graph,
// and each refusal.
func TestOverride(t *testing.T) {
	g := builtin(t, WorkItemGraph)
	at1 := t0.Add(1)
	for _, c := range []struct {
		name        string
		node        string
		req         OverrideRequest
		to          string
		outcome     Outcome
		notify      []catalog.Type
		err         error
		wantHistory int
	}{
		{name: "skip an agent node", node: "requirements", req: OverrideRequest{Action: ActionSkip, From: "requirements"},
			to: "requirements-approval", outcome: OutcomeDone, notify: []catalog.Type{catalog.PhaseApprovalPending}},
		{name: "advance along an edge", node: "design", req: OverrideRequest{Action: ActionAdvance, From: "design", To: "escalated"},
			to: "escalated", outcome: OutcomeEscalate, notify: []catalog.Type{catalog.ConflictEscalated}},
		{name: "force past a gate", node: "design-approval", req: OverrideRequest{Action: ActionForce, From: "design-approval", To: "review"},
			to: "review", outcome: OutcomeForced, notify: []catalog.Type{catalog.PRReviewPending}},
		{name: "force revives an ended item", node: "escalated", req: OverrideRequest{Action: ActionForce, To: "implementation"},
			to: "implementation", outcome: OutcomeForced},
		{name: "escalate a gate", node: "review", req: OverrideRequest{Action: ActionEscalate, From: "review"},
			to: "escalated", outcome: OutcomeEscalate, notify: []catalog.Type{catalog.ConflictEscalated}},
		{name: "skip refuses a gate", node: "review", req: OverrideRequest{Action: ActionSkip}, err: ErrGateOverride},
		{name: "advance refuses a gate", node: "review", req: OverrideRequest{Action: ActionAdvance, To: "complete"}, err: ErrGateOverride},
		{name: "advance without an edge", node: "design", req: OverrideRequest{Action: ActionAdvance, To: "review"}, err: ErrNoEdge},
		{name: "stale", node: "design", req: OverrideRequest{Action: ActionSkip, From: "requirements"}, err: ErrStaleOverride},
		{name: "unknown target", node: "design", req: OverrideRequest{Action: ActionForce, To: "nowhere"}, err: ErrBadOverride},
		{name: "force to where it is", node: "design", req: OverrideRequest{Action: ActionForce, To: "design"}, err: ErrBadOverride},
		{name: "skip with a target", node: "design", req: OverrideRequest{Action: ActionSkip, To: "review"}, err: ErrBadOverride},
		{name: "unknown action", node: "design", req: OverrideRequest{Action: "run"}, err: ErrBadOverride},
		{name: "skip an ended item", node: "complete", req: OverrideRequest{Action: ActionSkip}, err: ErrTerminal},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := at(t, g, c.node)
			version := s.Version
			c.req.At, c.req.EventID, c.req.Reason = at1, "cli:override-1", "stuck"
			tr, err := s.Override(g, c.req)
			if c.err != nil {
				if !errors.Is(err, c.err) {
					t.Fatalf("err = %v, want %v", err, c.err)
				}
				if s.Version != version || len(s.Overrides) != 0 {
					t.Errorf("a refused override changed the state: %+v", s)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tr.From != c.node || tr.To != c.to || tr.Outcome != c.outcome || s.Current != c.to {
				t.Errorf("transition = %+v, state at %s; want %s → %s by %s", tr, s.Current, c.node, c.to, c.outcome)
			}
			if got := types(tr.Notifications); !slices.Equal(got, c.notify) {
				t.Errorf("notifications = %v, want %v", got, c.notify)
			}
			if !s.Overridden("cli:override-1") || s.Overridden("cli:other") || len(s.Overrides) != 1 {
				t.Fatalf("overrides = %+v", s.Overrides)
			}
			o := s.Overrides[0]
			if o.Action != c.req.Action || o.From != c.node || o.To != c.to || o.Reason != "stuck" || !o.At.Equal(at1) {
				t.Errorf("override recorded = %+v", o)
			}
			if h := s.History[len(s.History)-2]; h.Node != c.node || h.Outcome != c.outcome || h.Skipped {
				t.Errorf("the left node's step = %+v", h)
			}
			// The state round-trips with its overrides.
			data, err := s.Encode()
			if err != nil {
				t.Fatal(err)
			}
			back, err := Decode(data)
			if err != nil || !back.Overridden("cli:override-1") {
				t.Errorf("decoded overrides = %+v (%v)", back.Overrides, err)
			}
		})
	}
}

// TestEscalatedEndAlwaysNotifies: entering an escalated end raises
// conflict-escalated even when the graph's author declared no notify.
func TestEscalatedEndAlwaysNotifies(t *testing.T) {
	g, err := Load([]byte(`
name: quiet
start: work
nodes:
  work:
    actor: agent
    on:
      done: complete
      escalate: stuck
  complete:
    actor: agent
    terminal: true
  stuck:
    actor: human
    terminal: true
    end: escalated
`))
	if err != nil {
		t.Fatal(err)
	}
	s := at(t, g, "work")
	tr, err := s.Override(g, OverrideRequest{Action: ActionEscalate, From: "work", At: t0, EventID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	if got := types(tr.Notifications); !slices.Equal(got, []catalog.Type{catalog.ConflictEscalated}) || s.Status != StatusEscalated {
		t.Errorf("escalated: notifications %v, status %s", got, s.Status)
	}
}
