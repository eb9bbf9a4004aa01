package ingressgithub

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/bus"
)

// Bounds of the seen-bucket writer.
const (
	// markQueue is how many accepted deliveries may wait for their marks;
	// past it a request waits for room (the writer is the bottleneck, and
	// answering faster than marks are kept would widen the gap they close).
	markQueue = 4096
	// markBatch bounds the marks written in one round.
	markBatch = 512
	// markAttempts bounds the tries of one mark before it is given up (the
	// events are on the bus; a redelivery inside the duplicate window is
	// still dropped by Nats-Msg-Id).
	markAttempts = 6
)

// marks remembers in the seen bucket, off the request path, the keys of
// what was published: the delivery and the events whose ids a redelivery
// could not be told by otherwise (decision 050). A request hands its marks
// over once its events are acknowledged and answers at once; one writer
// stores them in rounds, each round's writes sent together and their
// acknowledgements awaited together, so concurrent deliveries share the
// round trips (and the store's syncs overlap) instead of each paying its own
// in series. Until a mark is stored it is pending here, and a redelivery to
// this process is judged by it at once; a redelivery elsewhere inside the
// stream's duplicate window is dropped by Nats-Msg-Id.
type marks struct {
	kv  func(ctx context.Context) (*bus.KV, error)
	log *slog.Logger
	m   *metrics

	once    sync.Once
	queue   chan []bus.KVEntry
	mu      sync.Mutex
	pending map[string]int // keys queued or being written
	waiting sync.WaitGroup // one per queued batch
}

func newMarks(kv func(context.Context) (*bus.KV, error), log *slog.Logger, m *metrics) *marks {
	return &marks{kv: kv, log: log, m: m, queue: make(chan []bus.KVEntry, markQueue), pending: map[string]int{}}
}

// add hands entries to the writer. It waits for room in the queue until ctx
// ends (an error: the marks are not kept).
func (k *marks) add(ctx context.Context, entries []bus.KVEntry) error {
	if len(entries) == 0 {
		return nil
	}
	k.once.Do(func() { go k.write() })
	k.mu.Lock()
	for _, e := range entries {
		k.pending[e.Key]++
	}
	k.mu.Unlock()
	k.waiting.Add(1)
	select {
	case k.queue <- entries:
		return nil
	case <-ctx.Done():
		k.waiting.Done()
		k.release(entries)
		return fmt.Errorf("seen marks: %w", ctx.Err())
	}
}

// has reports whether key waits to be written.
func (k *marks) has(key string) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.pending[key] > 0
}

func (k *marks) release(entries []bus.KVEntry) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, e := range entries {
		if k.pending[e.Key]--; k.pending[e.Key] <= 0 {
			delete(k.pending, e.Key)
		}
	}
}

// flush waits until every mark handed over so far is written or given up,
// or ctx ends.
func (k *marks) flush(ctx context.Context) error {
	done := make(chan struct{})
	go func() { k.waiting.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("seen marks: flush: %w", ctx.Err())
	}
}

// write is the writer: it takes what is queued (at least one batch, at most
// markBatch marks), writes it in one round, and starts over.
func (k *marks) write() {
	for first := range k.queue {
		round := [][]bus.KVEntry{first}
		n := len(first)
	more:
		for n < markBatch {
			select {
			case b := <-k.queue:
				round = append(round, b)
				n += len(b)
			default:
				break more
			}
		}
		entries := make([]bus.KVEntry, 0, n)
		for _, b := range round {
			entries = append(entries, b...)
		}
		k.store(entries)
		for _, b := range round {
			k.release(b)
			k.waiting.Done()
		}
	}
}

// store writes entries, retrying what failed with a growing pause.
func (k *marks) store(entries []bus.KVEntry) {
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		kv, err := k.kv(ctx)
		var failed []bus.KVEntry
		if err == nil {
			failed, err = kv.PutAll(ctx, entries)
		} else {
			failed = entries
		}
		cancel()
		k.m.marks.WithLabelValues("written").Add(float64(len(entries) - len(failed)))
		if len(failed) == 0 {
			return
		}
		if attempt == markAttempts {
			k.m.marks.WithLabelValues("lost").Add(float64(len(failed)))
			// The events are on the bus; a redelivery inside the duplicate
			// window is still dropped by Nats-Msg-Id.
			k.log.Warn("events published but not remembered in the seen bucket", "keys", len(failed), "err", err)
			return
		}
		entries = failed
		time.Sleep(bus.Backoff(attempt, 100*time.Millisecond, 2*time.Second))
	}
}
