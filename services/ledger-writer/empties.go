package ledgerwriter

import (
	"context"
	"sync"
	"time"
)

// An outbox is emptied lazily (docs/decisions/091-outbox-emptied-lazily.md).
// Once a delivery has published its fan-out, the partition's next fan-out
// overwrites the outbox anyway, so emptying it is a synced write for
// nothing under load: the writer remembers the outbox revision it published
// instead, and writes the empty only when the partition stays quiet for
// emptyAfter (or the writer stops). An outbox still at a revision this
// writer published holds a fan-out already on loop.ev: flush and the sweeper
// leave it alone, and the next fan-out replaces it without publishing it
// first. Any other revision was written by someone else and is handled as
// before; a writer that took the partition over publishes what it finds
// again, which LOOP_EVENTS drops (same Nats-Msg-Id).

// DefaultEmptyAfter is how long a published fan-out may stay in a quiet
// partition's outbox: well inside the inbox and event streams' duplicate
// window, and far below the sweep grace, so the sweepers of other replicas
// rarely see it.
const DefaultEmptyAfter = 250 * time.Millisecond

// emptyWait bounds one lazy empty.
const emptyWait = 5 * time.Second

// empties is what this writer has published and not yet emptied, per
// partition.
type empties struct {
	mu     sync.Mutex
	byPart map[int]*published
	closed bool
}

// published is partition p's outbox at rev, holding the fan-out id that
// this writer published.
type published struct {
	rev   uint64
	id    string
	timer *time.Timer
}

// markPublished notes that partition p's outbox at rev holds the fan-out id,
// now on loop.ev, and empties it after emptyAfter unless the partition's
// next fan-out overwrites it first.
func (s *Service) markPublished(p int, rev uint64, id string) {
	e := &s.empties
	e.mu.Lock()
	if e.closed {
		// Stopping: the partition is about to be handed over, so its
		// outbox is emptied now, before the delivery returns.
		e.mu.Unlock()
		s.emptyPublished(p, rev, id)
		return
	}
	defer e.mu.Unlock()
	if e.byPart == nil {
		e.byPart = map[int]*published{}
	}
	if old := e.byPart[p]; old != nil {
		old.timer.Stop()
	}
	pub := &published{rev: rev, id: id}
	pub.timer = time.AfterFunc(s.opts.emptyAfter, func() { s.emptyPublished(p, rev, id) })
	e.byPart[p] = pub
}

// isPublished reports whether partition p's outbox at rev holds a fan-out
// this writer published.
func (s *Service) isPublished(p int, rev uint64) bool {
	e := &s.empties
	e.mu.Lock()
	defer e.mu.Unlock()
	pub := e.byPart[p]
	return pub != nil && pub.rev == rev
}

// emptyPublished empties partition p's outbox if it is still at rev. Lost to
// a newer write (the next fan-out, a sweeper, another replica) is fine:
// whoever wrote it owns it now.
func (s *Service) emptyPublished(p int, rev uint64, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), emptyWait)
	defer cancel()
	_, err := s.ledger.Update(ctx, outboxKey(p), nil, rev)
	e := &s.empties
	e.mu.Lock()
	if pub := e.byPart[p]; pub != nil && pub.rev == rev {
		delete(e.byPart, p)
	}
	e.mu.Unlock()
	if err == nil {
		_ = s.step(stepFannedOut, id)
	}
}

// emptyAll empties now every outbox this writer published and has not
// emptied, and from then on empties each at once: the writer is stopping,
// and a replica that takes its partitions over should find them empty.
func (s *Service) emptyAll() {
	e := &s.empties
	e.mu.Lock()
	e.closed = true
	pending := e.byPart
	e.byPart = nil
	e.mu.Unlock()
	var wg sync.WaitGroup
	for p, pub := range pending {
		if pub.timer.Stop() {
			wg.Go(func() { s.emptyPublished(p, pub.rev, pub.id) })
		}
	}
	wg.Wait()
}
