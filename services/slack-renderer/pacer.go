package slackrenderer

import (
	"context"
	"sync"
	"time"
)

// pacer spaces the writes to one Slack channel: the partitions run in
// parallel, but chat.postMessage allows about one message per second per
// channel, so posts from every partition to the same channel take turns.
// After a 429 the whole channel waits out the Retry-After, not only the
// partition that got it. Pacing only avoids 429s; correctness never depends
// on it (a 429 is retried in order anyway).
type pacer struct {
	interval time.Duration
	mu       sync.Mutex
	next     map[string]time.Time
}

func newPacer(interval time.Duration) *pacer {
	return &pacer{interval: interval, next: map[string]time.Time{}}
}

// wait blocks until channel may be written to, and books the slot.
func (p *pacer) wait(ctx context.Context, channel string) error {
	p.mu.Lock()
	now := time.Now()
	at := now
	if n := p.next[channel]; n.After(now) {
		at = n
	}
	p.next[channel] = at.Add(p.interval)
	p.mu.Unlock()
	if d := at.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// block keeps channel closed for d (a Retry-After).
func (p *pacer) block(channel string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if until := time.Now().Add(d); until.After(p.next[channel]) {
		p.next[channel] = until
	}
}
