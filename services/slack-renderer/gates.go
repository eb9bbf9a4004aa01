package slackrenderer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/slack-go/slack"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/slackmsg"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// A gate message's answer buttons stay live only while the work item waits at
// the gate visit they were drawn for (docs/decisions/032-old-gate-messages-lose-their-buttons.md).
// Per (channel, work item) the KV `posted` entry "<channel>/gate/<key>"
// remembers the one message whose buttons are live: its ts, the visit and
// the notification it rendered. It is written after the message is posted
// with buttons, and retired when
//
//   - the dispatcher's gate.moved for that visit arrives: the message is
//     edited (chat.update) into what gate.moved says — the gate, the outcome,
//     who decided, the artifact as approved — without buttons; or
//   - the work item's next gate is posted and the entry still names an older
//     visit (a gate.moved that never came): the message is edited into a
//     short "moved on" form.
//
// Both edits are idempotent: the entry is marked retired after the edit, and
// a redelivery that finds it retired does nothing; one that finds it live
// (the edit happened, the mark did not) edits again, to the same text. A
// notification rendered again for a retired or older visit gets no buttons,
// so a redelivery or a replay never brings them back. Presses on a button
// that is still shown because an edit failed are refused by ingress-slack.

const (
	gateLive    = "live"
	gateRetired = "retired"
)

// liveGate is the value of a "<channel>/gate/<key>" entry: ids and ts only.
type liveGate struct {
	State    string `json:"state"`
	Channel  string `json:"channel"`
	TS       string `json:"ts"`
	ThreadTS string `json:"thread_ts,omitempty"`
	Ref      string `json:"ref"`
	Visit    string `json:"visit"`
	// EventID and EventType are the notification the message rendered; the
	// edits keep them in its metadata.
	EventID   string `json:"event_id"`
	EventType string `json:"event_type"`
	URL       string `json:"url,omitempty"`
}

func gateKey(channel, ref string) string { return channel + "/gate/" + catalog.SubjectKey(ref) }

// liveGateOf reads ref's entry; nil (and revision 0) when there is none or it
// belongs to another ref sharing the subject key.
func (s *Service) liveGateOf(ctx context.Context, channel, ref string) (*liveGate, uint64, error) {
	e, err := s.posted.Get(ctx, gateKey(channel, ref))
	if errors.Is(err, bus.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	var lg liveGate
	if err := json.Unmarshal(e.Value, &lg); err != nil || lg.Ref != ref || lg.Channel != channel {
		// Unreadable or another item's: written over by the next gate.
		return nil, e.Revision, nil
	}
	return &lg, e.Revision, nil
}

func (s *Service) putLiveGate(ctx context.Context, lg liveGate) error {
	b, _ := json.Marshal(lg)
	_, err := s.posted.Put(ctx, gateKey(lg.Channel, lg.Ref), b)
	return err
}

// gateVisitOf is the visit ev's answer buttons would answer: "" unless ev is
// an approval-shaped notification that names one.
func gateVisitOf(ev *loopv1.Event) string {
	if !slackmsg.ApprovalShaped(catalog.Type(ev.GetType())) {
		return ""
	}
	return ev.GetNotification().GetGateVisit()
}

// buttonsFor decides whether ev's message gets answer buttons, retiring the
// work item's older live gate message first when ev's visit supersedes it.
func (s *Service) buttonsFor(ctx context.Context, cfg config.SlackChannel, ev *loopv1.Event) (bool, error) {
	visit := gateVisitOf(ev)
	if !gateButtons(cfg) || visit == "" {
		return false, nil
	}
	lg, _, err := s.liveGateOf(ctx, cfg.Channel, ev.GetSubject())
	if err != nil || lg == nil {
		return err == nil, err
	}
	if lg.Visit == visit {
		// This notification again (a redelivery, an edit): buttons only
		// while its visit has not been retired.
		return lg.State == gateLive, nil
	}
	if older(visit, lg.Visit) {
		// A replay of an earlier gate's notification: never live again.
		return false, nil
	}
	if lg.State == gateLive {
		if err := s.retire(ctx, *lg, nil); err != nil {
			return false, err
		}
	}
	return true, nil
}

// remember records the message of ev, just posted or edited with buttons, as
// the work item's live gate message.
func (s *Service) remember(ctx context.Context, ev *loopv1.Event, rec record) error {
	return s.putLiveGate(ctx, liveGate{
		State: gateLive, Channel: rec.Channel, TS: rec.TS, ThreadTS: rec.ThreadTS, Ref: ev.GetSubject(),
		Visit: gateVisitOf(ev), EventID: ev.GetId(), EventType: ev.GetType(), URL: ev.GetNotification().GetUrl(),
	})
}

// older reports whether visit a began before visit b. An unreadable visit is
// never older (it is superseded), so a corrupt entry cannot pin buttons.
func older(a, b string) bool {
	va, errA := graph.ParseVisit(a)
	vb, errB := graph.ParseVisit(b)
	return errA == nil && errB == nil && va.Before(vb)
}

// moved handles the dispatcher's gate.moved: the work item's live gate
// message for that visit loses its buttons and says what became of the gate.
// Nothing is posted; a channel that drew no buttons for the visit has nothing
// to do.
func (s *Service) moved(ctx context.Context, cfg config.SlackChannel, ev *loopv1.Event, d *bus.Delivery) error {
	if !cfg.Enabled || cfg.Channel == "" || s.api == nil {
		s.m.skipped.WithLabelValues(skipDisabled).Inc()
		return nil
	}
	lg, _, err := s.liveGateOf(ctx, cfg.Channel, ev.GetSubject())
	if err != nil {
		return err
	}
	visit := ev.GetNotification().GetGateVisit()
	if lg == nil || lg.Visit != visit || lg.State != gateLive {
		s.deps.Log.LogAttrs(ctx, slog.LevelDebug, "gate.moved: no live gate message for the visit",
			append(service.EventAttrs(ev, d), slog.String("gate_visit", visit))...)
		return nil
	}
	if err := s.retire(ctx, *lg, ev); err != nil {
		return err
	}
	s.m.delivered.WithLabelValues("retired").Inc()
	return nil
}

// retire edits lg's message into the rendering of moved (the gate.moved
// signal), or of a short "moved on" notice when there is none, and marks the
// entry retired. The message keeps its metadata (the notification's id).
func (s *Service) retire(ctx context.Context, lg liveGate, moved *loopv1.Event) error {
	if moved == nil {
		moved = movedOn(lg)
	}
	cfg := s.deps.Config().Channels.Slack
	msg := slackmsg.Render(moved, slackmsg.Options{Verbosity: slackmsg.Verbosity(cfg.Verbosity), MaxChars: cfg.MaxChars})
	msg.Metadata = slackmsg.MetadataOf(lg.EventID, lg.EventType, lg.Ref)
	if err := slackmsg.Check(msg); err != nil {
		s.deps.Log.Error("rendered blocks fail the Block Kit check; retiring with the text only", "event_id", moved.GetId(), "err", err)
		msg.Blocks = nil
	}
	if err := s.pace.wait(ctx, lg.Channel); err != nil {
		return err
	}
	err := s.edit(ctx, record{Channel: lg.Channel, TS: lg.TS}, msg)
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &se) && (se.Err == "message_not_found" || se.Err == "cant_update_message"):
		// Deleted, or not ours: no buttons left to take away.
		s.failed(ctx, moved, lg.Channel, se.Err, false)
	case err != nil:
		return s.slackErr(ctx, moved, lg.Channel, "chat.update", err, "", record{}, 0)
	}
	lg.State = gateRetired
	if err := s.putLiveGate(ctx, lg); err != nil {
		return err
	}
	s.deps.Events.Emit(ctx, "channel.posted",
		slog.String("channel", "slack"), slog.String("slack_channel", lg.Channel),
		slog.String("event_id", lg.EventID), slog.String("event_type", lg.EventType),
		slog.String("work_item", lg.Ref), slog.String("thread", lg.ThreadTS),
		slog.String("ts", lg.TS), slog.String("op", "retired"), slog.String("gate_visit", lg.Visit),
		slog.String("cause", moved.GetId()))
	return nil
}

// movedOn is what a live gate message becomes when no gate.moved said what
// happened (it was lost): the gate and that it moved on.
func movedOn(lg liveGate) *loopv1.Event {
	node := ""
	if v, err := graph.ParseVisit(lg.Visit); err == nil {
		node = v.Node
	}
	return &loopv1.Event{
		Id: lg.EventID, Source: "loop", Type: string(catalog.GateMoved), Subject: lg.Ref,
		Time: envelope.NewTime(time.Now()),
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{
			Text: fmt.Sprintf("%s has moved on from %s: these buttons no longer answer it.", slackmsg.ShortRef(lg.Ref), node),
			Url:  lg.URL, Node: node, GateVisit: lg.Visit,
		}},
	}
}
