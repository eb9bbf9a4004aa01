package webhook

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/eventlog"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRefusalsSummarised: the first refusal of a reason is recorded at once;
// the rest of the interval is one record carrying their count, written by
// the first refusal after the interval or by Flush; the records account for
// every refusal and name the endpoint.
func TestRefusalsSummarised(t *testing.T) {
	rec := &eventlog.Recorder{}
	c := &clock{t: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	f := NewRefusals(eventlog.New("ingress-test", slog.New(slog.DiscardHandler), rec), "events", time.Minute, c.now)
	ctx := context.Background()
	for i := range 500 {
		f.Add(ctx, "bad-signature", 401)
		if i%5 == 0 {
			f.Add(ctx, "too-large", 413)
		}
	}
	if n := rec.Len(); n != 2 {
		t.Fatalf("600 refusals of two reasons in one interval: %d records, want 2", n)
	}
	c.add(time.Minute)
	f.Add(ctx, "bad-signature", 401) // writes the 499 pending and itself
	f.Flush(ctx)                     // writes too-large's 99
	f.Flush(ctx)                     // nothing pending
	counted := map[string]int{}
	for _, r := range rec.Since(0) {
		if r.Event != RecordType || r.Fields["via"] != "events" {
			t.Errorf("record %s via %v, want %s via events", r.Event, r.Fields["via"], RecordType)
		}
		n, _ := r.Fields["count"].(float64)
		counted[fmt.Sprint(r.Fields["reason"], "/", r.Fields["status"])] += int(n)
	}
	if want := "map[bad-signature/401:501 too-large/413:100]"; fmt.Sprint(counted) != want {
		t.Errorf("records count %v, want %s", counted, want)
	}
	if n := rec.Len(); n != 4 {
		t.Errorf("%d records, want 4", n)
	}
}

// TestRefusalsRunFlushesAtTheEnd: Run writes what is pending when its
// context ends.
func TestRefusalsRunFlushesAtTheEnd(t *testing.T) {
	rec := &eventlog.Recorder{}
	f := NewRefusals(eventlog.New("ingress-test", slog.New(slog.DiscardHandler), rec), "webhook", time.Hour, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	for range 3 {
		f.Add(ctx, "over-capacity", 503)
	}
	cancel()
	<-done
	if got := rec.Find(RecordType, map[string]any{"reason": "over-capacity"}); len(got) != 2 || got[1].Fields["count"] != float64(2) {
		t.Errorf("records %v, want the first at once and the other two at the end", got)
	}
}
