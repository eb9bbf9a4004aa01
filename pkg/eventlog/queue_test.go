package eventlog

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"
)

// TestQueueKeepsOrderAndDrains: records handed to a queue are written by
// Run in the order they were emitted, each with the time it was emitted;
// Close returns once the queued ones are written; a record emitted after
// Close is written at once rather than lost.
func TestQueueKeepsOrderAndDrains(t *testing.T) {
	rec := &Recorder{}
	q := NewQueue(1024)
	l := New("ingress-github", slog.New(slog.NewTextHandler(io.Discard, nil)), rec).Queued(q)
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	n := 0
	l.now = func() time.Time { n++; return at.Add(time.Duration(n) * time.Millisecond) }
	attrs := []slog.Attr{slog.String("event_id", "first")}
	l.Emit(context.Background(), "bus.published", attrs...)
	attrs[0] = slog.String("event_id", "changed after Emit returned")
	for i := 2; i <= 100; i++ {
		l.Emit(context.Background(), "bus.published", slog.String("event_id", fmt.Sprint(i)))
	}
	if rec.Len() != 0 {
		t.Fatalf("%d records written before Run: Emit did not queue", rec.Len())
	}
	go q.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	q.Close(ctx)
	got := rec.Since(0)
	if len(got) != 100 {
		t.Fatalf("Close returned with %d of 100 records written", len(got))
	}
	for i, r := range got {
		want := fmt.Sprint(i + 1)
		if i == 0 {
			want = "first"
		}
		if r.Fields["event_id"] != want || r.TS != at.Add(time.Duration(i+1)*time.Millisecond).Format("2006-01-02T15:04:05.000Z") {
			t.Fatalf("record %d = %v at %s, want %s at emit time", i, r.Fields["event_id"], r.TS, want)
		}
	}
	l.Emit(context.Background(), "bus.published", slog.String("event_id", "late"))
	if rec.Len() != 101 {
		t.Error("a record emitted after Close was not written")
	}
}

// TestFullQueueDropsAndCounts: a full queue never blocks the emitter; what
// it cannot take is counted.
func TestFullQueueDropsAndCounts(t *testing.T) {
	rec := &Recorder{}
	q := NewQueue(3)
	l := New("ingress-github", slog.New(slog.NewTextHandler(io.Discard, nil)), rec).Queued(q)
	done := make(chan struct{})
	go func() {
		for range 10 {
			l.Emit(context.Background(), "bus.published")
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Emit blocked on a full queue")
	}
	if q.Dropped() != 7 {
		t.Errorf("dropped %d, want 7", q.Dropped())
	}
	go q.Run()
	q.Close(context.Background())
	if rec.Len() != 3 {
		t.Errorf("wrote %d, want the 3 queued", rec.Len())
	}
}
