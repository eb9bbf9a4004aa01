package ledgerwriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/tracing"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// bind binds the kickoff's conversation to the new work item (R3.6), so a
// reply in the thread reaches it, and records channel.kickoff_created.
// Idempotent: a redelivery binds (and records) again.
func (s *Service) bind(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, w written) error {
	ch, ts := ev.GetConversation().GetChannel(), threadOf(ev)
	ref := "github:" + w.Repo + "#" + strconv.Itoa(w.Number)
	for attempt := 1; ch != "" && ts != ""; attempt++ {
		err := s.threads.Bind(ctx, ch, ts, ref)
		if err == nil {
			break
		}
		s.m.retried.WithLabelValues("kv").Inc()
		s.deps.Log.Warn("ledger-writer: thread binding failed; retrying", "event_id", ev.GetId(), "err", err)
		if err := sleep(ctx, stop, s.backoff(attempt)); err != nil {
			return s.interrupted(err)
		}
	}
	s.deps.Events.Emit(ctx, "channel.kickoff_created",
		slog.String("event_id", ev.GetId()), slog.String("work_item", ref), slog.String("origin", ev.GetSource()),
		slog.String("channel", ch), slog.String("thread_ts", ts), slog.String("actor", memberID(ev)))
	return nil
}

// fanOut hands ev, with its record when it has one, to the channels and the
// loop, acknowledging the inbox before it publishes: the fan-out message
// enters the partition's outbox b, the inbox message is double-acked, the
// fan-out is published to loop.ev under Nats-Msg-Id E (waiting for the
// PubAck), and leaves the outbox (lazily: empties.go). From the
// acknowledgement on, the delivery is settled whatever happens next: a crash
// leaves the fan-out in the outbox for the partition's next delivery or a
// sweeper to publish (outbox.go).
func (s *Service) fanOut(ctx context.Context, stop <-chan struct{}, b *box, ev *loopv1.Event, d *bus.Delivery, w *written) error {
	out := ev
	if w != nil {
		out = proto.Clone(ev).(*loopv1.Event)
		out.Ledger = &loopv1.LedgerRef{Repo: w.Repo, IssueNumber: int64(w.Number), CommentId: w.CommentID, Url: w.URL}
		if w.CommentID == 0 {
			// A kickoff's record is the new work item: from here on the
			// event is about it (the conversation stays in Conversation).
			out.Subject = "github:" + w.Repo + "#" + strconv.Itoa(w.Number)
		}
	}
	m, err := message(ctx, out, d)
	if err != nil {
		return bus.Permanent(err)
	}
	id := ev.GetId()
	if m.MsgID != id {
		return bus.Permanent(fmt.Errorf("fan-out of %s carries message id %q", id, m.MsgID))
	}
	f := &pendingFanOut{ID: id, Queued: time.Now(), Subject: m.Subject, Header: m.Header, Data: m.Data,
		Type: ev.GetType(), WorkItem: out.GetSubject(), Recorded: w != nil}
	if err := s.enqueue(ctx, stop, b, f); err != nil {
		return s.interrupted(err)
	}
	if err := s.step(stepQueued, id); err != nil {
		return err
	}
	if err := d.Ack(ctx); err != nil {
		// Not settled: the message comes back, and its redelivery (or a
		// sweeper) publishes the fan-out waiting in the outbox.
		s.m.retried.WithLabelValues("ack").Inc()
		s.deps.Log.LogAttrs(ctx, slog.LevelWarn, "ledger-writer: inbox acknowledgement failed; the fan-out waits in the outbox",
			s.logAttrs(ev, d, slog.Any("err", err))...)
		return bus.Retry(err, time.Second)
	}
	if err := s.step(stepAcked, id); err != nil {
		return err
	}
	if err := s.publishPending(ctx, stop, f, "delivery", false); err != nil {
		return s.interrupted(err)
	}
	// The outbox is emptied by the partition's next fan-out, or after a
	// quiet spell (empties.go).
	s.markPublished(b.p, b.rev, id)
	return s.step(stepPublished, id)
}

func (s *Service) publish(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) (bus.PubAck, error) {
	m, err := message(ctx, ev, d)
	if err != nil {
		return bus.PubAck{}, err
	}
	return s.deps.Conn.Publish(ctx, m)
}

// message is ev as it is published to loop.ev, carrying the trace context
// of its handling (ctx's span; else d's): kept in the outbox with it, so a
// fan-out published by a later flush or a sweep is still the write's child.
func message(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) (bus.Message, error) {
	tp := tracing.TraceParent(ctx)
	if tp == "" {
		tp = d.Header.Get(envelope.HeaderTraceparent)
	}
	m, err := envelope.ToMessage(ev, envelope.Events, tp)
	if err != nil && tp != "" {
		// A malformed inbound traceparent is dropped, not fatal.
		m, err = envelope.ToMessage(ev, envelope.Events, "")
	}
	if err != nil {
		return bus.Message{}, fmt.Errorf("fan-out of %s: %w", ev.GetId(), err)
	}
	return bus.FromEnvelope(m), nil
}

// The high-water mark of a kickoff repository: the newest issue number the
// writer created there. A kickoff's claim records it, and its read-back
// starts above it.
func highWaterKey(repo string) string {
	return "ledger-writer/issues-high-water/" + strings.ToLower(repo)
}

func (s *Service) highWater(ctx context.Context, repo string) int {
	if repo == "" {
		return 0
	}
	e, err := s.ledger.Get(ctx, highWaterKey(repo))
	if err != nil {
		return 0 // read back from the first issue: slower, never wrong
	}
	n, _ := strconv.Atoi(string(e.Value))
	return n
}

func (s *Service) raiseHighWater(ctx context.Context, repo string, n int) {
	key := highWaterKey(repo)
	for range 5 {
		e, err := s.ledger.Get(ctx, key)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			_, err = s.ledger.Create(ctx, key, []byte(strconv.Itoa(n)))
		case err == nil:
			if cur, _ := strconv.Atoi(string(e.Value)); cur >= n {
				return
			}
			_, err = s.ledger.Update(ctx, key, []byte(strconv.Itoa(n)), e.Revision)
		}
		if err == nil {
			return
		}
	}
}
