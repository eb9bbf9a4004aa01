package ghfake

import (
	"context"
	"errors"
	"math"
	"sync"
	"time"
)

// clock is the fake's notion of time. Every budget (primary window, the
// per-minute and per-hour secondary windows) and every timestamp the fake
// stores is read from now. Header values a client acts on (Retry-After,
// x-ratelimit-reset) pass through toWall and wallDuration first, so that a
// client sleeping on the wall clock (time.Sleep, go-github's own client-side
// rate-limit cache) waits the right amount of scaled time.
type clock struct {
	now func() time.Time
	// scale is how many fake seconds pass per wall second. It is 1 for the
	// real clock and for WithClock, whose values are reported unchanged.
	scale     float64
	wallStart time.Time
	fakeStart time.Time
	// injected is true under WithClock: the fake cannot sleep on a clock it
	// does not own.
	injected bool
}

func realClock() clock {
	return clock{now: time.Now, scale: 1}
}

func scaledClock(factor float64) clock {
	start := time.Now()
	return clock{
		now: func() time.Time {
			// time.Since reads the monotonic clock, so a wall-clock step on
			// the machine does not make fake time jump.
			return start.Add(time.Duration(float64(time.Since(start)) * factor))
		},
		scale:     factor,
		wallStart: start,
		fakeStart: start,
	}
}

func injectedClock(now func() time.Time) clock {
	return clock{now: now, scale: 1, injected: true}
}

// toWall maps an instant of fake time to the wall-clock instant at which the
// fake clock will show it.
func (c clock) toWall(t time.Time) time.Time {
	if c.scale == 1 {
		return t
	}
	return c.wallStart.Add(c.wallDuration(t.Sub(c.fakeStart)))
}

// wallDuration is how long d of fake time lasts on the wall clock.
func (c clock) wallDuration(d time.Duration) time.Duration {
	if c.scale == 1 {
		return d
	}
	return time.Duration(float64(d) / c.scale)
}

// retryAfterSeconds is the Retry-After value for a wait of d fake time: wall
// seconds, rounded up (the header carries whole seconds, and rounding down
// would send the client back before the window opens), at least 1.
func (c clock) retryAfterSeconds(d time.Duration) int64 {
	s := int64(math.Ceil(c.wallDuration(d).Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

// ErrInjectedClock is returned by Server.Sleep under WithClock: the fake does
// not own that clock, so the caller must sleep on it (ManualClock.Sleep).
var ErrInjectedClock = errors.New("ghfake: Sleep cannot wait on a clock injected with WithClock; sleep on that clock instead")

// ManualClock is a settable clock for WithClock(c.Now). Time moves only when
// the test calls Advance, Set or Sleep, so window arithmetic is exact and
// independent of machine load.
type ManualClock struct {
	mu sync.Mutex
	t  time.Time
}

// NewManualClock returns a clock that reads start until moved.
func NewManualClock(start time.Time) *ManualClock {
	return &ManualClock{t: start}
}

// Now returns the clock's current time.
func (c *ManualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Advance moves the clock forward by d.
func (c *ManualClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// Set moves the clock to t. Moving it backwards is allowed but makes the
// fake's windows behave as if the requests in them happened in the future.
func (c *ManualClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// Sleep is a virtual sleep: it advances the clock by d and returns at once,
// or returns ctx.Err() if ctx is already done. Give it to a client under test
// as its sleep function so that honouring a Retry-After of an hour costs
// nothing. Several clients sleeping on one ManualClock each move it forward,
// which can only make windows open sooner than in real time.
func (c *ManualClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d > 0 {
		c.Advance(d)
	}
	return nil
}
