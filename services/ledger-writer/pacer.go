package ledgerwriter

import (
	"context"
	"time"

	"golang.org/x/time/rate"
)

// pacer keeps content-creating requests under GitHub's secondary limits for
// one credential, so a burst queues here instead of tripping a 403 that
// GitHub may punish with a ban ("continuing to make requests while you are
// rate limited may result in the banning of your integration").
//
// Each limit is a token bucket sized so that no window of its length can
// hold more than 90% of the limit: a bucket of burst b and rate r admits at
// most b + r·T requests in any window T, so b + r·T = 0.9·limit. The 10%
// covers the spread between our clock and GitHub's and the network delay
// between taking a token and GitHub counting the request.
type pacer struct {
	limiters []*rate.Limiter
}

// newPacer paces perMinute and perHour content writes (0 disables one).
// scale > 1 makes time run faster, for tests against a scaled ghfake.
func newPacer(perMinute, perHour int, scale float64) *pacer {
	if scale <= 0 {
		scale = 1
	}
	p := &pacer{}
	for _, l := range []struct {
		limit int
		per   time.Duration
	}{{perMinute, time.Minute}, {perHour, time.Hour}} {
		if l.limit <= 0 {
			continue
		}
		budget := max(l.limit*9/10, 1)
		burst := max(budget/10, 1)
		perSec := float64(budget-burst) / l.per.Seconds() * scale
		if budget == burst {
			perSec = float64(budget) / l.per.Seconds() * scale
		}
		p.limiters = append(p.limiters, rate.NewLimiter(rate.Limit(perSec), burst))
	}
	return p
}

// wait blocks until every bucket has a token for one write, or until ctx
// ends or stop closes (then nothing is taken).
func (p *pacer) wait(ctx context.Context, stop <-chan struct{}) error {
	if p == nil || len(p.limiters) == 0 {
		return nil
	}
	now := time.Now()
	var delay time.Duration
	rs := make([]*rate.Reservation, 0, len(p.limiters))
	for _, l := range p.limiters {
		r := l.ReserveN(now, 1)
		rs = append(rs, r)
		delay = max(delay, r.DelayFrom(now))
	}
	if delay <= 0 {
		return nil
	}
	if err := sleep(ctx, stop, delay); err != nil {
		for _, r := range rs {
			r.Cancel()
		}
		return err
	}
	return nil
}
