package slackrenderer

import (
	"fmt"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// SourceSlack is the CloudEvents source of events raised on Slack.
const SourceSlack = "slack"

// Skip reasons: why an event is acknowledged without a message. They label
// the skipped metric and the debug log.
const (
	skipDisabled       = "disabled"
	skipNoChannel      = "no-channel"
	skipOrigin         = "origin-channel"
	skipEcho           = "ledger-echo"
	skipUnsubscribable = "unsubscribable"
	skipNotSubscribed  = "not-subscribed"
	skipOtherConv      = "other-conversation"
)

// plan is where an event goes in the channel.
type plan struct {
	// thread is the thread to reply in when the event fixes it (the
	// originating conversation); "" means the work item's thread, found by
	// its binding or started by this message.
	thread string
	// bindRef is the work-item ref the thread is bound to after posting.
	bindRef string
	// answer marks the replies to a person's own action (kickoff, the
	// notices), delivered whatever the subscriptions.
	answer bool
	// mention are the Slack members an alert names (alerts.go).
	mention []string
}

// route decides whether the Slack channel cfg gets ev, and where. It returns
// a skip reason when it does not. The order matters and is the rule:
//
//  1. a channel that is off or has no id gets nothing;
//  2. a notice for a conversation of this channel — the ledger's record
//     failed (decision 017), the dispatcher's gate not moved because the
//     session is paused (decision 023) — is answered in that conversation,
//     whatever the subscriptions;
//  3. the kickoff — this channel's own work-item.create, fanned out once the
//     ledger created the issue (it carries the issue's URL) — is answered
//     in the originating thread with the new issue's link (R6.5);
//  4. a type no channel may subscribe to (ledger.record) is never delivered;
//  5. origin rule (R1.4): an event raised on this channel never comes back
//     to it; and an event read off the ledger that carries this channel's
//     conversation came from an envelope this channel's message put there,
//     so it is an echo and is dropped too (abuse case 10);
//  6. otherwise the channel gets what it subscribes to (R2.1, R2.2), in the
//     work item's thread.
func route(cfg config.SlackChannel, ev *loopv1.Event) (plan, string) {
	switch {
	case !cfg.Enabled:
		return plan{}, skipDisabled
	case cfg.Channel == "":
		return plan{}, skipNoChannel
	}
	t := catalog.Type(ev.GetType())
	conv := ev.GetConversation()
	root := conv.GetThreadTs()
	if root == "" {
		root = conv.GetMessageTs()
	}
	fromHere := ev.GetSource() == SourceSlack && (conv.GetChannel() == "" || conv.GetChannel() == cfg.Channel)

	if catalog.IsNotice(t) {
		if conv.GetChannel() != cfg.Channel {
			return plan{}, skipOtherConv
		}
		return plan{thread: root, answer: true}, ""
	}
	if t == catalog.WorkItemCreate && fromHere && ev.GetLedger().GetUrl() != "" {
		p := plan{thread: root, answer: true}
		if l := ev.GetLedger(); l.GetRepo() != "" && l.GetIssueNumber() > 0 {
			p.bindRef = fmt.Sprintf("github:%s#%d", l.GetRepo(), l.GetIssueNumber())
		}
		return p, ""
	}
	if catalog.Known(t) && !catalog.Subscribable(t) {
		return plan{}, skipUnsubscribable
	}
	if fromHere {
		return plan{}, skipOrigin
	}
	if ev.GetSource() != SourceSlack && conv.GetChannel() == cfg.Channel {
		return plan{}, skipEcho
	}
	if !cfg.Subscribes(t) {
		return plan{}, skipNotSubscribed
	}
	return plan{bindRef: ev.GetSubject()}, ""
}

// gateButtons reports whether approval-shaped notifications carry the
// Approved / Request changes buttons: only when a press can become
// gate.feedback (the grant) and can be received at all (socket or events
// mode). In poll mode a button nobody can receive is worse than none (R4.3).
func gateButtons(cfg config.SlackChannel) bool {
	return cfg.CanPublish(catalog.GateFeedback) &&
		(cfg.Read.Mode == config.ReadSocket || cfg.Read.Mode == config.ReadEvents)
}
