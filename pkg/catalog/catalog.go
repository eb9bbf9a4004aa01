// Package catalog is the one definition of the-loop's catalog events: their
// names, what a channel may do with each, whether the ledger records it when it
// starts off the ledger, and who raises it (docs/requirements.md R1.1, R1.2;
// docs/configuration.md#catalog-event-types).
//
// It also builds the NATS subjects events travel on
// (docs/architecture.md#streams-and-state). Everything that prints or validates
// the catalog — `the-loop events --types`, `the-loop channels status`,
// docs/configuration.md, the config validator — reads it from here, so the
// outputs cannot drift apart (R1.5).
//
// catalog is pure: it does no I/O and imports nothing of this module.
package catalog

import "slices"

// Type is a catalog event type name, such as "work-item.reply". The name may
// contain dots; subjects keep them (docs/architecture.md#streams-and-state).
type Type string

// The seventeen catalog types (docs/configuration.md#catalog-event-types).
const (
	SessionAwaitingInput   Type = "session.awaiting_input"
	DecisionPending        Type = "decision-pending"
	PhaseApprovalPending   Type = "phase-approval-pending"
	PRReviewPending        Type = "pr-review-pending"
	SecuritySignOffPending Type = "security-sign-off-pending"
	ConflictEscalated      Type = "conflict-escalated"
	WorkItemComplete       Type = "work-item-complete"
	CommentHuman           Type = "comment.human"
	CommentAgent           Type = "comment.agent"
	WorkItemReply          Type = "work-item.reply"
	GateFeedback           Type = "gate.feedback"
	ControlCommand         Type = "control.command"
	WorkItemCreate         Type = "work-item.create"
	WorkItemActivity       Type = "work-item.activity"
	LedgerRecord           Type = "ledger.record"
	// GraphOverride is an operator's move of a work item's graph by hand
	// (`the-loop graph advance|skip|force|escalate`). Only the operator
	// identity raises it (docs/decisions/111-operator-escape-hatch.md).
	GraphOverride Type = "graph.override"
	// CriticFindings is what a critic — another harness the operator
	// configured — said of a node's artifact, or why it said nothing: a
	// session asks for the round (`the-loop critic run`), the dispatcher
	// runs it and raises this (docs/decisions/120-critics.md).
	CriticFindings Type = "critic.findings"
)

// RecordFailed is not a catalog type but a notice: the ledger-writer
// publishes it on loop.ev.<key>.ledger.record_failed (notification body,
// causation_id = the failed event's id, the failed event's conversation) when
// it could not record a channel-originated event, so the originating channel
// can tell the person (decision 017). Channels deliver it to the originating
// conversation whatever they subscribe to; it is never recorded.
const RecordFailed Type = "ledger.record_failed"

// GatePaused is a notice too: the dispatcher publishes it to the inbox, as
// loop.in.<key>.gate.paused (the ledger-writer passes it through unrecorded),
// when a gate answer relayed from a channel conversation reaches a work item
// whose session is paused. Such an answer is recorded on the ledger but
// settled without moving the graph (decision 023); the notice (notification
// body, causation_id = the answer's event id, the answer's conversation) tells
// the person who answered, in their conversation.
const GatePaused Type = "gate.paused"

// GateMoved is neither a catalog type nor a notice but a signal: the
// dispatcher publishes it to the inbox, as loop.in.<key>.gate.moved (the
// ledger-writer passes it through unrecorded), when a work item leaves a
// human gate. Its notification body names the gate, the visit that ended
// (gate_visit), the outcome and where the work item went; its actor is the
// person whose answer moved it. A channel that drew answer buttons for that
// visit edits that message so they are gone; nothing new is posted
// (docs/decisions/032-old-gate-messages-lose-their-buttons.md).
const GateMoved Type = "gate.moved"

// Alert is a notice too, but for people rather than a conversation: the
// dispatcher publishes it to the inbox, as loop.in.<key>.loop.alert (the
// ledger-writer passes it through unrecorded), when the loop itself needs a
// person — a session spawned, a dispatch that failed for good, a session
// found dead, an event dropped because its actor is not authorized. Its
// notification body says what happened; Detail["alert"] names the kind, one
// of the operator config's notifications.events. The Slack renderer posts it
// to the collaborators of the roles that kind names, whatever the channel
// subscribes to (docs/decisions/115-alerts-reactions-and-phase-labels.md).
const Alert Type = "loop.alert"

// The marks are the loop's own writes on GitHub about its work: a reaction on
// the comment (or issue) the loop acted on, the work item's loop:<phase>
// label, and the one comment announcing its first session. The dispatcher
// publishes them to the inbox (source loop, notification body); the
// ledger-writer — the only service that writes GitHub — applies them and
// fans nothing out (docs/decisions/115-alerts-reactions-and-phase-labels.md).
const (
	Reaction     Type = "ledger.reaction"
	PhaseLabel   Type = "ledger.phase"
	Announcement Type = "ledger.announce"
)

// IsMark reports whether t is one of the marks above.
func IsMark(t Type) bool { return t == Reaction || t == PhaseLabel || t == Announcement }

// IsNotice reports whether t is one of the notices above: not a catalog
// type, never recorded, and delivered by a channel to the conversation it
// names whatever the channel subscribes to.
func IsNotice(t Type) bool { return t == RecordFailed || t == GatePaused }

// Sources of the events that no chat channel raises (ce-source): the GitHub
// ingress, the loop's graph, an agent session (through the dispatcher's
// session endpoint) and an operator's CLI verb. Chat channels use their own
// name ("slack").
const (
	SourceGitHub  = "github"
	SourceLoop    = "loop"
	SourceSession = "session"
	SourceCLI     = "cli"
)

// Record says what the ledger does with an event that starts off the ledger.
type Record int

const (
	// RecordNone: the event is not written to the ledger (graph notifications).
	RecordNone Record = iota
	// RecordOriginatesOnLedger: the event is read off the ledger, so there is
	// nothing to record.
	RecordOriginatesOnLedger
	// RecordQuestion: the record is the question comment itself (R3.3).
	RecordQuestion
	// RecordMirror: the record is the-loop's own marker-stamped mirror (R3.4).
	RecordMirror
	// RecordAttributed: the record is an unmarked, attributed comment that the
	// ledger's own ingress then judges like a human's (R3.5).
	RecordAttributed
	// RecordIssue: the record is a new issue (R3.6).
	RecordIssue
	// RecordReadBack: the event is the ledger's read-back of its own record.
	RecordReadBack
	// RecordOperator: the record is a marker-stamped comment naming the
	// operator (and the person, when known), the move and its reason; the
	// dispatcher applies the recorded event itself, never a read-back.
	RecordOperator
	// RecordAnnouncement: the record is the loop's marker-stamped comment
	// saying how to attach to a work item's first session (the Announcement
	// mark; no catalog type has it).
	RecordAnnouncement
	// RecordFindings: the record is a marker-stamped comment naming the
	// critic, the artifact it reviewed and what it found.
	RecordFindings
)

// Recorded reports whether the ledger-writer writes something to GitHub for an
// event of this kind that arrives on the inbox.
func (r Record) Recorded() bool {
	switch r {
	case RecordQuestion, RecordMirror, RecordAttributed, RecordIssue, RecordOperator, RecordAnnouncement, RecordFindings:
		return true
	}
	return false
}

// String is the short column text printed by the catalog tables.
func (r Record) String() string {
	switch r {
	case RecordNone:
		return "no"
	case RecordOriginatesOnLedger:
		return "originates on the ledger"
	case RecordQuestion:
		return "yes: the question comment itself"
	case RecordMirror:
		return "yes: marker-stamped mirror"
	case RecordAttributed:
		return "yes: unmarked, attributed comment"
	case RecordIssue:
		return "yes: a new issue"
	case RecordReadBack:
		return "is the ledger's own read-back"
	case RecordOperator:
		return "yes: marker-stamped operator record"
	case RecordAnnouncement:
		return "yes: marker-stamped session announcement"
	case RecordFindings:
		return "yes: marker-stamped critic findings"
	}
	return "unknown"
}

// Entry is one catalog type and its flags (R1.1).
type Entry struct {
	Type        Type
	Description string
	// Subscribable: a channel may subscribe to it.
	Subscribable bool
	// Publishable: a message arriving on a channel may become it. Trusted
	// publishers (the loop, `ask`, ingress-github) are not constrained by this
	// flag (docs/requirements.md R1.1).
	Publishable bool
	// Record: what the ledger does when the event starts off the ledger.
	Record Record
	// RaisedBy names who puts the event on the bus.
	RaisedBy string
}

var entries = []Entry{
	{SessionAwaitingInput, "An agent session asks a question and waits for the answer.", true, false, RecordQuestion, "the-loop ask"},
	{DecisionPending, "The work item's graph waits for a human decision.", true, false, RecordNone, "the loop (graph)"},
	{PhaseApprovalPending, "A phase artifact waits for human approval.", true, false, RecordNone, "the loop (graph)"},
	{PRReviewPending, "A pull request waits for human review.", true, false, RecordNone, "the loop (graph)"},
	{SecuritySignOffPending, "A change waits for a named human's security sign-off.", true, false, RecordNone, "the loop (graph)"},
	{ConflictEscalated, "The loop could not resolve a conflict and hands it to a human.", true, false, RecordNone, "the loop (graph)"},
	{WorkItemComplete, "The work item's outer loop reached its complete node.", true, false, RecordNone, "the loop (graph)"},
	{CommentHuman, "A human's comment accepted on the ledger (authorized user or work-item collaborator).", true, false, RecordOriginatesOnLedger, "ingress-github"},
	{CommentAgent, "The agent's own marker-stamped comment on the ledger.", true, false, RecordOriginatesOnLedger, "ingress-github"},
	{WorkItemReply, "A reply from a channel, delivered as input to the work item's session.", true, true, RecordMirror, "a channel"},
	{GateFeedback, "A channel reply that answers a human gate through the ledger.", true, true, RecordAttributed, "a channel"},
	{ControlCommand, "A control keyword relayed from a channel through the ledger.", true, true, RecordAttributed, "a channel"},
	{WorkItemCreate, "A top-level channel message that starts a new work item.", true, true, RecordIssue, "a channel"},
	{WorkItemActivity, "Lifecycle, review and CI activity on a work item (opened, labeled, closed, merged, reviews, workflow_run, check_run, check_suite, status).", true, false, RecordOriginatesOnLedger, "ingress-github"},
	{LedgerRecord, "The ledger's read-back of a signed envelope comment by an authorized poster.", false, false, RecordReadBack, "ingress-github"},
	{GraphOverride, "An operator moves a work item's graph by hand (advance, skip, force, escalate), with the reason.", true, false, RecordOperator, "the-loop graph (operator only)"},
	{CriticFindings, "A critic harness's findings on a node's artifact, or why the round failed; delivered to the work item's session.", true, false, RecordFindings, "the-loop critic run (a session, through the dispatcher)"},
}

// All returns every catalog entry in catalog order. The slice is a copy.
func All() []Entry { return slices.Clone(entries) }

// Types returns every catalog type name in catalog order.
func Types() []Type {
	out := make([]Type, len(entries))
	for i, e := range entries {
		out[i] = e.Type
	}
	return out
}

// Lookup returns the entry for t and whether t is in the catalog.
func Lookup(t Type) (Entry, bool) {
	for _, e := range entries {
		if e.Type == t {
			return e, true
		}
	}
	return Entry{}, false
}

// Known reports whether t is a catalog type.
func Known(t Type) bool {
	_, ok := Lookup(t)
	return ok
}

// Subscribable reports whether a channel may subscribe to t.
func Subscribable(t Type) bool {
	e, ok := Lookup(t)
	return ok && e.Subscribable
}

// Publishable reports whether a channel message may become t.
func Publishable(t Type) bool {
	e, ok := Lookup(t)
	return ok && e.Publishable
}
