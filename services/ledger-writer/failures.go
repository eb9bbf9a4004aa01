package ledgerwriter

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// interrupted turns a wait cut short into the delivery's result: hand it
// back for a prompt redelivery.
func (s *Service) interrupted(err error) error {
	return bus.Retry(err, time.Second)
}

// fail records a permanent failure on the claim, then fails the event.
func (s *Service) fail(ctx context.Context, ev *loopv1.Event, d *bus.Delivery, o *owned, reason string, err error) error {
	if o.rev != 0 {
		c := claim{State: stateFailed, Reason: reason, Error: err.Error()}
		if _, uerr := s.ledger.Update(ctx, o.id, c.encode(), o.rev); uerr != nil {
			s.deps.Log.Warn("ledger-writer: could not mark the claim failed", "event_id", o.id, "err", uerr)
		}
	}
	return s.failed(ctx, ev, d, reason, err)
}

// failed reports a permanent failure: bus.record_failed, the failure notice
// for a channel-originated event (decision 017), then the DLQ.
func (s *Service) failed(ctx context.Context, ev *loopv1.Event, d *bus.Delivery, reason string, err error) error {
	s.m.failed.WithLabelValues(ev.GetType(), reason).Inc()
	s.deps.Events.Emit(ctx, "bus.record_failed",
		slog.String("event_id", ev.GetId()), slog.String("event_type", ev.GetType()),
		slog.String("work_item", ev.GetSubject()), slog.String("origin", ev.GetSource()),
		slog.String("reason", reason))
	if channelOriginated(ev) {
		if perr := s.publishNotice(ctx, ev, d, reason); perr != nil {
			// The notice is how the person learns their gate answer or
			// kickoff did not land: retry rather than drop it. The claim
			// says failed, so the redelivery comes straight back here.
			s.m.retried.WithLabelValues("publish").Inc()
			return bus.Retry(perr, time.Second)
		}
	}
	s.m.dlq.WithLabelValues(ev.GetType()).Inc()
	return bus.Permanent(fmt.Errorf("record %s (%s): %s: %w", ev.GetId(), ev.GetType(), reason, err))
}

// channelOriginated: a chat message became the event, so someone is waiting
// in a conversation to hear whether it landed.
func channelOriginated(ev *loopv1.Event) bool {
	return catalog.Publishable(catalog.Type(ev.GetType())) && ev.GetConversation().GetChannel() != ""
}

// noticeText is what the originating conversation is told; no message text.
var noticeText = map[string]string{
	"unauthorized-actor": "is not from a member listed in routing.authorizedUsers",
	claimReason:          "was raised by a service that may not raise it",
	"kickoff-disabled":   "asked for a new work item, but channels.slack.kickoff.repo is empty",
	"not-found":          "names a work item or repository GitHub does not know",
	"gone":               "names a work item that was deleted",
	"bad-ref":            "names no GitHub work item",
	"forbidden":          "was refused by GitHub (the ledger's token may not write there)",
	"invalid":            "was refused by GitHub as invalid",
	"github-unavailable": "could not be written to GitHub, which kept failing (if it did land after all, it shows on the work item)",
	"github-unreachable": "could not be written to GitHub, which could not be reached (if it did land after all, it shows on the work item)",
	"rate-limited":       "could not be written to GitHub: its rate limit held it back too long",
}

func (s *Service) publishNotice(ctx context.Context, ev *loopv1.Event, d *bus.Delivery, reason string) error {
	why, ok := noticeText[reason]
	if !ok {
		why = "could not be written to GitHub (" + reason + ")"
	}
	n := &loopv1.Event{
		Id:           envelope.LoopID("record-failed", ev.GetId()),
		Source:       Name,
		Type:         string(catalog.RecordFailed),
		Subject:      ev.GetSubject(),
		Time:         envelope.NewTime(time.Now()),
		Actor:        ev.GetActor(),
		Conversation: ev.GetConversation(),
		CausationId:  ev.GetId(),
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{
			Text:   "Your message was not recorded on the ledger and did not reach the loop: it " + why + ".",
			Detail: map[string]string{"event_type": ev.GetType(), "reason": reason},
		}},
	}
	_, err := s.publish(ctx, n, d)
	return err
}
