// Package slackmsg renders catalog events as Slack Block Kit messages
// (docs/requirements.md R4): a header naming the event and the work item,
// the event's text, a link button to the ledger record or work item whenever
// there is a URL, the Approved / Request changes buttons on approval-shaped
// notifications when the caller says a press can be received, and a plain
// `text` fallback for notifications and accessibility.
//
// Everything untrusted (GitHub bodies and titles, Slack text, artifact
// excerpts, payload fields) is escaped for mrkdwn and, where GitHub and Slack
// markdown differ, converted; every message stays inside Block Kit's limits
// (see Check). Verbosity levels are strict supersets: the blocks of quiet are
// a subsequence of normal's, and normal's of verbose's.
//
// slackmsg is pure: no I/O, no clock, no config. It imports slack-go for the
// block types only (hence the name: a package `slack` would clash with it),
// plus pkg/catalog and the event schema; never pkg/bus or services.
package slackmsg

import (
	"bytes"
	"encoding/json"
	"maps"
	"slices"
	"strings"

	"github.com/slack-go/slack"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Verbosity is channels.slack.verbosity. Unknown values render as Normal.
type Verbosity string

// Verbosity levels: each shows everything the one before shows.
const (
	Quiet   Verbosity = "quiet"
	Normal  Verbosity = "normal"
	Verbose Verbosity = "verbose"
)

// Block Kit limits (Slack's documentation; docs/requirements.md K17) and our
// own tighter budgets.
const (
	MaxBlocks       = 50
	MaxHeader       = 150
	MaxSectionText  = 3000
	MaxFields       = 10
	MaxFieldText    = 2000
	MaxContextElems = 10
	MaxActionsElems = 25
	MaxButtonText   = 75
	MaxActionID     = 255
	MaxBlockID      = 255
	MaxButtonValue  = 2000
	MaxButtonURL    = 3000
	MaxMessageText  = 40000
	// MaxFallbackText is Slack's recommended ceiling for the top-level text,
	// which is what a push notification shows.
	MaxFallbackText = 4000
	// MaxBlocksChars bounds the text of all blocks together: Slack refuses
	// large block sets with msg_blocks_too_long well below the sum of the
	// documented limits (about 13,000 characters observed).
	MaxBlocksChars = 12000
)

// Action ids and values of the buttons the renderer draws. ingress-slack
// recognises a press by ActionID and Value together; a value that is not one
// of these is free text (abuse case 9).
const (
	// LinkActionID is every link button's action id: a click on a link
	// button still sends a block_actions payload, which must be acked and
	// otherwise ignored.
	LinkActionID = "the-loop.link"
	// ApproveActionID and RequestChangesActionID are the gate buttons. Their
	// value is a GateValue naming the work item and the gate visit they were
	// drawn for; the action id says the verdict.
	ApproveActionID        = "the-loop.gate.approve"
	RequestChangesActionID = "the-loop.gate.request-changes"
	// ApproveText and RequestChangesText are the buttons' labels. A press
	// injects the gate's own fixed texts (graph.ApproveText and
	// graph.RequestChangesText), which the gate's classify-feedback floor
	// reads as intended (docs/decisions/014-gate-classification.md):
	// "approve" alone would not match, "Approved" does; "Request changes"
	// matches as it stands. None holds "but" or "nit", which would turn
	// approved into approved-with-comments.
	ApproveText        = "Approved"
	RequestChangesText = "Request changes"
	// ApproveValue and RequestChangesValue are the values gate buttons
	// carried before they named a visit (the gate's fixed texts). They are
	// no longer drawn; a press carrying one is on a message older than gate
	// visits and is refused (LegacyGateValue).
	ApproveValue        = graph.ApproveText
	RequestChangesValue = graph.RequestChangesText
	// GateBlockID is the actions block that carries the gate buttons.
	GateBlockID = "the-loop.actions"
)

// MetadataEventType is the Slack message metadata event_type of every message
// the renderer posts; its payload names the event, so that a poster that
// crashed between posting and remembering the ts can find its message again
// (and ingress-slack can recognise the bot's own messages).
const MetadataEventType = "the_loop_event"

// Options says how to render.
type Options struct {
	Verbosity Verbosity
	// MaxChars caps a comment body or an artifact excerpt (R4.4, R4.5);
	// <= 0 or above MaxSectionText means MaxSectionText.
	MaxChars int
	// GateButtons draws Approved / Request changes on approval-shaped
	// notifications that name their gate visit (a button must say which
	// visit it answers). The caller sets it only when the channel may
	// publish gate.feedback and reads in a mode that receives presses
	// (R4.3), and the visit is still the one its buttons may answer.
	GateButtons bool
}

// Message is a rendered message.
type Message struct {
	// Text is the fallback: what a push notification and a screen reader
	// show. It is escaped like any mrkdwn.
	Text   string
	Blocks []slack.Block
	// Metadata identifies the event (ids only, never content).
	Metadata slack.SlackMetadata
}

// MarshalJSON renders the message as the JSON the Web API receives (text,
// blocks, metadata), which is also the golden-file form.
func (m Message) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	// Slack's own escaping (&amp; &lt; &gt;) is already in the text; JSON's
	// \u003c on top would only make goldens unreadable.
	enc.SetEscapeHTML(false)
	err := enc.Encode(struct {
		Text     string              `json:"text"`
		Blocks   []slack.Block       `json:"blocks"`
		Metadata slack.SlackMetadata `json:"metadata"`
	}{m.Text, m.Blocks, m.Metadata})
	return bytes.TrimRight(b.Bytes(), "\n"), err
}

// EventID returns the event id carried by metadata the renderer wrote.
func EventID(md slack.SlackMetadata) (string, bool) {
	if md.EventType != MetadataEventType {
		return "", false
	}
	id, ok := md.EventPayload["event_id"].(string)
	return id, ok && id != ""
}

// ApprovalShaped reports whether t is a notification a person answers with a
// verdict (R4.3).
func ApprovalShaped(t catalog.Type) bool {
	switch t {
	case catalog.PhaseApprovalPending, catalog.PRReviewPending, catalog.SecuritySignOffPending:
		return true
	}
	return false
}

// Render renders ev. It never fails: an event it does not know is rendered
// from its attributes.
func Render(ev *loopv1.Event, o Options) Message {
	if o.MaxChars <= 0 || o.MaxChars > MaxSectionText {
		o.MaxChars = MaxSectionText
	}
	switch o.Verbosity {
	case Quiet, Normal, Verbose:
	default:
		o.Verbosity = Normal
	}
	t := catalog.Type(ev.GetType())
	c := describe(ev, o)
	if c.item == "" {
		c.item = ShortRef(ev.GetSubject())
	}
	if c.url == "" && SafeURL(ev.GetLedger().GetUrl()) {
		c.url = ev.GetLedger().GetUrl()
	}
	if !SafeURL(c.url) {
		c.url = ""
	}

	var blocks []slack.Block
	blocks = append(blocks, &slack.HeaderBlock{
		Type: slack.MBTHeader, BlockID: "the-loop.header",
		Text: slack.NewTextBlockObject(slack.PlainTextType, Plain(c.label+" · "+c.item, MaxHeader), true, false),
	})
	ctx := []string{"`" + Escape(string(t)) + "` on " + Escape(c.item)}
	ctx = append(ctx, c.context...)
	blocks = append(blocks, contextBlock("the-loop.context", ctx))
	if o.Verbosity != Quiet {
		if c.text != "" {
			blocks = append(blocks, section("the-loop.text", c.text))
		}
		if c.excerpt != "" {
			blocks = append(blocks, section("the-loop.excerpt", c.excerpt))
		}
	}
	if o.Verbosity == Verbose && len(c.detail) > 0 {
		blocks = append(blocks, contextBlock("the-loop.detail", detailLines(c.detail)))
	}
	var buttons []slack.BlockElement
	if c.url != "" {
		label := c.urlText
		if label == "" {
			label = "Open on GitHub"
		}
		b := slack.NewButtonBlockElement(LinkActionID, "", slack.NewTextBlockObject(slack.PlainTextType, label, true, false))
		b.URL = c.url
		buttons = append(buttons, b)
	}
	if value, ok := gateValue(ev); o.GateButtons && ApprovalShaped(t) && ok {
		buttons = append(buttons,
			slack.NewButtonBlockElement(ApproveActionID, value,
				slack.NewTextBlockObject(slack.PlainTextType, ApproveText, true, false)).WithStyle(slack.StylePrimary),
			slack.NewButtonBlockElement(RequestChangesActionID, value,
				slack.NewTextBlockObject(slack.PlainTextType, RequestChangesText, true, false)).WithStyle(slack.StyleDanger),
		)
	}
	if len(buttons) > 0 {
		blocks = append(blocks, slack.NewActionBlock(GateBlockID, buttons...))
	}

	return Message{
		Text:     fallback(ev, c, o),
		Blocks:   blocks,
		Metadata: MetadataOf(ev.GetId(), ev.GetType(), ev.GetSubject()),
	}
}

// MetadataOf is the metadata of the message of event id (of type typ, on
// work item ref): ids only, never content.
func MetadataOf(id, typ, ref string) slack.SlackMetadata {
	return slack.SlackMetadata{
		EventType: MetadataEventType,
		EventPayload: map[string]any{
			"event_id":   id,
			"event_type": typ,
			"work_item":  ref,
		},
	}
}

// gateValue is the value of ev's gate buttons: its work item and the gate
// visit its notification announces. ok is false when the notification names
// no visit (or a ref no value can carry): such a message gets no buttons,
// since a press could not say which visit it answers.
func gateValue(ev *loopv1.Event) (string, bool) {
	gv := GateValue{Ref: ev.GetSubject(), Visit: ev.GetNotification().GetGateVisit()}
	if gv.Visit == "" {
		return "", false
	}
	if _, err := ParseGateValue(gv.String()); err != nil {
		return "", false
	}
	return gv.String(), true
}

// fallback is the original's line (docs/requirements.md K17) — "the-loop:
// <type> on <item>", " — <url>" when there is one — plus the text at normal
// and the detail lines at verbose, escaped.
func fallback(ev *loopv1.Event, c content, o Options) string {
	var b strings.Builder
	b.WriteString("the-loop: " + Escape(ev.GetType()) + " on " + Escape(c.item))
	if c.url != "" {
		b.WriteString(" — <" + escapeURL(c.url) + ">")
	}
	if o.Verbosity != Quiet && c.plain != "" {
		b.WriteString("\n\n" + c.plain)
	}
	if o.Verbosity == Verbose && len(c.detail) > 0 {
		b.WriteString("\n")
		for _, k := range slices.Sorted(maps.Keys(c.detail)) {
			b.WriteString("\n" + Escape(k) + ": " + Escape(c.detail[k]))
		}
	}
	out, _ := join(inlineRaw(b.String()), MaxFallbackText)
	return out
}

// inlineRaw wraps already escaped text as one piece per rune, for join.
func inlineRaw(s string) []piece {
	var out []piece
	// Keep <url> constructs and entities whole.
	for len(s) > 0 {
		switch {
		case s[0] == '<':
			if j := strings.IndexByte(s, '>'); j > 0 {
				out = append(out, piece{s: s[:j+1]})
				s = s[j+1:]
				continue
			}
		case s[0] == '&':
			if j := strings.IndexByte(s, ';'); j > 0 && j < 6 {
				out = append(out, piece{s: s[:j+1]})
				s = s[j+1:]
				continue
			}
		}
		r := []rune(s)[0]
		out = append(out, piece{s: string(r)})
		s = s[len(string(r)):]
	}
	return out
}

func section(id, text string) *slack.SectionBlock {
	t := slack.NewTextBlockObject(slack.MarkdownType, text, false, true)
	return &slack.SectionBlock{Type: slack.MBTSection, BlockID: id, Text: t}
}

// contextBlock puts up to MaxContextElems mrkdwn elements in a context
// block; the overflow is folded into the last one.
func contextBlock(id string, lines []string) *slack.ContextBlock {
	if len(lines) > MaxContextElems {
		lines = append(lines[:MaxContextElems-1:MaxContextElems-1], strings.Join(lines[MaxContextElems-1:], " · "))
	}
	elems := make([]slack.MixedElement, 0, len(lines))
	for _, l := range lines {
		l, _ = join(inlineRaw(l), MaxSectionText)
		elems = append(elems, slack.NewTextBlockObject(slack.MarkdownType, l, false, true))
	}
	return slack.NewContextBlock(id, elems...)
}

func detailLines(d map[string]string) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(d)) {
		v, _ := Mrkdwn(d[k], 500)
		out = append(out, "*"+Escape(k)+":* "+v)
	}
	return out
}

// ShortRef is a work-item ref as a person reads it: github:octo/repo#15 is
// octo/repo#15; a Slack conversation ref is "a Slack conversation".
func ShortRef(ref string) string {
	switch {
	case strings.HasPrefix(ref, "github:"):
		return strings.TrimPrefix(ref, "github:")
	case strings.HasPrefix(ref, "slack:"):
		return "a Slack conversation"
	case ref == "":
		return "no work item"
	}
	return ref
}

var labels = map[catalog.Type]string{
	catalog.SessionAwaitingInput:   "Question",
	catalog.DecisionPending:        "Decision pending",
	catalog.PhaseApprovalPending:   "Approval pending",
	catalog.PRReviewPending:        "PR review pending",
	catalog.SecuritySignOffPending: "Security sign-off pending",
	catalog.ConflictEscalated:      "Conflict escalated",
	catalog.WorkItemComplete:       "Work item complete",
	catalog.CommentHuman:           "Comment",
	catalog.CommentAgent:           "Agent comment",
	catalog.WorkItemReply:          "Reply",
	catalog.GateFeedback:           "Gate feedback",
	catalog.ControlCommand:         "Control command",
	catalog.WorkItemCreate:         "Work item created",
	catalog.WorkItemActivity:       "Activity",
	catalog.LedgerRecord:           "Ledger record",
	catalog.GraphOverride:          "Graph moved by the operator",
	catalog.CriticFindings:         "Critic findings",
	catalog.RecordFailed:           "Not recorded on the ledger",
	catalog.GatePaused:             "Gate not moved: session paused",
	catalog.GateMoved:              "Gate moved on",
	catalog.Alert:                  "Alert",
}

// Label is the header's name for an event type; a custom type is its name.
func Label(t catalog.Type) string {
	if l, ok := labels[t]; ok {
		return l
	}
	return string(t)
}
