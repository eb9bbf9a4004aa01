package ingressgithub

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/eventlog"
)

// refusals turns the webhook's refusals into counts. Every refusal is
// counted (loop_ingress_github_rejected_total, by reason); the event log
// gets at most one webhook.rejected record per reason per interval, with
// the count since the previous one. Anyone who can reach the endpoint can
// send refused requests without a secret, so a record per request would let
// them write to LOOP_LOG at will (decision 037). The first refusal of a
// quiet reason is recorded at once, so the start of a flood is visible
// without waiting; the rest of the interval is summed and written by the
// next flush, or by the first refusal after the interval.
type refusals struct {
	events *eventlog.Logger
	every  time.Duration
	now    func() time.Time

	mu sync.Mutex
	by map[string]*refusalCount // bounded: reasons are the handler's constants
}

type refusalCount struct {
	status  int
	pending int       // refusals not yet in a record
	last    time.Time // when the last record was written
}

func newRefusals(events *eventlog.Logger, every time.Duration, now func() time.Time) *refusals {
	return &refusals{events: events, every: every, now: now, by: map[string]*refusalCount{}}
}

// add counts one refusal, and records the pending ones when the reason's
// interval has passed.
func (f *refusals) add(ctx context.Context, reason string, status int) {
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

// flush records every reason's pending refusals.
func (f *refusals) flush(ctx context.Context) {
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

func (f *refusals) record(ctx context.Context, reason string, status, count int) {
	f.events.Emit(ctx, "webhook.rejected", slog.String("reason", reason), slog.Int("status", status),
		slog.Int("count", count), slog.String("via", viaWebhook))
}

// run flushes every interval until ctx ends, then once more.
func (f *refusals) run(ctx context.Context) {
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			f.flush(ctx)
		case <-ctx.Done():
			f.flush(context.WithoutCancel(ctx))
			return
		}
	}
}
