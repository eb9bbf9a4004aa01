// Package graph is the loop's process model: the graphs a work item walks
// (declared in YAML), the human gates that decide where it goes next, and the
// work item's state on the way (docs/requirements.md R4.4, R6.3, R6.4, K20,
// K11; decisions 014, 015 and 018).
//
// A Graph is a set of nodes. Each node has an actor (an agent works it, or a
// human decides it), a phase label, optionally the artifact it produces or
// approves, an optional notification to publish when it is entered, and edges
// keyed by outcome. A human node names the classifier that turns authorized
// comments into an outcome: Feedback (approved, approved-with-comments,
// changes-requested), Reply (done, more-work) or Execute (the execute keyword).
// Load validates a graph strictly; Builtin holds the graphs we ship
// ("work-item" and "adhoc", and the original's four loops, "pdlc-*":
// docs/decisions/112-the-originals-graphs.md), and a Registry adds an
// operator's graphs to them.
//
// A node may declare hooks (docs/decisions/113-node-hooks.md): entry hooks
// (notify, publish-artifact) and exit hooks (validate-artifacts and
// verify-tests on agent nodes, record-feedback on feedback gates), each one
// this package knows, with the parameters it takes. The checks that need no
// I/O are here (Hook.CheckArtifact against the embedded Schema,
// AppendFeedback); the dispatcher reads the files and runs the tests. Nodes
// may be skippable or opt-in: the execute gate's ping carries the Checklist,
// and the comment that passes it is read by SelectPhases into the skips
// frozen into the state (docs/decisions/114-phase-selection-checklist.md).
//
// State is a work item's position in its graph. It is JSON, stored by the
// dispatcher in the KV bucket "graph" and read by ingress-slack, which asks
// only State.AtHumanGate. State.Enter, State.Advance, State.Apply and
// State.Override (the operator's moves by hand, kept by event id:
// docs/decisions/111-operator-escape-hatch.md) move it and return the
// notifications to publish; entering a terminal node whose end is complete
// always yields work-item-complete, and one whose end is escalated
// conflict-escalated, whatever route led there.
// Context renders the read-only graph block of an agent prompt, and
// AddApproval writes an approval into an artifact's YAML front matter.
//
// The classifiers are a deterministic floor. They read only what a person
// wrote: RelayedText removes the ledger envelope, every other HTML comment and
// the attribution line a relayed record starts with before anything is
// matched, so the record's own wording cannot change a verdict (decision 014).
// The renderer's gate buttons inject ApproveText and RequestChangesText, which
// classify as approved and changes-requested; "Approve" alone does not.
//
// graph is pure: no I/O (it parses only the bytes it is given), no clock (every
// transition takes its time), no environment, no logging. From this module it
// imports only pkg/catalog, pkg/envelope (StripLedger, the self-authored
// marker) and pkg/control (the execute keyword is matched exactly as the
// control grammar matches it), all pure; it must not import pkg/bus, NATS,
// pkg/config, pkg/identity (authorization is a func the caller passes),
// services/…, or any GitHub or Slack client. Besides the standard library it
// uses only gopkg.in/yaml.v3.
package graph
