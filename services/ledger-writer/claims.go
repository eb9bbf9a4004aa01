package ledgerwriter

import (
	"fmt"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/identity"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// The writer signs only what the event's publisher may claim. NATS
// permissions let each service publish to loop.in only the subjects of the
// types it raises (pkg/bus InboxTypes); the writer checks that the event
// inside says the same thing as its subject, and that its source is one that
// raises its type, so a publisher allowed one type cannot smuggle another in
// its headers, and a session's question can never carry a person
// (docs/architecture.md, trust boundaries).

// claimReason is the failure reason of an event its publisher may not claim.
const claimReason = "unclaimable"

// mayClaim returns why ev, delivered on subject, is not what its publisher
// may raise; nil when it is.
func mayClaim(ev *loopv1.Event, subject string) error {
	_, _, _, typ, ok := catalog.ParseSubject(subject, true)
	if !ok || string(typ) != ev.GetType() {
		return fmt.Errorf("event %s says type %q on subject %s", ev.GetId(), ev.GetType(), subject)
	}
	src := ev.GetSource()
	chat := identity.KnownChannel(identity.Channel(src)) && identity.Channel(src) != identity.ChannelGitHub
	var allowed bool
	switch typ {
	case catalog.CommentHuman, catalog.CommentAgent, catalog.WorkItemActivity, catalog.LedgerRecord:
		allowed = src == catalog.SourceGitHub
	case catalog.WorkItemReply:
		// A chat member's reply, or an operator's `the-loop standing say`
		// (docs/decisions/118-standing-sessions-keep-a-ledger-issue.md).
		allowed = chat || src == catalog.SourceCLI
	case catalog.GateFeedback, catalog.WorkItemCreate:
		allowed = chat
	case catalog.ControlCommand:
		// A chat member's keyword, or an operator's `the-loop sessions`.
		allowed = chat || src == catalog.SourceCLI
	case catalog.SessionAwaitingInput, catalog.CriticFindings:
		// The dispatcher raises both for a session, as the session.
		allowed = src == catalog.SourceSession
	case catalog.GraphOverride:
		// The operator's `the-loop graph advance|skip|force|escalate`
		// only: the bus lets no service identity publish it, and no
		// session or channel may claim it
		// (docs/decisions/111-operator-escape-hatch.md).
		allowed = src == catalog.SourceCLI
	default:
		// The graph's notifications and the dispatcher's signals.
		allowed = src == catalog.SourceLoop
	}
	if !allowed {
		return fmt.Errorf("event %s of type %s has source %q, which does not raise it", ev.GetId(), typ, src)
	}
	if src == catalog.SourceSession && (ev.GetActor().GetGithub() != "" || ev.GetActor().GetSlack() != "") {
		return fmt.Errorf("event %s from an agent session names a person as its actor", ev.GetId())
	}
	return nil
}
