package graph

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// The operator's escape hatch (docs/decisions/111-operator-escape-hatch.md):
// a work item's graph moved by hand, for a stuck or misclassified item. Each
// move names the node the operator saw the work item at, so that one decided
// on a state that has since changed is refused rather than applied to
// another node, and is kept in State.Overrides by its event id, so that one
// event moves the graph once.

// Action is one of the operator's moves.
type Action string

// The four actions.
const (
	// ActionAdvance follows one of the current node's edges to a named
	// node. A human gate is refused: a person's answer decides it, and
	// force is the verb that overrules one.
	ActionAdvance Action = "advance"
	// ActionSkip leaves the current node by its default edge (done,
	// approved, execute), as phase selection skips a node. A human gate is
	// refused, as for advance.
	ActionSkip Action = "skip"
	// ActionForce enters any node of the graph, edges and gates
	// notwithstanding.
	ActionForce Action = "force"
	// ActionEscalate leaves the current node, gate or not, by its escalate
	// edge; the escalated end raises conflict-escalated.
	ActionEscalate Action = "escalate"
)

// Actions are the operator's moves, in the order the CLI lists them.
func Actions() []Action {
	return []Action{ActionAdvance, ActionSkip, ActionForce, ActionEscalate}
}

// Valid reports whether a is one of the four actions.
func (a Action) Valid() bool { return slices.Contains(Actions(), a) }

// NeedsTarget reports whether a names the node it moves to.
func (a Action) NeedsTarget() bool { return a == ActionAdvance || a == ActionForce }

// OutcomeForced is the outcome recorded in History for a node left by
// ActionForce, which follows no edge. It is never an edge's outcome.
const OutcomeForced Outcome = "forced"

// Errors of Override; match with errors.Is. Each means the move is refused
// for good: the same request would be refused again.
var (
	// ErrStaleOverride: the work item is no longer at the node the
	// operator saw.
	ErrStaleOverride = errors.New("the work item has left the node the override was decided at")
	// ErrGateOverride: advance or skip at a human gate.
	ErrGateOverride = errors.New("a human gate is decided by a person's answer")
	// ErrBadOverride: the request itself is malformed (an unknown action
	// or node, a missing target, a move to where the work item already is).
	ErrBadOverride = errors.New("invalid override")
)

// OverrideRequest is one operator move as the dispatcher applies it.
type OverrideRequest struct {
	Action Action
	// From is the node the operator saw the work item at.
	From string
	// To is the target of advance and force.
	To     string
	Reason string
	// By is the person's GitHub login, when the operator named one.
	By string
	// EventID is the recorded event's id; RecordURL its ledger record.
	EventID   string
	RecordURL string
	At        time.Time
}

// Override is an applied operator move, as State keeps it.
type Override struct {
	Action    Action    `json:"action"`
	From      string    `json:"from"`
	To        string    `json:"to"`
	Outcome   Outcome   `json:"outcome"`
	Reason    string    `json:"reason,omitempty"`
	By        string    `json:"by,omitempty"`
	EventID   string    `json:"eventID"`
	RecordURL string    `json:"recordURL,omitempty"`
	At        time.Time `json:"at"`
}

// Overridden reports whether the event id already moved the graph.
func (s *State) Overridden(eventID string) bool {
	if eventID == "" {
		return false
	}
	return slices.ContainsFunc(s.Overrides, func(o Override) bool { return o.EventID == eventID })
}

// CheckOverride reports why r cannot be applied to s on g (nil when it
// can) and the outcome and target node it would move by. It changes
// nothing: the CLI asks it before publishing, the dispatcher before moving.
func (s *State) CheckOverride(g *Graph, r OverrideRequest) (Outcome, string, error) {
	n, err := s.node(g)
	if err != nil {
		return "", "", err
	}
	if !r.Action.Valid() {
		return "", "", fmt.Errorf("%w: action %q (one of %s)", ErrBadOverride, r.Action, joinActions(Actions()))
	}
	if r.From != "" && r.From != n.Name {
		return "", "", fmt.Errorf("%w: it was at %q, it is at %q", ErrStaleOverride, r.From, n.Name)
	}
	if n.Terminal && r.Action != ActionForce {
		return "", "", fmt.Errorf("%w: %s (only force moves a work item that has ended)", ErrTerminal, n.Name)
	}
	if r.Action.NeedsTarget() {
		if r.To == "" {
			return "", "", fmt.Errorf("%w: %s needs the node to move to", ErrBadOverride, r.Action)
		}
		if g.Node(r.To) == nil {
			return "", "", fmt.Errorf("%w: graph %q has no node %q", ErrBadOverride, g.Name, r.To)
		}
	} else if r.To != "" {
		return "", "", fmt.Errorf("%w: %s follows the node's own edge and takes no target", ErrBadOverride, r.Action)
	}
	if (r.Action == ActionAdvance || r.Action == ActionSkip) && n.IsGate() {
		return "", "", fmt.Errorf("%w: %q waits for one (force overrules it)", ErrGateOverride, n.Name)
	}
	switch r.Action {
	case ActionAdvance:
		for _, o := range sortedOutcomes(n.On) {
			if n.On[o] == r.To {
				return o, r.To, nil
			}
		}
		return "", "", fmt.Errorf("%w: node %q has no edge to %q (force moves there regardless)", ErrNoEdge, n.Name, r.To)
	case ActionSkip:
		o := defaultOutcome(n)
		to, ok := n.On[o]
		if !ok {
			return "", "", fmt.Errorf("%w: node %q has no edge for %q", ErrNoEdge, n.Name, o)
		}
		return o, to, nil
	case ActionEscalate:
		to, ok := n.On[OutcomeEscalate]
		if !ok {
			return "", "", fmt.Errorf("%w: node %q has no edge for %q (force moves to an escalated node regardless)", ErrNoEdge, n.Name, OutcomeEscalate)
		}
		return OutcomeEscalate, to, nil
	}
	if r.To == n.Name {
		return "", "", fmt.Errorf("%w: the work item is at %q already", ErrBadOverride, r.To)
	}
	return OutcomeForced, r.To, nil
}

// Override applies the operator's move r and returns the transition, whose
// notifications are the entered node's, as any move's, and records r in
// Overrides. It does not look at r.EventID: the caller asks Overridden first,
// so that a redelivered event is settled as already applied, not refused as
// stale.
func (s *State) Override(g *Graph, r OverrideRequest) (Transition, error) {
	o, to, err := s.CheckOverride(g, r)
	if err != nil {
		return Transition{}, err
	}
	from := s.Current
	// The node left keeps an ordinary history step (it was entered, and
	// its hooks ran): Overrides says how it was left.
	s.exit(r.At, o)
	s.Overrides = append(s.Overrides, Override{
		Action: r.Action, From: from, To: to, Outcome: o, Reason: r.Reason, By: r.By,
		EventID: r.EventID, RecordURL: r.RecordURL, At: r.At,
	})
	notes, err := s.Enter(g, to, r.At)
	if err != nil {
		return Transition{}, err
	}
	return Transition{From: from, To: s.Current, Outcome: o, Reason: r.Reason, Notifications: notes}, nil
}

func joinActions(as []Action) string {
	out := ""
	for i, a := range as {
		if i > 0 {
			out += ", "
		}
		out += string(a)
	}
	return out
}
