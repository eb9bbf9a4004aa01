package ledgerwriter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/the-loop/bus/pkg/bus"
)

// The outbox holds a fan-out between the inbox acknowledgement and its publish
// on loop.ev: the writer acknowledges the inbox message before it publishes
// (docs/decisions/068-ledger-writer-acks-before-fan-out.md), so what the
// acknowledgement lets go of must be kept where a crash cannot lose it. Per
// inbox message E:
//
//  1. (record E on GitHub and mark ledger/E recorded, for a recorded type)
//  2. put E's fan-out message in its partition's outbox (KV ledger,
//     outbox/pNNN) — the fan-out is pending;
//  3. double-ack E on the inbox;
//  4. publish the fan-out on loop.ev under Nats-Msg-Id E;
//  5. empty the outbox — fanned out: lazily, by the partition's next
//     fan-out overwriting it, or after a quiet spell (empties.go).
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
// A partition's outbox is one key holding at most one fan-out: the partition
// has one message in flight, and its delivery flushes the outbox before it
// queues its own, so there is never a second to keep. Holding one keeps the
// value as small as the message (a fan-out near the bus's 1 MiB limit still
// fits) and the flush one read. Every write is a compare-and-set on the
// key's revision, so the owner, a replica that took the partition over and
// the sweepers never lose each other's changes; should two deliveries of one
// partition ever overlap, the second publishes the first's fan-out before it
// puts its own.

// outboxKey is partition p's outbox in the ledger bucket.
func outboxKey(p int) string { return fmt.Sprintf("outbox/p%03d", p) }

// pendingFanOut is the fan-out waiting in an outbox. Stored as a JSON line of
// everything but the data, then the data as published.
type pendingFanOut struct {
	// ID is the event id, also the message's Nats-Msg-Id.
	ID string `json:"id"`
	// Queued is when the fan-out entered the outbox (the sweep grace counts
	// from it).
	Queued  time.Time  `json:"queued"`
	Subject string     `json:"subject"`
	Header  bus.Header `json:"header,omitempty"`
	Data    []byte     `json:"-"`
	// Type, WorkItem and Recorded are for the bus.published record.
	Type     string `json:"type"`
	WorkItem string `json:"work_item"`
	Recorded bool   `json:"recorded,omitempty"`
}

func (f *pendingFanOut) message() bus.Message {
	return bus.Message{Subject: f.Subject, Header: f.Header, Data: f.Data, MsgID: f.ID}
}

func (f *pendingFanOut) encode() ([]byte, error) {
	meta, err := json.Marshal(f)
	if err != nil {
		return nil, err
	}
	return append(append(meta, '\n'), f.Data...), nil
}

func decodePending(b []byte) (*pendingFanOut, error) {
	meta, data, ok := bytes.Cut(b, []byte("\n"))
	if !ok {
		return nil, errors.New("no header line")
	}
	var f pendingFanOut
	if err := json.Unmarshal(meta, &f); err != nil {
		return nil, err
	}
	if f.ID == "" || f.Subject == "" {
		return nil, errors.New("no event id or subject")
	}
	f.Data = bytes.Clone(data)
	return &f, nil
}

// box is a partition's outbox as last read or written: its revision (0: the
// key does not exist) and the fan-out it holds (nil: none).
type box struct {
	p       int
	rev     uint64
	pending *pendingFanOut
}

func (b *box) holds(id string) bool { return b.pending != nil && b.pending.ID == id }

// errOutboxMoved: the outbox changed since it was read (compare-and-set
// failed); read it again.
var errOutboxMoved = errors.New("outbox changed")

// loadBox reads partition p's outbox. An unreadable value reads as empty and
// is logged loudly: no build of the writer wrote it, so there is nothing in
// it to publish.
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
		if b.pending, err = decodePending(e.Value); err != nil {
			s.deps.Log.Error("ledger-writer: unreadable outbox; read as empty", "key", outboxKey(p), "err", err)
		}
	}
	return b, nil
}

// saveBox makes f (nil: nothing) b's content with compare-and-set, returning
// errOutboxMoved when someone else changed it first.
func (s *Service) saveBox(ctx context.Context, b *box, f *pendingFanOut) error {
	var val []byte
	if f != nil {
		var err error
		if val, err = f.encode(); err != nil {
			return err
		}
	}
	rev, err := s.ledger.CompareAndSet(ctx, outboxKey(b.p), val, b.rev)
	switch {
	case bus.IsConflict(err):
		return errOutboxMoved
	case err != nil:
		return err
	}
	b.rev, b.pending = rev, f
	return nil
}

// kvRetry runs op until it succeeds, re-reading the outbox into b after a
// compare-and-set lost or a KV error (backing off after the latter). Only a
// stop or ctx ends it early.
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

// flush publishes the fan-out waiting in partition p's outbox, if any, and
// empties it: what a stopped delivery acknowledged but did not publish goes
// out before the partition's next event is handled. It returns the outbox as
// it left it, for the delivery to put its own fan-out in.
func (s *Service) flush(ctx context.Context, stop <-chan struct{}, p int) (box, error) {
	b, err := s.loadBox(ctx, p)
	if err != nil {
		s.m.retried.WithLabelValues("kv").Inc()
		return box{}, bus.Retry(fmt.Errorf("read outbox: %w", err), s.backoff(1))
	}
	err = s.kvRetry(ctx, stop, &b, "flush", func(b *box) error {
		if b.pending == nil || s.isPublished(b.p, b.rev) {
			return nil
		}
		if err := s.publishPending(ctx, stop, b.pending, "flush", false); err != nil {
			return err
		}
		return s.saveBox(ctx, b, nil)
	})
	if err != nil {
		return box{}, s.interrupted(err)
	}
	return b, nil
}

// enqueue puts f in the outbox b. Holding f already is fine (a redelivery of
// an event whose acknowledgement was lost); holding another delivery's
// fan-out, it publishes that one first, unless this writer published it.
func (s *Service) enqueue(ctx context.Context, stop <-chan struct{}, b *box, f *pendingFanOut) error {
	return s.kvRetry(ctx, stop, b, "put", func(b *box) error {
		if b.holds(f.ID) {
			return nil
		}
		if b.pending != nil && !s.isPublished(b.p, b.rev) {
			if err := s.publishPending(ctx, stop, b.pending, "flush", false); err != nil {
				return err
			}
		}
		return s.saveBox(ctx, b, f)
	})
}

// publishPending publishes f under its event id and records it
// (bus.published; via says who published it). It waits for the bus as long
// as it takes — a fan-out acknowledged on the inbox has no other copy than
// the outbox, and the bus is our own — unless once, when one attempt (with
// the bus client's own retries) is all.
func (s *Service) publishPending(ctx context.Context, stop <-chan struct{}, f *pendingFanOut, via string, once bool) error {
	for attempt := 1; ; attempt++ {
		ack, err := s.deps.Conn.Publish(ctx, f.message())
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

// sweep runs in every replica until ctx ends: each sweep period it reads
// every partition's outbox and publishes a fan-out that has waited longer
// than the sweep grace — a delivery that acknowledged its event and then
// stopped (a crash, a kill) left it, and the partition may see no next
// message to flush it. The live owner of a fan-out publishes it within
// milliseconds of queueing it; should both publish, LOOP_EVENTS keeps one
// (same Nats-Msg-Id).
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
	if err != nil || b.pending == nil || s.isPublished(p, b.rev) || time.Since(b.pending.Queued) < s.opts.sweepGrace {
		return
	}
	f := b.pending
	if err := s.publishPending(ctx, ctx.Done(), f, "sweep", true); err != nil {
		s.deps.Log.Warn("ledger-writer: sweep could not publish a pending fan-out; next sweep", "event_id", f.ID, "err", err)
		return
	}
	// Lost to a concurrent change (its owner emptied it, or a flush did):
	// nothing left to do; publishing it again was deduplicated.
	if err := s.saveBox(ctx, &b, nil); err != nil && !errors.Is(err, errOutboxMoved) {
		s.deps.Log.Warn("ledger-writer: sweep could not empty an outbox; next sweep", "key", outboxKey(p), "err", err)
	}
}
