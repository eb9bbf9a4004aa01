package sessionapi

import (
	"context"
	"net/url"
)

// The agent's verbs beyond ask and complete (docs/agents.md): each is one
// request to the session endpoint, with the session's token, about the
// session's own work item.
const (
	// PathCheck answers whether the current node is complete (GET).
	PathCheck = "/v1/check"
	// PathGraph answers the work item's graph and where it stands (GET).
	PathGraph = "/v1/graph"
	// PathRegister records the harness's own conversation id (POST).
	PathRegister = "/v1/register"
	// PathLinkPR records a pull request as delivering the work item (POST).
	PathLinkPR = "/v1/link-pr"
	// PathInstructions answers the repository's instructions for the
	// current step (GET).
	PathInstructions = "/v1/instructions"
	// PathScenarios answers the repository's test scenarios (GET).
	PathScenarios = "/v1/scenarios"
)

// A node's verdict in a CheckReport.
const (
	// CheckOK: nothing at this node is left for the agent.
	CheckOK = "ok"
	// CheckBlock: the current node is the agent's and is not complete; the
	// agent can act on what Messages say. The only status a Stop hook
	// blocks on.
	CheckBlock = "block"
	// CheckWait: the work item waits on a person (a human gate, or a
	// question the session asked that nobody has answered yet).
	CheckWait = "wait"
	// CheckDone: the work item reached a terminal node.
	CheckDone = "done"
	// CheckSkipped: the node was passed over.
	CheckSkipped = "skipped"
)

// CheckReport is the answer of PathCheck and the JSON `the-loop check`
// prints.
type CheckReport struct {
	Ref   string `json:"ref"`
	Graph string `json:"graph"`
	// CurrentNode is where the work item stands.
	CurrentNode string `json:"currentNode"`
	Phase       string `json:"phase,omitempty"`
	// Status is the current node's verdict (CheckOK, CheckBlock, CheckWait,
	// CheckDone).
	Status string `json:"status"`
	// SpecDir is where the work item's artifacts live, relative to the
	// session's checkout (docs/specs/issue-N).
	SpecDir string `json:"specDir,omitempty"`
	// Messages say what keeps the current node from being complete.
	Messages []string `json:"messages,omitempty"`
	// Nodes are the nodes visited so far, oldest first, the current one
	// last; nodes not reached yet are not findings and are not listed.
	Nodes []NodeCheck `json:"nodes"`
}

// Blocking reports whether the current node keeps an agent from stopping.
func (r CheckReport) Blocking() bool { return r.Status == CheckBlock }

// NodeCheck is one visited node's verdict.
type NodeCheck struct {
	Node     string   `json:"node"`
	Phase    string   `json:"phase,omitempty"`
	Actor    string   `json:"actor"`
	Status   string   `json:"status"`
	Messages []string `json:"messages,omitempty"`
}

// GraphView is the answer of PathGraph: the graph the work item follows,
// node by node, and its state.
type GraphView struct {
	Ref         string      `json:"ref"`
	Graph       string      `json:"graph"`
	Description string      `json:"description,omitempty"`
	CurrentNode string      `json:"currentNode"`
	Status      string      `json:"status"`
	SpecDir     string      `json:"specDir,omitempty"`
	Nodes       []GraphNode `json:"nodes"`
	// State is the work item's state as the dispatcher keeps it.
	State any `json:"state,omitempty"`
}

// GraphNode is one node of a GraphView.
type GraphNode struct {
	Name     string            `json:"name"`
	Actor    string            `json:"actor"`
	Phase    string            `json:"phase,omitempty"`
	Artifact string            `json:"artifact,omitempty"`
	Gate     string            `json:"gate,omitempty"`
	Terminal bool              `json:"terminal,omitempty"`
	On       map[string]string `json:"on,omitempty"`
	Current  bool              `json:"current,omitempty"`
	// Skipped: the phase selection skipped the node for this work item.
	Skipped bool `json:"skipped,omitempty"`
	// Instructions are what the graph tells the agent working the node;
	// Checks what its exit hooks check before its done is accepted.
	Instructions string   `json:"instructions,omitempty"`
	Checks       []string `json:"checks,omitempty"`
}

// RegisterRequest records the conversation id the harness chose for
// itself (a harness that cannot be given one at spawn), so that a respawn
// resumes that conversation.
type RegisterRequest struct {
	// Ref, if set, must be the session's own work item.
	Ref              string `json:"ref,omitempty"`
	HarnessSessionID string `json:"harnessSessionId"`
}

// Registered answers PathRegister.
type Registered struct {
	Ref              string `json:"ref"`
	Harness          string `json:"harness"`
	HarnessSessionID string `json:"harnessSessionId"`
}

// LinkPRRequest records a pull request as delivering the session's work
// item, so that the pull request's events reach the work item's session.
type LinkPRRequest struct {
	// Ref, if set, must be the session's own work item.
	Ref string `json:"ref,omitempty"`
	// PullRequest is its number in the work item's repository (16 or #16)
	// or a ref in another repository (github:owner/other#16).
	PullRequest string `json:"pullRequest"`
}

// LinkedPR answers PathLinkPR.
type LinkedPR struct {
	Ref         string `json:"ref"`
	PullRequest string `json:"pullRequest"`
	// Already: the link was recorded before; nothing changed.
	Already bool `json:"already,omitempty"`
}

// Instructions answers PathInstructions: the instruction documents the
// repository registers, and the current step's own, each with its state
// and, when present, its text.
type Instructions struct {
	Ref   string            `json:"ref"`
	Node  string            `json:"node,omitempty"`
	Phase string            `json:"phase,omitempty"`
	Docs  []InstructionDoc  `json:"docs"`
	Notes map[string]string `json:"notes,omitempty"`
}

// The states of an InstructionDoc.
const (
	DocPresent    = "present"
	DocMissing    = "missing"
	DocUnreadable = "unreadable"
	DocInvalid    = "invalid"
)

// InstructionDoc is one instruction document.
type InstructionDoc struct {
	// Path is repository-relative.
	Path  string `json:"path"`
	Notes string `json:"notes,omitempty"`
	// Step: the document is the current step's own.
	Step  bool   `json:"step,omitempty"`
	State string `json:"state"`
	Bytes int    `json:"bytes,omitempty"`
	Text  string `json:"text,omitempty"`
}

// Scenarios answers PathScenarios: the Gherkin scenarios the repository's
// tests declare.
type Scenarios struct {
	Ref       string     `json:"ref"`
	Globs     []string   `json:"globs"`
	Scenarios []Scenario `json:"scenarios"`
	// Truncated: the scan stopped at its file or size bound.
	Truncated bool `json:"truncated,omitempty"`
}

// Scenario is one scenario and where it is declared.
type Scenario struct {
	Feature     string   `json:"feature,omitempty"`
	Scenario    string   `json:"scenario"`
	Steps       []string `json:"steps,omitempty"`
	Requirement string   `json:"requirement,omitempty"`
	File        string   `json:"file"`
	Line        int      `json:"line"`
}

// Check asks whether the session's current node is complete.
func (c Client) Check(ctx context.Context) (CheckReport, error) {
	var r CheckReport
	err := c.get(ctx, PathCheck, nil, &r)
	return r, err
}

// Graph asks for the session's graph and its state.
func (c Client) Graph(ctx context.Context) (GraphView, error) {
	var v GraphView
	err := c.get(ctx, PathGraph, nil, &v)
	return v, err
}

// Register records the harness's own conversation id.
func (c Client) Register(ctx context.Context, ref, harnessSessionID string) (Registered, error) {
	var r Registered
	err := c.call(ctx, PathRegister, RegisterRequest{Ref: ref, HarnessSessionID: harnessSessionID}, &r)
	return r, err
}

// LinkPR records pr as delivering the session's work item.
func (c Client) LinkPR(ctx context.Context, ref, pr string) (LinkedPR, error) {
	var l LinkedPR
	err := c.call(ctx, PathLinkPR, LinkPRRequest{Ref: ref, PullRequest: pr}, &l)
	return l, err
}

// Instructions asks for the repository's instructions for the current
// step.
func (c Client) Instructions(ctx context.Context) (Instructions, error) {
	var in Instructions
	err := c.get(ctx, PathInstructions, nil, &in)
	return in, err
}

// Scenarios asks for the repository's test scenarios; globs, when given,
// replace the repository's own.
func (c Client) Scenarios(ctx context.Context, globs []string) (Scenarios, error) {
	var s Scenarios
	q := url.Values{}
	for _, g := range globs {
		q.Add("glob", g)
	}
	err := c.get(ctx, PathScenarios, q, &s)
	return s, err
}

// WorkItem is the work item a request names ("": the session's own).
func (r AskRequest) WorkItem() string { return r.Ref }

// WorkItem is the work item a request names ("": the session's own).
func (r CompleteRequest) WorkItem() string { return r.Ref }

// WorkItem is the work item a request names ("": the session's own).
func (r RegisterRequest) WorkItem() string { return r.Ref }

// WorkItem is the work item a request names ("": the session's own).
func (r LinkPRRequest) WorkItem() string { return r.Ref }

// Critic rounds (docs/decisions/120-critics.md): a session asks for one
// round of a critic the operator configured on a node's artifact; the
// dispatcher runs it in the session's checkout and records what it said.
const (
	// PathCritics answers the configured critics (GET).
	PathCritics = "/v1/critics"
	// PathCriticRun runs one critic round (POST).
	PathCriticRun = "/v1/critics/run"
)

// Critic is one configured critic, as PathCritics lists it.
type Critic struct {
	Name    string `json:"name"`
	Harness string `json:"harness,omitempty"`
	Model   string `json:"model,omitempty"`
	// Command is the executable the critic runs.
	Command string `json:"command"`
	// Available: Command is found on the session's PATH (or is an
	// executable file at its absolute path).
	Available bool     `json:"available"`
	Enabled   bool     `json:"enabled"`
	Timeout   Duration `json:"timeout"`
}

// Critics answers PathCritics.
type Critics struct {
	Ref     string   `json:"ref"`
	Critics []Critic `json:"critics"`
	// RepoCritics are critics the repository's own harness configuration
	// names (reviews.critics): never run, critics being the operator's.
	RepoCritics []string `json:"repoCritics,omitempty"`
}

// CriticRunRequest asks for one round. It names the critic and, at most,
// the node whose artifact is reviewed and the reviewer's brief: never a
// command, an argument or a directory, which come from the operator's
// configuration and the session's checkout.
type CriticRunRequest struct {
	// Ref, if set, must be the session's own work item.
	Ref    string `json:"ref,omitempty"`
	Critic string `json:"critic"`
	// Node is the node whose artifact is reviewed; a node without one
	// has the checkout reviewed (default: the current node's artifact once
	// written, else the last one written along the way).
	Node string `json:"node,omitempty"`
	// Brief is what the agent asks the critic to look at, put in the
	// prompt as text.
	Brief string `json:"brief,omitempty"`
	// Wait is how long to wait for the round and its record.
	Wait Duration `json:"wait,omitempty"`
}

// WorkItem is the work item a request names ("": the session's own).
func (r CriticRunRequest) WorkItem() string { return r.Ref }

// Outcomes of a critic round.
const (
	CriticOK       = "ok"
	CriticFailed   = "failed"
	CriticTimedOut = "timed out"
)

// CriticRound answers PathCriticRun: the round, and once it ended, how and
// what the critic said.
type CriticRound struct {
	ID     string `json:"id"`
	Ref    string `json:"ref"`
	Critic string `json:"critic"`
	Node   string `json:"node,omitempty"`
	// Artifact is the reviewed artifact, relative to the checkout.
	Artifact string `json:"artifact,omitempty"`
	// Running: the wait ended before the round did; its findings are
	// recorded on the work item and reach the session as a new prompt.
	Running bool `json:"running,omitempty"`
	// Outcome is CriticOK, CriticFailed or CriticTimedOut once it ended.
	Outcome  string   `json:"outcome,omitempty"`
	ExitCode int      `json:"exitCode,omitempty"`
	Duration Duration `json:"duration,omitempty"`
	// Error says why a round that did not succeed failed.
	Error string `json:"error,omitempty"`
	// Findings are what the critic printed (scrubbed, bounded).
	Findings string `json:"findings,omitempty"`
	// URL is the findings' comment on the work item, once recorded.
	URL string `json:"url,omitempty"`
	// Pending: the round ended but its record was not confirmed in the
	// wait; it is on the bus and will be recorded.
	Pending bool `json:"pending,omitempty"`
}

// Critics asks for the configured critics.
func (c Client) Critics(ctx context.Context) (Critics, error) {
	var cs Critics
	err := c.get(ctx, PathCritics, nil, &cs)
	return cs, err
}

// CriticRun runs one critic round and waits up to wait for its end.
func (c Client) CriticRun(ctx context.Context, req CriticRunRequest) (CriticRound, error) {
	var r CriticRound
	err := c.call(ctx, PathCriticRun, req, &r)
	return r, err
}
