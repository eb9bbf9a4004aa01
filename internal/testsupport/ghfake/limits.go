package ghfake

import (
	"net/http"
	"sort"
	"strconv"
	"time"
)

// anonLimit is GitHub's primary limit for unauthenticated requests.
const anonLimit = 60

// primaryWindow is one token's primary budget. Like GitHub's, the window is
// fixed: it opens with the first request and resets an hour later, whatever
// happened in between.
type primaryWindow struct {
	limit int
	used  int
	reset time.Time
}

func (w *primaryWindow) remaining() int {
	if w.limit <= 0 {
		return 0
	}
	return max(w.limit-w.used, 0)
}

func (w *primaryWindow) exhausted() bool { return w.limit > 0 && w.used >= w.limit }

// primaryLocked returns the current window of the token (key "" for
// unauthenticated requests), opening a new one if the last has reset.
func (s *Server) primaryLocked(key string, now time.Time) *primaryWindow {
	w := s.primary[key]
	if w == nil || !now.Before(w.reset) {
		limit := s.cfg.primaryLimit
		if key == "" {
			limit = anonLimit
		}
		w = &primaryWindow{limit: limit, reset: now.Add(time.Hour)}
		s.primary[key] = w
	}
	return w
}

// setRateHeaders writes the five x-ratelimit headers GitHub sends on every
// response. With the primary limit disabled the fake still sends them, with
// GitHub's default limit, so that clients that parse them see numbers.
func (s *Server) setRateHeaders(h http.Header, w *primaryWindow) {
	limit, remaining := w.limit, w.remaining()
	if limit <= 0 {
		limit, remaining = 5000, 5000
	}
	h.Set("X-RateLimit-Limit", strconv.Itoa(limit))
	h.Set("X-RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("X-RateLimit-Used", strconv.Itoa(w.used))
	h.Set("X-RateLimit-Reset", strconv.FormatInt(s.clk.toWall(w.reset).Unix(), 10))
	h.Set("X-RateLimit-Resource", "core")
}

// writeLog holds the times of a token's accepted content-creating requests
// over the last hour, oldest first. The secondary windows slide: GitHub
// does not say how it counts, and a sliding window is the strictest reading
// of "no more than 80 per minute", so a client that passes here passes
// there.
type writeLog struct {
	times []time.Time
}

// wait reports how long the token must wait before its next
// content-creating request is accepted; 0 means now.
func (l *writeLog) wait(now time.Time, perMinute, perHour int) time.Duration {
	hourAgo := now.Add(-time.Hour)
	i := 0
	for i < len(l.times) && !l.times[i].After(hourAgo) {
		i++
	}
	l.times = l.times[i:]

	var wait time.Duration
	if n := len(l.times); perHour > 0 && n >= perHour {
		// The request becomes acceptable when enough of the oldest
		// entries have left the hour for fewer than perHour to remain.
		wait = max(wait, l.times[n-perHour].Add(time.Hour).Sub(now))
	}
	if perMinute > 0 {
		minuteAgo := now.Add(-time.Minute)
		first := sort.Search(len(l.times), func(j int) bool { return l.times[j].After(minuteAgo) })
		if m := len(l.times) - first; m >= perMinute {
			wait = max(wait, l.times[first+m-perMinute].Add(time.Minute).Sub(now))
		}
	}
	return wait
}

// secondaryLocked charges one content-creating request to the token's
// secondary budgets, or returns the refusal GitHub would send.
func (s *Server) secondaryLocked(c *call) *response {
	l := s.writeLogs[c.token]
	if l == nil {
		l = &writeLog{}
		s.writeLogs[c.token] = l
	}
	if wait := l.wait(c.now, s.cfg.perMinute, s.cfg.perHour); wait > 0 {
		s.counts.SecondaryLimited++
		resp := s.errorResponse(s.cfg.secondaryStatus,
			"You have exceeded a secondary rate limit. Please wait a few minutes before you try again. "+
				"If you reach out to GitHub Support for help, please include the request ID "+c.requestID+".",
			// go-github recognises a secondary limit by this suffix.
			"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits")
		resp.header.Set("Retry-After", strconv.FormatInt(s.clk.retryAfterSeconds(wait), 10))
		return resp
	}
	l.times = append(l.times, c.now)
	return nil
}
