package eventlog

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Queue takes event-log records off the path of the work they describe: a
// Logger that uses one (Logger.Queued) hands each record to it and returns,
// and one goroutine (Run) encodes, logs and publishes them, in the order
// they were emitted, in batches of whatever arrived meanwhile. Concurrent
// requests then never wait on the log's encoding, its writer's lock or its
// publish. A full queue drops the record and counts it (Dropped): the event
// log never holds up the work.
type Queue struct {
	ch      chan queued
	dropped atomic.Uint64

	mu     sync.RWMutex // closing against putting
	closed bool
	done   chan struct{}
}

type queued struct {
	l     *Logger
	ctx   context.Context
	name  string
	at    time.Time
	attrs []slog.Attr
}

// NewQueue returns a queue holding at most size records.
func NewQueue(size int) *Queue {
	return &Queue{ch: make(chan queued, max(size, 1)), done: make(chan struct{})}
}

// Dropped is how many records a full queue dropped.
func (q *Queue) Dropped() uint64 { return q.dropped.Load() }

// Run writes the queued records until Close, then writes what is left and
// returns.
func (q *Queue) Run() {
	defer close(q.done)
	for r := range q.ch {
		r.l.emit(r.ctx, r.name, r.at, r.attrs)
	}
}

// Close stops taking records (later ones are written at once by the
// emitter) and waits until Run has written the queued ones or ctx ends.
func (q *Queue) Close(ctx context.Context) {
	q.mu.Lock()
	if !q.closed {
		q.closed = true
		close(q.ch)
	}
	q.mu.Unlock()
	select {
	case <-q.done:
	case <-ctx.Done():
	}
}

// put queues r; false when the queue is closed (the caller writes it).
func (q *Queue) put(r queued) bool {
	q.mu.RLock()
	defer q.mu.RUnlock()
	if q.closed {
		return false
	}
	select {
	case q.ch <- r:
	default:
		q.dropped.Add(1)
	}
	return true
}
