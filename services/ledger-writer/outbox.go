package ledgerwriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/the-loop/bus/pkg/bus"
)

// The outbox holds a fan-out between the inbox acknowledgement and its publish
// on loop.ev: the writer acknowledges the inbox message before it publishes
// (the ledger-writer is the subscriber that settles the inbox first), so what
// the acknowledgement lets go of must be kept somewhere a crash cannot lose
// it. Per inbox message E:
//
//  1. (record E on GitHub and mark ledger/E recorded, for a recorded type)
//  2. append E's fan-out message to its partition's outbox (KV ledger,
//     outbox/pNNN) — the fan-out is pending;
//  3. double-ack E on the inbox;
//  4. publish the fan-out on loop.ev under Nats-Msg-Id E;
//  5. remove it from the outbox — fanned out.
//
// A crash between 2 and 5 leaves the message in the outbox, and two things
// publish it, under the same Nats-Msg-Id, so LOOP_EVENTS stores it once:
//
//   - whoever handles the partition's next inbox message flushes the
//     partition's outbox first (flush), so a work item's fan-out keeps its
//     order: an event is never published while an earlier one of its
//     partition waits;
//   - a sweeper in every replica publishes what has waited longer than the
//     sweep grace (sweep), so the last event before a quiet spell is not
//     left until the partition's next message.
//
// One partition's outbox is one key, so the flush that must precede a
// delivery is one read; it normally holds nothing or the one message in
// flight. Every write is a compare-and-set on the key's revision, so the
// owner, a replica that took the partition over and the sweepers never lose
// each other's changes.

// outboxKey is partition p's outbox in the ledger bucket.
func outboxKey(p int) string { return fmt.Sprintf("outbox/p%03d", p) }

// pendingFanOut is one fan-out waiting in an outbox.
type pendingFanOut struct {
	// ID is the event id, also the message's Nats-Msg-Id.
	ID string `json:"id"`
	// Queued is when the fan-out entered the outbox (the sweep grace counts
	// from it).
	Queued time.Time `json:"queued"`
	// Msg is the fan-out exactly as it is published.
	Msg bus.Message `json:"msg"`
	// Type, WorkItem and Recorded are for the bus.published record.
	Type     string `json:"type"`
	WorkItem string `json:"work_item"`
	Recorded bool   `json:"recorded,omitempty"`
}

// outbox is the value of an outbox key.
type outbox struct {
	Pending []pendingFanOut `json:"pending"`
}

// box is an outbox as last read or written, with its revision (0: the key
// does not exist).
type box struct {
	p   int
	rev uint64
	out outbox
}

func (b *box) has(id string) bool {
	return slices.ContainsFunc(b.out.Pending, func(f pendingFanOut) bool { return f.ID == id })
}

// without returns b's pending fan-outs minus the ids.
func (b *box) without(ids ...string) []pendingFanOut {
	return slices.DeleteFunc(slices.Clone(b.out.Pending), func(f pendingFanOut) bool { return slices.Contains(ids, f.ID) })
}

// errOutboxMoved: the outbox changed since it was read (compare-and-set
// failed); read it again.
var errOutboxMoved = errors.New("outbox changed")

// loadBox reads partition p's outbox. An unreadable value reads as empty and
// is logged: it can only hold fan-outs whose events the sweeper of the
// replica that wrote it could read, and a value this build cannot decode was
// written by no build of it.
func (s *Service) loadBox(ctx context.Context, p int) (box, error) {
	e, err := s.ledger.Get(ctx, outboxKey(p))
	if errors.Is(err, bus.ErrNotFound) {
		return box{p: p}, nil
	}
	if err != nil {
		return box{}, err
	}
	b := box{p: p, rev: e.Revision}
	if len(e.Value) > 0 {
		if err := json.Unmarshal(e.Value, &b.out); err != nil {
			s.deps.Log.Error("ledger-writer: unreadable outbox; read as empty", "key", outboxKey(p), "err", err)
			b.out = outbox{}
		}
	}
	return b, nil
}

// saveBox writes pending as b's new content with compare-and-set, returning
// errOutboxMoved when someone else changed it first.
func (s *Service) saveBox(ctx context.Context, b *box, pending []pendingFanOut) error {
	val, err := json.Marshal(outbox{Pending: pending})
	if err != nil {
		return err
	}
	var rev uint64
	if b.rev == 0 {
		rev, err = s.ledger.Create(ctx, outboxKey(b.p), val)
	} else {
		rev, err = s.ledger.Update(ctx, outboxKey(b.p), val, b.rev)
	}
	switch {
	case errors.Is(err, bus.ErrKeyExists), errors.Is(err, bus.ErrWrongRevision):
		return errOutboxMoved
	case err != nil:
		return err
	}
	b.rev, b.out = rev, outbox{Pending: pending}
	return nil
}

// kvRetry runs op until it succeeds, re-reading partition p's outbox into b
// after a compare-and-set lost or a KV error (backing off after the latter).
// Only a stop or ctx ends it early.
func (s *Service) kvRetry(ctx context.Context, stop <-chan struct{}, b *box, what string, op func(*box) error) error {
	for attempt := 1; ; attempt++ {
		err := op(b)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errOutboxMoved) {
			s.m.retried.WithLabelValues("kv").Inc()
			s.deps.Log.Warn("ledger-writer: outbox "+what+" failed; retrying", "key", outboxKey(b.p), "err", err)
			if err := sleep(ctx, stop, s.backoff(attempt)); err != nil {
				return err
			}
		}
		nb, err := s.loadBox(ctx, b.p)
		if err != nil {
			s.m.retried.WithLabelValues("kv").Inc()
			if err := sleep(ctx, stop, s.backoff(attempt)); err != nil {
				return err
			}
			continue
		}
		*b = nb
	}
}

// flush publishes every fan-out waiting in partition p's outbox, oldest
// first, and removes them: what a crash left between an acknowledgement and
// its publish goes out before the partition's next event is handled. It
// returns the outbox as it left it (empty), for the delivery to append to.
func (s *Service) flush(ctx context.Context, stop <-chan struct{}, p int) (box, error) {
	b, err := s.loadBox(ctx, p)
	if err != nil {
		s.m.retried.WithLabelValues("kv").Inc()
		return box{}, bus.Retry(fmt.Errorf("read outbox: %w", err), s.backoff(1))
	}
	for len(b.out.Pending) > 0 {
		var ids []string
		for _, f := range b.out.Pending {
			if err := s.publishPending(ctx, stop, f, "flush", false); err != nil {
				return box{}, s.interrupted(err)
			}
			ids = append(ids, f.ID)
		}
		err := s.kvRetry(ctx, stop, &b, "flush", func(b *box) error { return s.saveBox(ctx, b, b.without(ids...)) })
		if err != nil {
			return box{}, s.interrupted(err)
		}
	}
	return b, nil
}

// enqueue appends f to the outbox b (already holding it is fine: a
// redelivery of an event whose acknowledgement was lost).
func (s *Service) enqueue(ctx context.Context, stop <-chan struct{}, b *box, f pendingFanOut) error {
	return s.kvRetry(ctx, stop, b, "append", func(b *box) error {
		if b.has(f.ID) {
			return nil
		}
		return s.saveBox(ctx, b, append(slices.Clone(b.out.Pending), f))
	})
}

// dequeue removes id from the outbox b: its fan-out is published.
func (s *Service) dequeue(ctx context.Context, stop <-chan struct{}, b *box, id string) error {
	return s.kvRetry(ctx, stop, b, "remove", func(b *box) error {
		if !b.has(id) {
			return nil
		}
		return s.saveBox(ctx, b, b.without(id))
	})
}

// publishPending publishes f under its event id and records it
// (bus.published; via says who published it). It waits for the bus as long
// as it takes — a fan-out acknowledged on the inbox has no other copy than
// the outbox — unless once, when one attempt (with the bus client's own
// retries) is all.
func (s *Service) publishPending(ctx context.Context, stop <-chan struct{}, f pendingFanOut, via string, once bool) error {
	for attempt := 1; ; attempt++ {
		ack, err := s.deps.Conn.Publish(ctx, f.Msg)
		if err == nil {
			s.m.published.WithLabelValues(f.Type).Inc()
			if via != "delivery" {
				s.m.swept.WithLabelValues(via).Inc()
				s.deps.Log.Info("ledger-writer: published a fan-out a stopped delivery left in the outbox",
					"event_id", f.ID, "event_type", f.Type, "via", via, "duplicate", ack.Duplicate)
			}
			s.deps.Events.Emit(ctx, "bus.published",
				slog.String("event_id", f.ID), slog.String("event_type", f.Type),
				slog.String("work_item", f.WorkItem), slog.String("stream", ack.Stream),
				slog.Uint64("stream_seq", ack.Seq), slog.Bool("duplicate", ack.Duplicate),
				slog.Bool("recorded", f.Recorded), slog.String("via", via))
			return nil
		}
		s.m.retried.WithLabelValues("publish").Inc()
		if once {
			return err
		}
		s.deps.Log.Warn("ledger-writer: fan-out publish failed; retrying", "event_id", f.ID, "via", via, "err", err)
		if err := sleep(ctx, stop, s.backoff(attempt)); err != nil {
			return err
		}
	}
}

// sweep runs in every replica until ctx ends: each SweepInterval it reads
// every partition's outbox and publishes, oldest first, the fan-outs that
// have waited longer than the sweep grace — a delivery that acknowledged its
// event and then stopped (a crash, a kill) left them, and the partition may
// see no next message to flush them. The live owner of a fan-out publishes it
// within milliseconds of queueing it; should both publish, LOOP_EVENTS keeps
// one (same Nats-Msg-Id). A partition's fan-outs go out in the order they
// were queued, and none after one that failed.
func (s *Service) sweep(ctx context.Context) {
	t := time.NewTicker(s.opts.sweepEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for p := range s.deps.Partitions {
			if ctx.Err() != nil {
				return
			}
			s.sweepPartition(ctx, p)
		}
	}
}

func (s *Service) sweepPartition(ctx context.Context, p int) {
	b, err := s.loadBox(ctx, p)
	if err != nil || len(b.out.Pending) == 0 {
		return
	}
	var ids []string
	for _, f := range b.out.Pending {
		if time.Since(f.Queued) < s.opts.sweepGrace {
			break // its owner is publishing it; and nothing after it goes first
		}
		err := s.publishPending(ctx, ctx.Done(), f, "sweep", true)
		if err != nil {
			s.deps.Log.Warn("ledger-writer: sweep could not publish a pending fan-out; next sweep", "event_id", f.ID, "err", err)
			break
		}
		ids = append(ids, f.ID)
	}
	if len(ids) == 0 {
		return
	}
	// Lost to a concurrent change: the next sweep finds what is still
	// there, and publishing it again is deduplicated.
	_ = s.kvRetry(ctx, ctx.Done(), &b, "sweep", func(b *box) error { return s.saveBox(ctx, b, b.without(ids...)) })
}
