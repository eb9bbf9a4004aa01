package graph

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
)

// StateVersion is the format version of State's JSON ("v").
const StateVersion = 1

// Status is where a work item stands in its graph.
type Status string

// The four statuses.
const (
	// StatusActive: an agent works the current node.
	StatusActive Status = "active"
	// StatusWaiting: the current node is a human gate.
	StatusWaiting Status = "waiting"
	// StatusComplete: a terminal node whose end is complete was reached.
	StatusComplete Status = "complete"
	// StatusEscalated: a terminal node whose end is escalated was reached.
	StatusEscalated Status = "escalated"
)

// Errors of the transitions; match with errors.Is.
var (
	// ErrTerminal: the work item already reached a terminal node.
	ErrTerminal = errors.New("work item is at a terminal node")
	// ErrNotAtGate: Apply was called while the current node is not a human gate.
	ErrNotAtGate = errors.New("work item is not at a human gate")
	// ErrNoEdge: the current node has no edge for the outcome.
	ErrNoEdge = errors.New("no edge for outcome")
	// ErrWrongGraph: the state belongs to another graph, or names a node the
	// graph does not have.
	ErrWrongGraph = errors.New("state does not match graph")
	// ErrBadState: the JSON is not a valid State.
	ErrBadState = errors.New("invalid graph state")
)

// State is one work item's position in its graph: the value the dispatcher
// keeps in KV "graph" (keyed by the work item) and ingress-slack reads. It
// holds ids, outcomes, logins and URLs, never comment text.
type State struct {
	V       int    `json:"v"`
	Graph   string `json:"graph"`
	Ref     string `json:"ref"`
	Current string `json:"current"`
	Status  Status `json:"status"`
	// Reason is why a gate is still waiting (a Verdict reason); cleared on
	// every entry.
	Reason string `json:"reason,omitempty"`
	// History is every node entered, in order, skipped ones included.
	History []Step `json:"history"`
	// Decisions are the gates' verdicts, in order.
	Decisions []Decision `json:"decisions,omitempty"`
	// ApprovedBy is every approval a gate recorded (R6.3).
	ApprovedBy []Approval `json:"approvedBy,omitempty"`
	// Skips are the nodes the phase selection chose to skip: entering one
	// records it and follows its default edge without publishing anything.
	Skips []string `json:"skips,omitempty"`
	// Overrides are the operator's moves by hand, in order, each kept by
	// its event id so that one event moves the graph once
	// (docs/decisions/111-operator-escape-hatch.md).
	Overrides []Override `json:"overrides,omitempty"`
	// Version counts changes; every transition that changes the state adds
	// one, so a writer can tell a stale read from the current one.
	Version int64 `json:"version"`
}

// Step is one entry into a node.
type Step struct {
	Node      string    `json:"node"`
	EnteredAt time.Time `json:"enteredAt"`
	ExitedAt  time.Time `json:"exitedAt,omitzero"`
	Outcome   Outcome   `json:"outcome,omitempty"`
	// Skipped: the node was skipped (phase selection); no hook ran.
	Skipped bool `json:"skipped,omitempty"`
}

// Decision is one gate verdict that moved the work item.
type Decision struct {
	Node    string    `json:"node"`
	Outcome Outcome   `json:"outcome"`
	At      time.Time `json:"at"`
	// By are the GitHub logins of the deciding comments' authors.
	By []string `json:"by,omitempty"`
	// Records are the URLs of the deciding comments.
	Records []string `json:"records,omitempty"`
	// Events are the event ids of the deciding comments: one event passes
	// a gate once, whatever record carries it.
	Events []string `json:"events,omitempty"`
}

// Approval is one person's approval at a gate (R6.3): their GitHub login
// (the re-attributed person for a relayed record, decision 018), and where it
// came from.
type Approval struct {
	Login      string     `json:"login"`
	Node       string     `json:"node"`
	At         time.Time  `json:"at"`
	Provenance Provenance `json:"provenance"`
}

// Provenance says where an approval was given: the channel, the member id on
// it, the ledger record (comment URL) and the event id. A comment typed on
// GitHub has channel "github" and no member.
type Provenance struct {
	Channel   string `json:"channel"`
	Member    string `json:"member,omitempty"`
	RecordURL string `json:"recordURL,omitempty"`
	EventID   string `json:"eventID,omitempty"`
}

// Notification is an event to publish because a node was entered. The
// caller turns it into a loopv1.Notification, adding the work item's URL and,
// when Artifact is set, an excerpt of the artifact capped at
// channels.slack.maxChars (R4.4); Artifact is the node's pattern as declared
// (alternatives separated by '|'), the caller picks the one that exists.
type Notification struct {
	Type     catalog.Type
	Ref      string
	Node     string
	Phase    string
	Artifact string
	// Text is a short fixed sentence naming the node; no comment text.
	Text string
}

// Transition is what a move did.
type Transition struct {
	From    string
	To      string
	Outcome Outcome
	// Reason is the verdict's reason when a gate classified.
	Reason string
	// Notifications to publish, in order. Empty when nothing moved.
	Notifications []Notification
	// Approvals recorded by this move; the caller writes each into the
	// artifact's front matter (AddApproval).
	Approvals []Approval
	// Comments are the comments the gate classified (authorized, not
	// self-authored, with text), for record-feedback.
	Comments []Comment
	// Ignored are the rows of a phase selection that chose nothing, each
	// with why (SelectPhases).
	Ignored []string
}

// Moved reports whether the work item left its node.
func (t Transition) Moved() bool { return t.To != "" }

// New starts a work item on g: it enters the start node and returns the
// notifications that entry publishes.
func New(g *Graph, ref string, at time.Time) (*State, []Notification, error) {
	s := &State{V: StateVersion, Graph: g.Name, Ref: ref, History: []Step{}}
	notes, err := s.Enter(g, g.Start, at)
	if err != nil {
		return nil, nil, err
	}
	return s, notes, nil
}

// Decode reads a State from JSON and checks it is one this package wrote.
func Decode(data []byte) (*State, error) {
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadState, err)
	}
	switch {
	case s.V != StateVersion:
		return nil, fmt.Errorf("%w: format version %d, want %d", ErrBadState, s.V, StateVersion)
	case s.Graph == "" || s.Current == "":
		return nil, fmt.Errorf("%w: graph and current are required", ErrBadState)
	}
	switch s.Status {
	case StatusActive, StatusWaiting, StatusComplete, StatusEscalated:
	default:
		return nil, fmt.Errorf("%w: status %q", ErrBadState, s.Status)
	}
	return &s, nil
}

// Encode is the JSON stored in KV.
func (s *State) Encode() ([]byte, error) { return json.Marshal(s) }

// node returns the current node of s in g, checking s belongs to g.
func (s *State) node(g *Graph) (*Node, error) {
	if g == nil || s.Graph != g.Name {
		return nil, fmt.Errorf("%w: state is on graph %q", ErrWrongGraph, s.Graph)
	}
	n := g.Node(s.Current)
	if n == nil {
		return nil, fmt.Errorf("%w: graph %q has no node %q", ErrWrongGraph, g.Name, s.Current)
	}
	return n, nil
}

// AtHumanGate reports whether the work item is parked at a human gate: its
// current node is a human node and not terminal (docs/requirements.md R6.3).
// This is what ingress-slack asks before it classifies a reply as
// gate.feedback.
func (s *State) AtHumanGate(g *Graph) bool {
	n, err := s.node(g)
	return err == nil && n.IsGate()
}

// Terminal reports whether the work item has reached a terminal node.
func (s *State) Terminal() bool {
	return s.Status == StatusComplete || s.Status == StatusEscalated
}

// Enter moves the work item into node (from wherever it is: a fresh state,
// an edge, or an operator forcing it) and returns the notifications to
// publish: the node's notify type, work-item-complete whenever the node is
// terminal with end complete (R6.4), and conflict-escalated whenever it is
// terminal with end escalated, whether or not it declares them. A node
// in Skips is recorded as skipped and left by its default edge (OutcomeDone,
// OutcomeApproved or OutcomeExecute) at once, publishing nothing; the node
// the chain stops at publishes as usual.
func (s *State) Enter(g *Graph, node string, at time.Time) ([]Notification, error) {
	if g == nil || (s.Graph != "" && s.Graph != g.Name) {
		return nil, fmt.Errorf("%w: state is on graph %q", ErrWrongGraph, s.Graph)
	}
	s.Graph = g.Name
	if s.V == 0 {
		s.V = StateVersion
	}
	seen := map[string]bool{}
	for {
		n := g.Node(node)
		if n == nil {
			return nil, fmt.Errorf("%w: graph %q has no node %q", ErrWrongGraph, g.Name, node)
		}
		s.exit(at, "")
		s.Current, s.Reason = n.Name, ""
		s.Version++
		switch {
		case n.Terminal && n.End == EndEscalated:
			s.Status = StatusEscalated
		case n.Terminal:
			s.Status = StatusComplete
		case n.Actor == Human:
			s.Status = StatusWaiting
		default:
			s.Status = StatusActive
		}
		next, skip := "", !n.Terminal && slices.Contains(s.Skips, n.Name) && !seen[n.Name]
		if skip {
			o := defaultOutcome(n)
			next = n.On[o]
			s.History = append(s.History, Step{Node: n.Name, EnteredAt: at, ExitedAt: at, Outcome: o, Skipped: true})
			seen[n.Name] = true
			node = next
			continue
		}
		s.History = append(s.History, Step{Node: n.Name, EnteredAt: at})
		return notifications(s.Ref, g, n), nil
	}
}

// defaultOutcome is the outcome a skipped node is left by.
func defaultOutcome(n *Node) Outcome {
	switch n.Gate {
	case Feedback:
		return OutcomeApproved
	case Execute:
		return OutcomeExecute
	}
	return OutcomeDone
}

// exit closes the open history step, if any.
func (s *State) exit(at time.Time, o Outcome) {
	if k := len(s.History) - 1; k >= 0 && s.History[k].ExitedAt.IsZero() && !s.History[k].Skipped {
		s.History[k].ExitedAt = at
		if o != "" {
			s.History[k].Outcome = o
		}
	}
}

func notifications(ref string, g *Graph, n *Node) []Notification {
	var out []Notification
	art := n.Publish
	if art == "" {
		art = n.Artifact
	}
	add := func(t catalog.Type) {
		for _, o := range out {
			if o.Type == t {
				return
			}
		}
		text := noteText(t, ref, n)
		if n.Gate == Execute && !n.Terminal {
			// The phase selection asks its question in its own ping.
			if list := g.Checklist(); list != "" {
				text += "\n" + list
			}
		}
		out = append(out, Notification{Type: t, Ref: ref, Node: n.Name, Phase: n.Phase, Artifact: art, Text: text})
	}
	if n.Notify != "" {
		add(n.Notify)
	}
	switch {
	case n.Terminal && n.End == EndComplete:
		add(catalog.WorkItemComplete)
	case n.Terminal && n.End == EndEscalated:
		// Reaching an escalated end hands the work item to a person, who
		// must hear of it whatever the graph's author declared.
		add(catalog.ConflictEscalated)
	}
	return out
}

// noteText is the fixed short sentence of a notification.
func noteText(t catalog.Type, ref string, n *Node) string {
	what := n.Name
	if n.Phase != "" && n.Phase != n.Name {
		what += " (phase " + n.Phase + ")"
	}
	art := ""
	if n.Artifact != "" {
		art = " " + strings.ReplaceAll(n.Artifact, "|", " or ")
	}
	switch t {
	case catalog.DecisionPending:
		return fmt.Sprintf("%s waits for a human decision at %s.", ref, what)
	case catalog.PhaseApprovalPending:
		if art == "" {
			return fmt.Sprintf("%s: %s is ready for approval.", ref, what)
		}
		return fmt.Sprintf("%s:%s is ready for approval at %s.", ref, art, what)
	case catalog.PRReviewPending:
		return fmt.Sprintf("%s: the pull request is ready for review at %s.", ref, what)
	case catalog.SecuritySignOffPending:
		return fmt.Sprintf("%s needs a named security sign-off at %s.", ref, what)
	case catalog.ConflictEscalated:
		return fmt.Sprintf("%s was escalated to a human.", ref)
	case catalog.WorkItemComplete:
		return fmt.Sprintf("%s is complete.", ref)
	}
	return fmt.Sprintf("%s entered %s.", ref, what)
}

// Advance leaves the current node by outcome and enters the node its edge
// leads to. Agent nodes leave by OutcomeDone (`the-loop graph complete`) or
// OutcomeEscalate; a gate may be advanced directly too (a classification
// above the deterministic floor, or an escalation). OutcomeWait is refused.
func (s *State) Advance(g *Graph, outcome Outcome, at time.Time) (Transition, error) {
	n, err := s.node(g)
	if err != nil {
		return Transition{}, err
	}
	if n.Terminal {
		return Transition{}, fmt.Errorf("%w: %s", ErrTerminal, n.Name)
	}
	to, ok := n.On[outcome]
	if !ok {
		return Transition{}, fmt.Errorf("%w: node %q has no edge for %q", ErrNoEdge, n.Name, outcome)
	}
	s.exit(at, outcome)
	notes, err := s.Enter(g, to, at)
	if err != nil {
		return Transition{}, err
	}
	return Transition{From: n.Name, To: s.Current, Outcome: outcome, Notifications: notes}, nil
}

// Comment is one comment offered to a gate.
type Comment struct {
	// Author is the GitHub login the comment is judged by: the poster, or
	// for a ledger.record the re-attributed person's login (decision 018).
	Author string
	// Body is the comment body as posted; the gate reads RelayedText(Body).
	Body string
	// Provenance is where it came from; Channel defaults to "github".
	Provenance Provenance
}

// GateInput is what Apply classifies.
type GateInput struct {
	// Comments, oldest first.
	Comments []Comment
	// Authorized reports whether a GitHub login may answer gates
	// (routing.authorizedUsers). Nil authorizes nobody: fail closed.
	Authorized func(login string) bool
	// ExecuteKeyword is the configured execute keyword; "" disables it.
	ExecuteKeyword string
	// Skip lists the nodes to skip, frozen into the state when an Execute
	// gate passes; ignored otherwise.
	Skip []string
	At   time.Time
}

// Apply offers comments to the gate the work item is parked at. Comments by
// people not Authorized, marker-stamped comments (the agent's own) and
// comments with no text of a person's are dropped first. A wait verdict leaves
// the work item where it is (recording the reason); any other verdict
// records a Decision, records an Approval per approving person for an
// approval, and advances. It returns ErrNotAtGate when the current node is
// not a human gate, so the caller delivers the comments instead.
func (s *State) Apply(g *Graph, in GateInput) (Transition, error) {
	n, err := s.node(g)
	if err != nil {
		return Transition{}, err
	}
	if !n.IsGate() {
		return Transition{}, fmt.Errorf("%w: node %q", ErrNotAtGate, n.Name)
	}
	var kept []Comment
	var bodies []string
	for _, c := range in.Comments {
		if c.Author == "" || in.Authorized == nil || !in.Authorized(c.Author) {
			continue
		}
		if envelope.HasSelfMarker(c.Body) || RelayedText(c.Body) == "" {
			continue
		}
		if c.Provenance.Channel == "" {
			c.Provenance.Channel = "github"
		}
		kept = append(kept, c)
		bodies = append(bodies, c.Body)
	}
	v := Classify(n.Gate, bodies, in.ExecuteKeyword)
	t := Transition{From: n.Name, Outcome: v.Outcome, Reason: v.Reason, Comments: kept}
	if v.Outcome == OutcomeWait {
		if s.Reason != v.Reason {
			s.Reason = v.Reason
			s.Version++
		}
		return t, nil
	}
	if _, ok := n.On[v.Outcome]; !ok {
		return Transition{}, fmt.Errorf("%w: node %q has no edge for %q", ErrNoEdge, n.Name, v.Outcome)
	}
	d := Decision{Node: n.Name, Outcome: v.Outcome, At: in.At}
	for _, i := range v.Deciders {
		c := kept[i]
		if !slices.Contains(d.By, c.Author) {
			d.By = append(d.By, c.Author)
		}
		if u := c.Provenance.RecordURL; u != "" && !slices.Contains(d.Records, u) {
			d.Records = append(d.Records, u)
		}
		if id := c.Provenance.EventID; id != "" && !slices.Contains(d.Events, id) {
			d.Events = append(d.Events, id)
		}
		if v.Outcome == OutcomeApproved || v.Outcome == OutcomeApprovedWithComments {
			a := Approval{Login: c.Author, Node: n.Name, At: in.At, Provenance: c.Provenance}
			if !s.hasApproval(a) {
				s.ApprovedBy = append(s.ApprovedBy, a)
				t.Approvals = append(t.Approvals, a)
			}
		}
	}
	s.Decisions = append(s.Decisions, d)
	if v.Outcome == OutcomeExecute {
		skips := slices.Clone(in.Skip)
		if len(v.Deciders) > 0 {
			// The person who said the keyword signs the checklist they
			// said it over (or, with none, the graph's defaults).
			sel := SelectPhases(g, kept[v.Deciders[len(v.Deciders)-1]].Body)
			skips = append(skips, sel.Skips...)
			t.Ignored = sel.Ignored
		}
		for _, name := range skips {
			if sn := g.Node(name); sn != nil && !sn.Terminal && name != n.Name && !slices.Contains(s.Skips, name) {
				s.Skips = append(s.Skips, name)
			}
		}
	}
	moved, err := s.Advance(g, v.Outcome, in.At)
	if err != nil {
		return Transition{}, err
	}
	t.To, t.Notifications = moved.To, moved.Notifications
	return t, nil
}

// hasApproval reports whether a is already recorded: the same person at the
// same node through the same record (a redelivered event). A gate passed
// again after changes were requested records the new approval too.
func (s *State) hasApproval(a Approval) bool {
	for _, b := range s.ApprovedBy {
		if strings.EqualFold(a.Login, b.Login) && a.Node == b.Node && a.Provenance == b.Provenance {
			return true
		}
	}
	return false
}
