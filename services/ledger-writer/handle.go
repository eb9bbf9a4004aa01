package ledgerwriter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// step names a point of a delivery, for the crash tests' hook.
type step string

const (
	stepClaimed   step = "claimed"    // ledger/E created (pending)
	stepWritten   step = "written"    // the record is on GitHub
	stepRecorded  step = "recorded"   // ledger/E says recorded
	stepQueued    step = "queued"     // the fan-out waits in the partition's outbox
	stepAcked     step = "acked"      // the inbox message is acknowledged
	stepPublished step = "published"  // the fan-out has its PubAck
	stepFannedOut step = "fanned-out" // the fan-out left the outbox (lazily: empties.go)
)

func (s *Service) step(st step, id string) error {
	if s.opts.hook == nil {
		return nil
	}
	return s.opts.hook(st, id)
}

// Claim states of ledger/E.
const (
	statePending  = "pending"
	stateRecorded = "recorded"
	stateFailed   = "failed"
)

// claim is the value of ledger/E.
type claim struct {
	State string `json:"state"`
	// Owner is the worker that may write (pending).
	Owner string `json:"owner,omitempty"`
	// Released: the owner stopped with no write in flight, so the next
	// delivery need not wait out the lease.
	Released bool `json:"released,omitempty"`
	// ReadBack: a write may have landed (set with Released).
	ReadBack bool `json:"read_back,omitempty"`
	// After is, for a kickoff, the newest issue number the writer knew in
	// the repository when it claimed: the read-back starts above it.
	After int `json:"after,omitempty"`
	// Record is the ledger record (recorded).
	Record *written `json:"record,omitempty"`
	// Reason is the failure code (failed).
	Reason string `json:"reason,omitempty"`
	Error  string `json:"error,omitempty"`
}

func (c claim) encode() []byte {
	b, _ := json.Marshal(c)
	return b
}

func decodeClaim(b []byte) claim {
	var c claim
	if json.Unmarshal(b, &c) != nil || c.State == "" {
		// Unreadable: treat as someone's pending claim, which is the one
		// reading that can never skip a read-back.
		return claim{State: statePending}
	}
	return c
}

// owned is this delivery's hold on ledger/E.
type owned struct {
	id       string
	rev      uint64
	c        claim
	fencedAt time.Time
	readBack bool
}

func (s *Service) handle(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, d *bus.Delivery) error {
	// What a stopped delivery of this partition acknowledged but did not
	// publish goes out first: a work item's fan-out keeps its order.
	b, err := s.flush(ctx, stop, d.Partition)
	if err != nil {
		return err
	}
	if err := mayClaim(ev, d.Subject); err != nil {
		return s.failed(ctx, ev, d, claimReason, err)
	}
	if catalog.IsMark(catalog.Type(ev.GetType())) {
		return s.mark(ctx, stop, ev, d)
	}
	entry, _ := catalog.Lookup(catalog.Type(ev.GetType()))
	if !entry.Record.Recorded() {
		return s.fanOut(ctx, stop, &b, ev, d, nil)
	}
	s.deps.Log.LogAttrs(ctx, slog.LevelInfo, "ledger-writer: recording", s.logAttrs(ev, d)...)
	if s.gh == nil {
		s.deps.Log.LogAttrs(ctx, slog.LevelWarn, "ledger-writer: event held, GitHub is not configured",
			s.logAttrs(ev, d, slog.String("reason", s.held))...)
		s.m.retried.WithLabelValues("not-configured").Inc()
		select {
		case <-ctx.Done():
		case <-stop:
		}
		// Back promptly: the next instance may have the token.
		return s.interrupted(errors.New("ledger-writer: " + s.held))
	}
	start := time.Now()
	w, err := s.record(ctx, stop, ev, d, entry.Record)
	if err != nil {
		return err
	}
	s.m.latency.Observe(time.Since(start).Seconds())
	if entry.Record == catalog.RecordIssue {
		if err := s.bind(ctx, stop, ev, w); err != nil {
			return err
		}
	}
	return s.fanOut(ctx, stop, &b, ev, d, &w)
}

// record makes sure E's record is on GitHub exactly once and returns it.
// Errors returned are the delivery's result (bus.Retry, bus.Permanent, or a
// hook's).
func (s *Service) record(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, d *bus.Delivery, kind catalog.Record) (written, error) {
	in, err := s.renderInput()
	if err != nil {
		// A config the watcher accepted cannot fail here; if it does, wait
		// for the next reload rather than judge events by a broken one.
		return written{}, bus.Retry(err, time.Minute)
	}
	// Pace before claiming, so that the claim (the fence a takeover
	// respects) is fresh when the write goes out.
	if err := s.pacer.wait(ctx, stop); err != nil {
		return written{}, s.interrupted(err)
	}
	o, done, w, err := s.claimLedger(ctx, stop, ev, d, kind, in.kickoff.repo)
	if done || err != nil {
		return w, err
	}

	rec, err := render(in, ev, kind)
	if err != nil {
		var re *renderError
		if errors.As(err, &re) {
			return written{}, s.fail(ctx, ev, d, &o, re.reason, err)
		}
		return written{}, s.fail(ctx, ev, d, &o, "invalid", err)
	}

	return s.write(ctx, stop, ev, d, rec, &o, kind)
}

// claimLedger claims ledger/E for this delivery: it creates the pending
// claim, or takes over one a stopped or stale delivery left. done is true
// when the delivery is settled without a write of its own (w, err are its
// result: the record was already there, or a retry); otherwise o is the
// claim this delivery holds. kickoffRepo is where a kickoff's issue goes.
func (s *Service) claimLedger(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, d *bus.Delivery, kind catalog.Record, kickoffRepo string) (o owned, done bool, w written, err error) {
	id := ev.GetId()
	o = owned{id: id, c: claim{State: statePending, Owner: s.worker}}
	if kind == catalog.RecordIssue {
		o.c.After = s.highWater(ctx, kickoffRepo)
	}
	rev, err := s.ledger.Create(ctx, id, o.c.encode())
	switch {
	case err == nil:
		o.rev, o.fencedAt = rev, time.Now()
		if err := s.step(stepClaimed, id); err != nil {
			return o, true, written{}, err
		}
	case errors.Is(err, bus.ErrKeyExists):
		done, w, err := s.takeOver(ctx, stop, ev, d, &o)
		if done || err != nil {
			return o, true, w, err
		}
	default:
		s.m.retried.WithLabelValues("kv").Inc()
		return o, true, written{}, bus.Retry(fmt.Errorf("claim %s: %w", id, err), s.backoff(int(d.NumDelivered)))
	}
	return o, false, written{}, nil
}

// write writes rec under the claim o until it lands, waiting out in this
// delivery a held token and a few rate limits, and handing every other
// transient failure back to the bus (retryLater).
func (s *Service) write(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, d *bus.Delivery, rec record, o *owned, kind catalog.Record) (written, error) {
	id := ev.GetId()
	limited := 0 // rate-limit waits inside this delivery
	for {
		w, err := s.attempt(ctx, stop, ev, rec, o, int(d.NumDelivered))
		if err == nil {
			if err := s.step(stepWritten, id); err != nil {
				return written{}, err
			}
			return w, s.markRecorded(ctx, stop, ev, o, w, kind)
		}
		var lost *lostClaim
		if errors.As(err, &lost) {
			return written{}, bus.Retry(err, 0)
		}
		var f *failure
		if !errors.As(err, &f) {
			f = &failure{err: err, reason: "internal", maybeWritten: true}
		}
		if f.permanent {
			return written{}, s.fail(ctx, ev, d, o, f.reason, f)
		}
		o.readBack = o.readBack || f.maybeWritten
		s.m.retried.WithLabelValues(f.reason).Inc()
		wait := f.wait
		switch {
		case f.held:
			// A rejected token fails every event alike until the
			// operator fixes it: hold the delivery here, as a writer
			// without a token does, rather than spend its deliveries
			// and dead-letter the whole inbox one partition head at a
			// time.
		case f.limited && limited < rateLimitWaits:
			// A rate limit is the credential's, shared by every
			// partition, and GitHub says when it lifts: wait it out
			// here a few times before spending a delivery on it.
			limited++
			wait = s.namedWait(f.wait)
		default:
			return written{}, s.retryLater(ctx, ev, d, o, f)
		}
		s.deps.Log.LogAttrs(ctx, slog.LevelWarn, "ledger-writer: GitHub failed; waiting to retry",
			s.logAttrs(ev, d, slog.String("reason", f.reason), slog.Duration("wait", wait), slog.Any("err", f))...)
		if err := sleep(ctx, stop, wait); err != nil {
			s.release(ctx, o)
			return written{}, s.interrupted(err)
		}
		// Every content write goes through the pacer, retries included.
		if err := s.pacer.wait(ctx, stop); err != nil {
			s.release(ctx, o)
			return written{}, s.interrupted(err)
		}
	}
}

// retryLater hands a transient GitHub failure (5xx, a timeout, a dropped
// connection, a 403/429 rate limit past rateLimitWaits) back to the bus, so
// the bound on attempts is the consumer's MaxDeliver and the partition stays
// in order (one message in flight): the claim is released, saying whether a
// write may have landed so the next delivery reads back first, and the
// message is redelivered after the wait GitHub named (namedWait), or after a
// jittered backoff. On the last delivery the event fails with
// the failure's reason: bus.record_failed, the notice, the DLQ
// (docs/decisions/028-bounded-ledger-writer-retries.md).
func (s *Service) retryLater(ctx context.Context, ev *loopv1.Event, d *bus.Delivery, o *owned, f *failure) error {
	if d.Last() {
		return s.fail(ctx, ev, d, o, f.reason, fmt.Errorf("still failing after %d deliveries: %w", d.NumDelivered, f))
	}
	wait := s.backoff(int(d.NumDelivered))
	if f.wait > 0 {
		wait = s.namedWait(f.wait)
	}
	s.release(ctx, o)
	s.deps.Log.LogAttrs(ctx, slog.LevelWarn, "ledger-writer: GitHub failed; retrying on a later delivery",
		s.logAttrs(ev, d, slog.String("reason", f.reason), slog.Duration("wait", wait),
			slog.Int("max_deliver", d.MaxDeliver), slog.Any("err", f))...)
	return bus.Retry(f, wait)
}

// rateLimitWaits is how many rate limits one delivery waits out before it
// hands the event back to the bus (spending a delivery).
const rateLimitWaits = 3

// namedWait is the wait before retrying after GitHub named one (Retry-After,
// a rate-limit reset): that wait, at most the retry cap, plus up to one
// retry base of jitter so that the partitions a limit stopped together do
// not all return at once.
func (s *Service) namedWait(d time.Duration) time.Duration {
	return min(d, s.opts.retryMax) + bus.Backoff(1, s.opts.retryBase, s.opts.retryBase)
}

// lostClaim: another delivery took ledger/E over; this one must not write.
type lostClaim struct{ id string }

func (e *lostClaim) Error() string { return "ledger-writer: claim on " + e.id + " was taken over" }

// attempt reads back if a write may already have landed, else writes.
func (s *Service) attempt(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, rec record, o *owned, n int) (written, error) {
	if o.readBack {
		w, found, err := s.readBack(ctx, rec, o.c.After, ev.GetId())
		if err != nil {
			return written{}, err
		}
		if found {
			s.deps.Log.Info("ledger-writer: record found by read-back", "event_id", ev.GetId(), "attempt", n)
			return w, nil
		}
		o.readBack = false
	}
	// Re-fence before writing when the last claim write is old: a
	// takeover needs the lease to have run out since it.
	if time.Since(o.fencedAt) > s.opts.lease/4 {
		if err := s.fence(ctx, o); err != nil {
			return written{}, err
		}
	}
	if rec.kind == catalog.RecordIssue {
		return s.gh.createIssue(ctx, rec.owner, rec.repo, rec.title, rec.body, rec.labels)
	}
	return s.gh.createComment(ctx, rec.ref, rec.body)
}

func (s *Service) readBack(ctx context.Context, rec record, after int, id string) (written, bool, error) {
	if rec.kind == catalog.RecordIssue {
		return s.gh.findIssue(ctx, rec.owner, rec.repo, after, s.key, id)
	}
	return s.gh.findComment(ctx, rec.ref, s.key, id)
}

// fence renews this delivery's claim with compare-and-set.
func (s *Service) fence(ctx context.Context, o *owned) error {
	c := o.c
	c.Owner, c.Released, c.ReadBack = s.worker, false, false
	rev, err := s.ledger.Update(ctx, o.id, c.encode(), o.rev)
	if errors.Is(err, bus.ErrWrongRevision) {
		return &lostClaim{id: o.id}
	}
	if err != nil {
		return &failure{err: fmt.Errorf("renew claim: %w", err), reason: "kv"}
	}
	o.rev, o.c, o.fencedAt = rev, c, time.Now()
	return nil
}

// takeOver handles a delivery that found ledger/E already there. done means
// the result is final (recorded: w is the record; failed: err is the
// failure); otherwise o now owns a pending claim.
func (s *Service) takeOver(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, d *bus.Delivery, o *owned) (bool, written, error) {
	for {
		e, err := s.ledger.Get(ctx, o.id)
		if errors.Is(err, bus.ErrNotFound) {
			// Gone between Create and Get (an operator deleted it): claim
			// afresh on the next delivery.
			return true, written{}, bus.Retry(fmt.Errorf("claim %s vanished", o.id), 0)
		}
		if err != nil {
			s.m.retried.WithLabelValues("kv").Inc()
			return true, written{}, bus.Retry(fmt.Errorf("read claim %s: %w", o.id, err), s.backoff(int(d.NumDelivered)))
		}
		c := decodeClaim(e.Value)
		switch c.State {
		case stateRecorded:
			if c.Record == nil {
				break // unreadable record: read back as if pending
			}
			return true, *c.Record, nil
		case stateFailed:
			return true, written{}, s.failed(ctx, ev, d, c.Reason, errors.New(c.Error))
		}
		if !c.Released {
			// The owner may be alive with a write in flight (its NATS
			// link dropped, so E came back to us). Leave it alone until
			// its lease has run out since its last claim write.
			if age := time.Since(e.Created); age < s.opts.lease {
				s.deps.Log.LogAttrs(ctx, slog.LevelInfo, "ledger-writer: claim held by another attempt; waiting out its lease",
					s.logAttrs(ev, d, slog.Duration("wait", s.opts.lease-age))...)
				if err := sleep(ctx, stop, s.opts.lease-age); err != nil {
					return true, written{}, s.interrupted(err)
				}
				continue
			}
		}
		nc := claim{State: statePending, Owner: s.worker, After: c.After}
		rev, err := s.ledger.Update(ctx, o.id, nc.encode(), e.Revision)
		if errors.Is(err, bus.ErrWrongRevision) {
			continue // it moved (or Get was stale): decide again
		}
		if err != nil {
			s.m.retried.WithLabelValues("kv").Inc()
			return true, written{}, bus.Retry(fmt.Errorf("take over claim %s: %w", o.id, err), s.backoff(int(d.NumDelivered)))
		}
		o.rev, o.c, o.fencedAt = rev, nc, time.Now()
		// Only an owner that released with nothing possibly written lets
		// us skip the read-back.
		o.readBack = !c.Released || c.ReadBack || c.State != statePending
		return false, written{}, nil
	}
}

// markRecorded advances ledger/E to recorded.
func (s *Service) markRecorded(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, o *owned, w written, kind catalog.Record) error {
	c := claim{State: stateRecorded, Record: &w}
	for attempt := 1; ; attempt++ {
		_, err := s.ledger.Update(ctx, o.id, c.encode(), o.rev)
		if err == nil {
			break
		}
		if errors.Is(err, bus.ErrWrongRevision) {
			// Someone took the claim over after our write: they will find
			// the record by reading back. Hand the delivery back.
			return bus.Retry(&lostClaim{id: o.id}, 0)
		}
		s.m.retried.WithLabelValues("kv").Inc()
		if err := sleep(ctx, stop, s.backoff(attempt)); err != nil {
			// Not released: the write landed, so the next delivery must
			// read back, which an unreleased claim forces.
			return s.interrupted(err)
		}
	}
	if kind == catalog.RecordIssue {
		s.raiseHighWater(ctx, w.Repo, w.Number)
	}
	s.m.recorded.WithLabelValues(ev.GetType()).Inc()
	s.deps.Events.Emit(ctx, "bus.recorded",
		slog.String("event_id", ev.GetId()), slog.String("event_type", ev.GetType()),
		slog.String("work_item", ev.GetSubject()), slog.String("origin", ev.GetSource()),
		slog.String("repo", w.Repo), slog.Int("issue_number", w.Number), slog.Int64("comment_id", w.CommentID))
	return s.step(stepRecorded, o.id)
}

// release marks the claim as free with no write in flight, so the next
// delivery need not wait out the lease. Best effort: without it the lease
// expires anyway.
func (s *Service) release(ctx context.Context, o *owned) {
	if o.rev == 0 {
		return
	}
	c := o.c
	c.Released, c.ReadBack = true, o.readBack
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer cancel()
	if rev, err := s.ledger.Update(rctx, o.id, c.encode(), o.rev); err == nil {
		o.rev, o.c = rev, c
	}
}
