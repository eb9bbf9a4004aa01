package bus

import (
	"math/rand/v2"
	"time"
)

// Backoff is the wait before retry attempt (1-based) of something that
// failed: "full jitter", a uniformly random duration in
// [0, min(max, base·2^(attempt-1))]. The randomness spreads retries that
// failed together (every partition behind one GitHub outage) instead of
// sending them back in step; the cap bounds the worst case, which is what an
// operator reasons about (see the README's Operations). It is the one backoff
// of the bus's runner and of the services that retry inside a delivery.
func Backoff(attempt int, base, max time.Duration) time.Duration {
	if base <= 0 || max <= 0 {
		return 0
	}
	return rand.N(BackoffCeiling(attempt, base, max) + 1)
}

// BackoffCeiling is the longest wait Backoff can return for attempt:
// min(max, base·2^(attempt-1)).
func BackoffCeiling(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < max; i++ {
		d *= 2
	}
	return min(d, max)
}
