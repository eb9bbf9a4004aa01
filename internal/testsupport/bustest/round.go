package bustest

import (
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
)

// PublishEach publishes a scaling round's n events with publish: event i
// belongs to work item i mod items, each work item's events go in order and
// the work items at once, as many senders would (the publisher is not what
// a round measures).
func PublishEach(n, items int, publish func(i, item int) error) error {
	var g errgroup.Group
	for k := range items {
		g.Go(func() error {
			for i := k; i < n; i += items {
				if err := publish(i, k); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// Tally counts a scaling round's events once each, for the replica that
// handled each first, until all n are in.
type Tally struct {
	mu   sync.Mutex
	n    int
	seen map[string]bool
	by   []int
	all  chan struct{}
}

// NewTally expects n events over the given number of replicas.
func NewTally(n, replicas int) *Tally {
	return &Tally{n: n, seen: map[string]bool{}, by: make([]int, replicas), all: make(chan struct{})}
}

// Handled records that replica handled the event id (again, if it is a
// redelivery: counted once).
func (t *Tally) Handled(replica int, id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.seen[id] {
		return
	}
	t.seen[id] = true
	t.by[replica]++
	if len(t.seen) == t.n {
		close(t.all)
	}
}

// Wait waits up to limit for every event, failing tb with what it saw
// otherwise ("<k> of <n> events <what> after <limit>").
func (t *Tally) Wait(tb TB, limit time.Duration, what string) {
	tb.Helper()
	select {
	case <-t.all:
	case <-time.After(limit):
		t.mu.Lock()
		defer t.mu.Unlock()
		tb.Fatalf("%d of %d events %s after %s", len(t.seen), t.n, what, limit)
	}
}

// MaxShare is the busiest replica's share of the events.
func (t *Tally) MaxShare() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return float64(slices.Max(t.by)) / float64(t.n)
}
