package ingressslack

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// How a message reached the service; a metrics label and a log attribute.
const (
	viaEvents = "events"
	viaSocket = "socket"
	viaPoll   = "poll"
)

// inbound is one Slack message or button press, normalised from whichever
// transport carried it. Everything in it is untrusted
// (docs/requirements.md, "Actors and trust"): the pipeline decides what, if
// anything, it becomes.
type inbound struct {
	via string
	// id is the deterministic event id (see messageID, pressID).
	id       string
	channel  string
	ts       string // the message's own ts (for a press: the pressed message)
	threadTS string // thread root; "" for a top-level message
	user     string // Slack member id of the author or presser
	botID    string
	subtype  string
	text     string
	// press is set for a block_actions button press.
	press *press
	// ignore, when set, says why this is not a person's new message (an
	// edit, a delete, a join, a link-button click…); the pipeline drops it
	// with reason "ignored" and this detail.
	ignore string
	// invalid, when set, says why a press is refused unread: a gate
	// button's value that claims to be a gate value and is malformed. The
	// pipeline drops it with reason "invalid" and this detail.
	invalid string
}

// press is one Block Kit button press.
type press struct {
	actionID string
	value    string
	// rendered: the action id and value are a pair the-loop's renderer
	// draws (slackmsg); anything else is free text (abuse case 9).
	rendered bool
	// gate is what a rendered gate button's value names: the work item and
	// the gate visit the button was drawn for. An empty Visit is a button
	// drawn before gate visits existed (its value is the legacy fixed text),
	// which cannot say what it answers.
	gate slackmsg.GateValue
}

// topLevel reports whether the message starts no thread of anyone else's: it
// has no thread_ts, or it is the root of its own thread.
func (in *inbound) topLevel() bool { return in.threadTS == "" || in.threadTS == in.ts }

// at is when the message was posted, from its ts (seconds.micros).
func (in *inbound) at(now time.Time) time.Time {
	if t, ok := tsTime(in.ts); ok {
		return t
	}
	return now
}

func tsTime(ts string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || s <= 0 {
		return time.Time{}, false
	}
	frac = (frac + "000000")[:6]
	us, err := strconv.ParseInt(frac, 10, 64)
	if err != nil || us < 0 {
		return time.Time{}, false
	}
	return time.Unix(s, us*1000).UTC(), true
}

// messageID is the event id of a Slack message: its channel and ts, which
// identify a message in a workspace. Not the Events API event_id: channel+ts
// is the same whichever transport carried the message (Events API, Socket
// Mode, a poll after a mode change) and whichever subscription fired (message
// and app_mention for one post), so the inbox's Nats-Msg-Id window stores it
// once in every case, Slack's retries included.
func messageID(channel, ts string) string { return envelope.SlackMessageID(channel, ts) }

// pressID is the event id of a button press: the message, the action and the
// presser. A redelivered envelope or a double tap by one person publishes
// once; two approvers pressing the same button are two events.
func pressID(channel, messageTS, actionID, user string) string {
	return envelope.SlackInteractionID(channel, messageTS, actionID+"."+user)
}

// errNotJSON: the body is not the JSON object Slack sends.
var errNotJSON = errors.New("not a Slack JSON payload")

// outer is what the service reads of an Events API body: the wrapper of
// slackevents plus url_verification's challenge.
type outer struct {
	slackevents.EventsAPICallbackEvent
	Challenge string `json:"challenge"`
}

// decodeEvents reads an Events API body (HTTP, or a Socket Mode events_api
// envelope's payload). challenge is set for url_verification; in is nil for
// a wrapper the service has nothing to do with.
func decodeEvents(body []byte, via string) (in *inbound, challenge string, err error) {
	var o outer
	if err := json.Unmarshal(body, &o); err != nil {
		return nil, "", fmt.Errorf("%w: %v", errNotJSON, err)
	}
	switch o.Type {
	case slackevents.URLVerification:
		if o.Challenge == "" {
			return nil, "", fmt.Errorf("%w: url_verification without a challenge", errNotJSON)
		}
		return nil, o.Challenge, nil
	case slackevents.CallbackEvent:
	default:
		return &inbound{via: via, ignore: "wrapper:" + safeLabel(o.Type)}, "", nil
	}
	if o.InnerEvent == nil {
		return nil, "", fmt.Errorf("%w: event_callback without an event", errNotJSON)
	}
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(*o.InnerEvent, &head); err != nil {
		return nil, "", fmt.Errorf("%w: event: %v", errNotJSON, err)
	}
	if head.Type != "message" {
		// app_mention, reaction_added…: a mention is also delivered as the
		// message event it is, which is the one read.
		return &inbound{via: via, ignore: "event:" + safeLabel(head.Type)}, "", nil
	}
	var m slackevents.MessageEvent
	if err := json.Unmarshal(*o.InnerEvent, &m); err != nil {
		return nil, "", fmt.Errorf("%w: message event: %v", errNotJSON, err)
	}
	return fromMessage(via, m.Channel, m.TimeStamp, m.ThreadTimeStamp, m.User, m.BotID, m.SubType, m.Text), "", nil
}

// fromMessage builds the inbound of a message event or a polled message.
func fromMessage(via, channel, ts, threadTS, user, botID, subtype, text string) *inbound {
	in := &inbound{
		via: via, channel: channel, ts: ts, threadTS: threadTS,
		user: user, botID: botID, subtype: subtype, text: text,
	}
	switch subtype {
	case "", "thread_broadcast", "file_share", "me_message":
		// A person's new message (a thread_broadcast is a reply also shown
		// in the channel).
	case "bot_message":
		// Kept: the pipeline drops it as self-authored after mapping.
	default:
		// message_changed, message_deleted, channel_join…: edits and
		// deletes are out of scope (docs/requirements.md, Out of scope), the rest is
		// not speech.
		in.ignore = "subtype:" + safeLabel(subtype)
	}
	switch {
	case in.ignore != "":
	case channel == "" || ts == "":
		in.ignore = "incomplete-message"
	case strings.TrimSpace(text) == "" && subtype != "bot_message":
		// A file or a reaction with no words says nothing a work item
		// could take.
		in.ignore = "empty-text"
	}
	if in.ignore == "" {
		in.id = messageID(channel, ts)
	}
	return in
}

// decodeInteraction reads an interactivity payload (the HTTP form's payload=
// JSON, or a Socket Mode interactive envelope's payload).
func decodeInteraction(body []byte, via string) (*inbound, error) {
	var cb slack.InteractionCallback
	if err := json.Unmarshal(body, &cb); err != nil {
		return nil, fmt.Errorf("%w: %v", errNotJSON, err)
	}
	if cb.Type != slack.InteractionTypeBlockActions {
		// Shortcuts, modal submissions, legacy attachments: the-loop
		// renders none of them.
		return &inbound{via: via, ignore: "interaction:" + safeLabel(string(cb.Type))}, nil
	}
	channel := cb.Channel.ID
	if channel == "" {
		channel = cb.Container.ChannelID
	}
	msgTS := cb.Container.MessageTs
	if msgTS == "" {
		msgTS = cb.Message.Timestamp
	}
	// The thread root is the pressed message's thread_ts when it is a reply,
	// otherwise the message itself (docs/requirements.md K17).
	thread := cb.Container.ThreadTs
	if thread == "" {
		thread = cb.Message.ThreadTimestamp
	}
	if thread == "" {
		thread = msgTS
	}
	in := &inbound{via: via, channel: channel, ts: msgTS, threadTS: thread, user: cb.User.ID}
	if channel == "" || msgTS == "" {
		in.ignore = "press-outside-a-message"
		return in, nil
	}
	if len(cb.ActionCallback.BlockActions) == 0 || cb.ActionCallback.BlockActions[0] == nil {
		in.ignore = "press-without-action"
		return in, nil
	}
	// Slack sends one action per press; only the first is read.
	a := cb.ActionCallback.BlockActions[0]
	if a.ActionID == slackmsg.LinkActionID || a.Value == "" {
		// A link button's click still sends block_actions (docs/requirements.md K17):
		// it is acknowledged and otherwise ignored.
		in.ignore = "link-button"
		return in, nil
	}
	p := &press{actionID: a.ActionID, value: a.Value}
	switch a.ActionID {
	case slackmsg.ApproveActionID, slackmsg.RequestChangesActionID:
		gv, err := slackmsg.ParseGateValue(a.Value)
		switch {
		case err == nil:
			p.rendered, p.gate = true, gv
		case slackmsg.LegacyGateValue(a.ActionID, a.Value):
			// Drawn before buttons named their visit: the pipeline
			// refuses it as stale
			// (docs/decisions/031-stale-gate-presses-refused.md).
			p.rendered = true
		case errors.Is(err, slackmsg.ErrBadGateValue):
			// It claims to be a gate value and is not one: never read
			// as free text, which would answer the current gate.
			in.invalid = "malformed-gate-value"
		}
	}
	switch {
	case in.invalid != "":
	case p.rendered && a.ActionID == slackmsg.ApproveActionID:
		in.text = graph.ApproveText
	case p.rendered:
		in.text = graph.RequestChangesText
	default:
		// Abuse case 9, decision 015: a value the-loop never rendered is free
		// text, the raw value (not the label, which the payload also
		// controls), through the ordinary reply path.
		in.text = a.Value
	}
	in.press = p
	in.id = pressID(channel, msgTS, a.ActionID, cb.User.ID)
	return in, nil
}

// safeLabel keeps a Slack-supplied type name fit for a log attribute: short,
// and only the characters type names use.
func safeLabel(s string) string {
	if s == "" {
		return "none"
	}
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 40 {
			break
		}
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('?')
		}
	}
	return b.String()
}
