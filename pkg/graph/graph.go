package graph

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/catalog"
)

// Actor says who works a node.
type Actor string

// The two actors.
const (
	// Agent: an agent session works the node; it leaves by OutcomeDone (the
	// session runs `the-loop graph complete REF`) or OutcomeEscalate.
	Agent Actor = "agent"
	// Human: the node is a gate; its Classifier turns authorized comments
	// into an outcome.
	Human Actor = "human"
)

// Classifier names the deterministic rule a human gate decides with.
type Classifier string

// The three classifiers (docs/requirements.md K20).
const (
	// Feedback: approved / approved-with-comments / changes-requested / wait.
	Feedback Classifier = "feedback"
	// Reply: done / more-work / wait, on the newest authorized comment.
	Reply Classifier = "reply"
	// Execute: execute once an authorized comment carries the execute
	// keyword; wait until then.
	Execute Classifier = "execute"
)

// Outcomes returns the outcomes c can decide, in a fixed order. OutcomeWait
// is not among them: waiting is not an edge.
func (c Classifier) Outcomes() []Outcome {
	switch c {
	case Feedback:
		return []Outcome{OutcomeApproved, OutcomeApprovedWithComments, OutcomeChangesRequested}
	case Reply:
		return []Outcome{OutcomeDone, OutcomeMoreWork}
	case Execute:
		return []Outcome{OutcomeExecute}
	}
	return nil
}

// Valid reports whether c is one of the three classifiers.
func (c Classifier) Valid() bool { return c.Outcomes() != nil }

// Outcome is how a node was left; a node's edges are keyed by it.
type Outcome string

// Every outcome a node can be left by, plus OutcomeWait.
const (
	// OutcomeWait: the gate is not decided; the work item stays where it is.
	// It never names an edge.
	OutcomeWait                 Outcome = "wait"
	OutcomeApproved             Outcome = "approved"
	OutcomeApprovedWithComments Outcome = "approved-with-comments"
	OutcomeChangesRequested     Outcome = "changes-requested"
	// OutcomeDone leaves an agent node (its work is done) or a Reply gate
	// (the person is done).
	OutcomeDone     Outcome = "done"
	OutcomeMoreWork Outcome = "more-work"
	OutcomeExecute  Outcome = "execute"
	// OutcomeEscalate is never classified from a comment: the runtime (or an
	// operator) escalates. Any non-terminal node may declare the edge.
	OutcomeEscalate Outcome = "escalate"
)

// AgentOutcomes are the outcomes an agent node may declare edges for.
func AgentOutcomes() []Outcome { return []Outcome{OutcomeDone, OutcomeEscalate} }

// End is what reaching a terminal node means for the work item.
type End string

// The two ends.
const (
	EndComplete  End = "complete"
	EndEscalated End = "escalated"
)

// Node names with a meaning of their own. A terminal node with one of these
// names ends the work item that way without saying `end:`.
const (
	NodeComplete  = "complete"
	NodeEscalated = "escalated"
)

// Graph is a validated process graph. Treat it as read-only.
type Graph struct {
	Name        string
	Description string
	Start       string
	// Nodes in declaration order.
	Nodes []*Node
	// SkipSets name groups of skippable nodes a phase selection may skip
	// with one token ("spec-chain").
	SkipSets map[string][]string
	byName   map[string]*Node
}

// Node is one node of a Graph.
type Node struct {
	Name  string
	Actor Actor
	// Phase labels the node for people and prompts ("requirements").
	Phase string
	// Artifact is the name or path pattern of the artifact the node produces
	// or approves; alternatives are separated by '|' ("requirements.md|bugfix.md").
	Artifact string
	// Notify is the event published on entry: a catalog notification type or
	// a custom name (R2.4). Empty: nothing is published (but see End).
	Notify catalog.Type
	// Gate is the classifier of a non-terminal human node.
	Gate     Classifier
	Terminal bool
	// End is set on terminal nodes only.
	End End
	// On maps each outcome to the node it leads to.
	On map[Outcome]string
	// Skippable: a person may declare the node skipped at the phase
	// selection (its Execute gate's checklist). OptIn: the node is skipped
	// unless a person ticks it there; it is skippable too.
	Skippable bool
	OptIn     bool
	// Description is one line for people (the phase checklist shows it).
	Description string
	// Instructions are told to the agent working the node, in its graph
	// context block.
	Instructions string
	// Entry hooks run when the node is entered (notify, publish-artifact);
	// Exit hooks when it is left: an agent node's are checked before its
	// done is accepted (validate-artifacts, verify-tests), a feedback gate's
	// record what decided it (record-feedback).
	Entry []Hook
	Exit  []Hook
	// Publish is the artifact the node's notifications carry an excerpt
	// of: its publish-artifact hook's, else Artifact.
	Publish string
}

// Node returns the node called name, or nil.
func (g *Graph) Node(name string) *Node {
	if g == nil {
		return nil
	}
	return g.byName[name]
}

// Artifacts returns the alternatives of n's artifact pattern, in order; nil
// when the node names no artifact.
func (n *Node) Artifacts() []string {
	if n == nil || n.Artifact == "" {
		return nil
	}
	return strings.Split(n.Artifact, "|")
}

// IsGate reports whether n is a human gate: actor human and not terminal
// (docs/requirements.md R6.3).
func (n *Node) IsGate() bool { return n != nil && n.Actor == Human && !n.Terminal }

// graphNotifications are the catalog types the graph raises
// (docs/configuration.md#catalog-event-types).
var graphNotifications = []catalog.Type{
	catalog.DecisionPending, catalog.PhaseApprovalPending, catalog.PRReviewPending,
	catalog.SecuritySignOffPending, catalog.ConflictEscalated, catalog.WorkItemComplete,
}

// IsNotification reports whether t is one of the six catalog types a graph
// hook raises.
func IsNotification(t catalog.Type) bool { return slices.Contains(graphNotifications, t) }

// CustomNotifications returns the notify names of g that are not in the
// catalog, sorted and without repeats. They are allowed (R2.4); the caller
// warns about them.
func (g *Graph) CustomNotifications() []catalog.Type {
	var out []catalog.Type
	for _, n := range g.Nodes {
		if n.Notify != "" && !catalog.Known(n.Notify) && !slices.Contains(out, n.Notify) {
			out = append(out, n.Notify)
		}
	}
	slices.Sort(out)
	return out
}

// ErrInvalid wraps every validation error Load returns.
var ErrInvalid = errors.New("invalid graph")

// MaxGraphBytes bounds what Load reads.
const MaxGraphBytes = 256 << 10

// The YAML schema. Unknown keys are refused.
type graphYAML struct {
	Name        string              `yaml:"name"`
	Description string              `yaml:"description"`
	Start       string              `yaml:"start"`
	SkipSets    map[string][]string `yaml:"skip-sets"`
	Nodes       map[string]nodeYAML `yaml:"nodes"`
}

type nodeYAML struct {
	Actor    string            `yaml:"actor"`
	Phase    string            `yaml:"phase"`
	Artifact string            `yaml:"artifact"`
	Notify   string            `yaml:"notify"`
	Gate     string            `yaml:"gate"`
	Terminal bool              `yaml:"terminal"`
	End      string            `yaml:"end"`
	On       map[string]string `yaml:"on"`

	Skippable    bool       `yaml:"skippable"`
	OptIn        bool       `yaml:"opt-in"`
	Description  string     `yaml:"description"`
	Instructions string     `yaml:"instructions"`
	Entry        []hookYAML `yaml:"entry"`
	Exit         []hookYAML `yaml:"exit"`
}

var (
	nameRE   = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	notifyRE = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)
)

// Load parses and validates one graph. Every problem is reported, each
// naming the graph, node and key; the error wraps ErrInvalid.
func Load(data []byte) (*Graph, error) {
	if len(data) > MaxGraphBytes {
		return nil, fmt.Errorf("%w: %d bytes is over the %d-byte limit", ErrInvalid, len(data), MaxGraphBytes)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty document", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: a graph file holds exactly one YAML document", ErrInvalid)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%w: a graph is a YAML mapping (name, description, start, nodes)", ErrInvalid)
	}
	top := doc.Content[0]
	order, errs := checkKeys(top)
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	var raw graphYAML
	if err := top.Decode(&raw); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	return build(raw, order)
}

var (
	graphKeys = []string{"name", "description", "start", "skip-sets", "nodes"}
	nodeKeys  = []string{"actor", "phase", "artifact", "notify", "gate", "terminal", "end", "on",
		"skippable", "opt-in", "description", "instructions", "entry", "exit"}
)

// checkKeys refuses unknown keys, naming the node they are in, and returns
// the node names in declaration order.
func checkKeys(top *yaml.Node) (order []string, errs []error) {
	name := ""
	for i := 0; i+1 < len(top.Content); i += 2 {
		if k, v := top.Content[i], top.Content[i+1]; k.Value == "name" && v.Kind == yaml.ScalarNode {
			name = v.Value
		}
	}
	where := "graph"
	if name != "" {
		where = fmt.Sprintf("graph %q", name)
	}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if !slices.Contains(graphKeys, k.Value) {
			errs = append(errs, fmt.Errorf("%s: line %d: unknown key %q (known: %s)", where, k.Line, k.Value, strings.Join(graphKeys, ", ")))
			continue
		}
		if k.Value != "nodes" || v.Kind != yaml.MappingNode {
			continue
		}
		for j := 0; j+1 < len(v.Content); j += 2 {
			nk, nv := v.Content[j], v.Content[j+1]
			order = append(order, nk.Value)
			if nv.Kind != yaml.MappingNode {
				continue
			}
			for m := 0; m+1 < len(nv.Content); m += 2 {
				if key := nv.Content[m]; !slices.Contains(nodeKeys, key.Value) {
					errs = append(errs, fmt.Errorf("%s: node %q: line %d: unknown key %q (known: %s)", where, nk.Value, key.Line, key.Value, strings.Join(nodeKeys, ", ")))
				}
			}
		}
	}
	return order, errs
}

func build(raw graphYAML, order []string) (*Graph, error) {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf(format, a...))
	}
	g := &Graph{Name: raw.Name, Description: strings.TrimSpace(raw.Description), Start: raw.Start, byName: map[string]*Node{}}
	where := fmt.Sprintf("graph %q", raw.Name)
	switch {
	case raw.Name == "":
		where = "graph"
		bad("graph: name is missing")
	case !nameRE.MatchString(raw.Name):
		bad("%s: name must match %s", where, nameRE)
	}
	if len(raw.Nodes) == 0 {
		bad("%s: nodes is missing or empty", where)
	}
	if len(order) != len(raw.Nodes) {
		// Cannot happen for a document that decoded; keep a stable order anyway.
		order = order[:0]
		for name := range raw.Nodes {
			order = append(order, name)
		}
		slices.Sort(order)
	}
	for _, name := range order {
		rn := raw.Nodes[name]
		n := &Node{
			Name: name, Actor: Actor(rn.Actor), Phase: rn.Phase, Artifact: rn.Artifact,
			Notify: catalog.Type(rn.Notify), Gate: Classifier(rn.Gate), Terminal: rn.Terminal,
			End: End(rn.End), On: map[Outcome]string{},
			Skippable: rn.Skippable || rn.OptIn, OptIn: rn.OptIn,
			Description: strings.Join(strings.Fields(rn.Description), " "), Instructions: strings.TrimSpace(rn.Instructions),
		}
		for o, to := range rn.On {
			n.On[Outcome(o)] = to
		}
		g.Nodes = append(g.Nodes, n)
		g.byName[name] = n
	}
	for _, n := range g.Nodes {
		errs = append(errs, checkNode(where, g, n, raw.Nodes[n.Name])...)
	}
	errs = append(errs, checkSkipSets(where, g, raw.SkipSets)...)
	switch {
	case raw.Start == "":
		bad("%s: start is missing", where)
	case g.byName[raw.Start] == nil:
		bad("%s: start names unknown node %q", where, raw.Start)
	case g.byName[raw.Start].Terminal:
		bad("%s: start node %q is terminal", where, raw.Start)
	}
	if len(errs) == 0 {
		errs = append(errs, checkReach(where, g)...)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, errors.Join(errs...))
	}
	return g, nil
}

// checkNode returns n's problems; it fills in the end of a terminal node
// named complete or escalated.
func checkNode(where string, g *Graph, n *Node, rn nodeYAML) []error {
	e := &nodeErrs{at: fmt.Sprintf("%s: node %q", where, n.Name)}
	e.checkHooks(n, rn)
	e.checkFields(n)
	if n.Terminal {
		e.checkTerminal(n)
	} else {
		e.checkEdges(g, n)
	}
	return e.errs
}

// nodeErrs collects one node's problems, each prefixed with where it is.
type nodeErrs struct {
	at   string
	errs []error
}

func (e *nodeErrs) bad(format string, a ...any) {
	e.errs = append(e.errs, fmt.Errorf(e.at+": "+format, a...))
}

// checkFields checks what every node has: its name, actor, notification
// and artifacts.
func (e *nodeErrs) checkFields(n *Node) {
	if !nameRE.MatchString(n.Name) {
		e.bad("name must match %s", nameRE)
	}
	switch n.Actor {
	case Agent, Human:
	case "":
		e.bad("actor is missing (agent or human)")
	default:
		e.bad("actor %q is neither agent nor human", n.Actor)
	}
	if n.Notify != "" {
		switch {
		case !notifyRE.MatchString(string(n.Notify)):
			e.bad("notify %q must match %s", n.Notify, notifyRE)
		case catalog.Known(n.Notify) && !IsNotification(n.Notify):
			e.bad("notify %q is a catalog type the graph does not raise (one of %s)", n.Notify, joinTypes(graphNotifications))
		}
	}
	if n.Artifact != "" {
		for _, a := range n.Artifacts() {
			switch {
			case strings.TrimSpace(a) != a || a == "":
				e.bad("artifact %q has an empty or space-padded alternative", n.Artifact)
			case strings.HasPrefix(a, "/") || slices.Contains(strings.Split(a, "/"), ".."):
				e.bad("artifact %q must be a relative path inside the work item's spec directory", n.Artifact)
			}
		}
	}
}

// checkHooks reads n's entry and exit hooks and checks each is one the-loop
// runs, where it may run, with the parameters it takes; a notify hook sets
// the node's notification and a publish-artifact hook what it carries.
func (e *nodeErrs) checkHooks(n *Node, rn nodeYAML) {
	n.Publish = n.Artifact
	for _, h := range rn.Entry {
		hk, ok := e.parseHook(n, "entry", h)
		if !ok {
			continue
		}
		switch hk.Name {
		case HookNotify:
			if n.Notify != "" && n.Notify != hk.Event {
				e.bad("entry: hook notify says %s and notify says %s; a node raises one notification", hk.Event, n.Notify)
				continue
			}
			n.Notify = hk.Event
		case HookPublishArtifact:
			n.Publish = hk.Artifact
		}
		n.Entry = append(n.Entry, hk)
	}
	for _, h := range rn.Exit {
		hk, ok := e.parseHook(n, "exit", h)
		if !ok {
			continue
		}
		switch {
		case n.Terminal:
			e.bad("exit: a terminal node is never left; hook %s would never run", hk.Name)
			continue
		case hk.Name == HookRecordFeedback && (n.Actor != Human || n.Gate != Feedback):
			e.bad("exit: record-feedback records a feedback gate's comments; this node is no feedback gate")
			continue
		case hk.Name != HookRecordFeedback && n.Actor != Agent:
			e.bad("exit: %s checks an agent's work before its done is accepted; this node is no agent node", hk.Name)
			continue
		}
		n.Exit = append(n.Exit, hk)
	}
	switch {
	case n.Skippable && n.Terminal:
		e.bad("a terminal node cannot be skippable or opt-in")
	case n.Skippable && n.Gate == Execute:
		e.bad("the phase selection (an execute gate) cannot be skippable or opt-in: nothing may route around the act of choosing")
	}
}

// checkSkipSets checks that each skip set names skippable nodes that are
// not opt-in (declaring away a phase that is off already says nothing), and
// that no set is called like a node.
func checkSkipSets(where string, g *Graph, sets map[string][]string) []error {
	var errs []error
	names := make([]string, 0, len(sets))
	for name := range sets {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		members := sets[name]
		switch {
		case !nameRE.MatchString(name):
			errs = append(errs, fmt.Errorf("%s: skip-sets: %q must match %s", where, name, nameRE))
		case g.byName[name] != nil:
			errs = append(errs, fmt.Errorf("%s: skip-sets: %q is also a node's name", where, name))
		case len(members) == 0:
			errs = append(errs, fmt.Errorf("%s: skip-sets: %q is empty", where, name))
		}
		for _, m := range members {
			n := g.byName[m]
			switch {
			case n == nil:
				errs = append(errs, fmt.Errorf("%s: skip-sets: %q names unknown node %q", where, name, m))
			case !n.Skippable:
				errs = append(errs, fmt.Errorf("%s: skip-sets: %q names %q, which is not skippable", where, name, m))
			case n.OptIn:
				errs = append(errs, fmt.Errorf("%s: skip-sets: %q names %q, which is opt-in (off unless ticked) already", where, name, m))
			}
		}
	}
	if len(errs) == 0 && len(sets) > 0 {
		g.SkipSets = map[string][]string{}
		for name, members := range sets {
			g.SkipSets[name] = slices.Clone(members)
		}
	}
	return errs
}

// checkTerminal checks a terminal node: no edges, no gate, and an end that
// agrees with its name.
func (e *nodeErrs) checkTerminal(n *Node) {
	if len(n.On) > 0 {
		e.bad("terminal node has edges (on: %s)", joinOutcomes(sortedOutcomes(n.On)))
	}
	if n.Gate != "" {
		e.bad("terminal node has a gate classifier %q; nothing would run it", n.Gate)
	}
	switch {
	case n.End == "" && n.Name == NodeComplete:
		n.End = EndComplete
	case n.End == "" && n.Name == NodeEscalated:
		n.End = EndEscalated
	case n.End == "":
		e.bad("terminal node needs end: complete or end: escalated")
	case n.End != EndComplete && n.End != EndEscalated:
		e.bad("end %q is neither complete nor escalated", n.End)
	case n.Name == NodeComplete && n.End != EndComplete, n.Name == NodeEscalated && n.End != EndEscalated:
		e.bad("end %q contradicts the node's name", n.End)
	}
}

// checkEdges checks a working node: its gate, and that its edges are the
// outcomes its kind can have and lead to nodes of the graph.
func (e *nodeErrs) checkEdges(g *Graph, n *Node) {
	if n.End != "" {
		e.bad("end is only for terminal nodes")
	}
	if n.Name == NodeComplete || n.Name == NodeEscalated {
		e.bad("a node called %q must be terminal: true", n.Name)
	}
	var allowed []Outcome
	switch n.Actor {
	case Agent:
		if n.Gate != "" {
			e.bad("gate %q on an agent node; only human nodes have classifiers", n.Gate)
		}
		allowed = AgentOutcomes()
		if _, ok := n.On[OutcomeDone]; !ok {
			e.bad("agent node has no edge for outcome done")
		}
	case Human:
		switch {
		case n.Gate == "":
			e.bad("human node has no gate classifier (feedback, reply or execute)")
		case !n.Gate.Valid():
			e.bad("gate %q is not a classifier (feedback, reply or execute)", n.Gate)
		default:
			allowed = append(n.Gate.Outcomes(), OutcomeEscalate)
			for _, o := range n.Gate.Outcomes() {
				if _, ok := n.On[o]; !ok {
					e.bad("gate %s has no edge for outcome %s", n.Gate, o)
				}
			}
		}
	}
	for _, o := range sortedOutcomes(n.On) {
		to := n.On[o]
		switch {
		case o == OutcomeWait:
			e.bad("on: wait is not an outcome; a waiting gate stays where it is")
		case allowed != nil && !slices.Contains(allowed, o):
			e.bad("on: outcome %q is not one a %s node can have (%s)", o, kindOf(n), joinOutcomes(allowed))
		}
		switch {
		case to == "":
			e.bad("on.%s: edge to nowhere (empty target)", o)
		case g.byName[to] == nil:
			e.bad("on.%s: edge to nowhere (no node %q)", o, to)
		}
	}
}

func kindOf(n *Node) string {
	if n.Actor == Human && n.Gate.Valid() {
		return "human " + string(n.Gate)
	}
	return string(n.Actor)
}

// checkReach refuses nodes the start cannot reach and non-terminal nodes
// from which no terminal node can be reached.
func checkReach(where string, g *Graph) []error {
	seen := map[string]bool{g.Start: true}
	queue := []string{g.Start}
	for len(queue) > 0 {
		n := g.byName[queue[0]]
		queue = queue[1:]
		for _, o := range sortedOutcomes(n.On) {
			if to := n.On[o]; !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	// Reverse reachability from the terminal nodes.
	into := map[string][]string{}
	ends := map[string]bool{}
	var back []string
	for _, n := range g.Nodes {
		for _, to := range n.On {
			into[to] = append(into[to], n.Name)
		}
		if n.Terminal {
			ends[n.Name] = true
			back = append(back, n.Name)
		}
	}
	for len(back) > 0 {
		name := back[0]
		back = back[1:]
		for _, from := range into[name] {
			if !ends[from] {
				ends[from] = true
				back = append(back, from)
			}
		}
	}
	var errs []error
	for _, n := range g.Nodes {
		switch {
		case !seen[n.Name]:
			errs = append(errs, fmt.Errorf("%s: node %q is unreachable from start %q", where, n.Name, g.Start))
		case !ends[n.Name]:
			errs = append(errs, fmt.Errorf("%s: node %q can reach no terminal node", where, n.Name))
		}
	}
	return errs
}

// outcomeOrder fixes the order outcomes are printed and walked in.
var outcomeOrder = []Outcome{
	OutcomeDone, OutcomeExecute, OutcomeApproved, OutcomeApprovedWithComments,
	OutcomeChangesRequested, OutcomeMoreWork, OutcomeEscalate,
}

func sortedOutcomes(m map[Outcome]string) []Outcome {
	out := make([]Outcome, 0, len(m))
	for o := range m {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b Outcome) int {
		ia, ib := slices.Index(outcomeOrder, a), slices.Index(outcomeOrder, b)
		if ia < 0 {
			ia = len(outcomeOrder)
		}
		if ib < 0 {
			ib = len(outcomeOrder)
		}
		if ia != ib {
			return ia - ib
		}
		return strings.Compare(string(a), string(b))
	})
	return out
}

func joinOutcomes(os []Outcome) string {
	s := make([]string, len(os))
	for i, o := range os {
		s[i] = string(o)
	}
	return strings.Join(s, ", ")
}

func joinTypes(ts []catalog.Type) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = string(t)
	}
	return strings.Join(s, ", ")
}
