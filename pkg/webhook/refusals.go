package webhook

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/eventlog"
)

// RecordType is the event-log record Refusals writes.
const RecordType = "webhook.rejected"

// Refusals turns an endpoint's refusals into counts. The caller counts every
// refusal in its own metric; the event log gets at most one webhook.rejected
// record per reason per interval, with the count since the previous one.
// Anyone who can reach the endpoint can send refused requests without a
// secret, so a record per request would let them write to the event log at
// will (decision 037). The first refusal of a quiet reason is recorded at
// once, so the start of a flood is visible without waiting; the rest of the
// interval is summed and written by the next Flush, or by the first refusal
// after the interval.
type Refusals struct {
	events *eventlog.Logger
	via    string
	every  time.Duration
	now    func() time.Time

	mu sync.Mutex
	by map[string]*refusalCount // bounded: reasons are the caller's constants
}

type refusalCount struct {
	status  int
	pending int       // refusals not yet in a record
	last    time.Time // when the last record was written
}

// NewRefusals records the refusals of the endpoint via names (the records'
// via field) to events, at most once per reason per every, on the clock
// now (time.Now when nil).
func NewRefusals(events *eventlog.Logger, via string, every time.Duration, now func() time.Time) *Refusals {
	if now == nil {
		now = time.Now
	}
	return &Refusals{events: events, via: via, every: every, now: now, by: map[string]*refusalCount{}}
}

// Add counts one refusal, and records the pending ones when the reason's
// interval has passed. reason must come from a fixed set: it keys a map
// that is never pruned.
func (f *Refusals) Add(ctx context.Context, reason string, status int) {
	now := f.now()
	f.mu.Lock()
	c := f.by[reason]
	if c == nil {
		c = &refusalCount{}
		f.by[reason] = c
	}
	c.status = status
	c.pending++
	n := 0
	if c.last.IsZero() || now.Sub(c.last) >= f.every {
		n, c.pending, c.last = c.pending, 0, now
	}
	f.mu.Unlock()
	if n > 0 {
		f.record(ctx, reason, status, n)
	}
}

// Flush records every reason's pending refusals, in the order of the
// reasons' names.
func (f *Refusals) Flush(ctx context.Context) {
	type rec struct {
		reason        string
		status, count int
	}
	var out []rec
	now := f.now()
	f.mu.Lock()
	for reason, c := range f.by {
		if c.pending > 0 {
			out = append(out, rec{reason, c.status, c.pending})
			c.pending, c.last = 0, now
		}
	}
	f.mu.Unlock()
	slices.SortFunc(out, func(a, b rec) int { return cmp.Compare(a.reason, b.reason) })
	for _, r := range out {
		f.record(ctx, r.reason, r.status, r.count)
	}
}

func (f *Refusals) record(ctx context.Context, reason string, status, count int) {
	f.events.Emit(ctx, RecordType, slog.String("reason", reason), slog.Int("status", status),
		slog.Int("count", count), slog.String("via", f.via))
}

// Run flushes every interval until ctx ends, then once more.
func (f *Refusals) Run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.Flush(ctx)
		case <-ctx.Done():
			f.Flush(context.WithoutCancel(ctx))
			return
		}
	}
}
