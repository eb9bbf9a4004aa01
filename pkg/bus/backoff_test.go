package bus

import (
	"testing"
	"time"
)

// TestBackoff: every wait lies in [0, min(max, base·2^(n-1))], the ceiling
// doubles up to max, and the waits are spread (jittered), not one value.
func TestBackoff(t *testing.T) {
	t.Parallel()
	const base, max = 100 * time.Millisecond, 2 * time.Second
	for n, want := range map[int]time.Duration{1: base, 2: 2 * base, 3: 4 * base, 5: 16 * base, 6: max, 60: max, 0: base} {
		if got := BackoffCeiling(n, base, max); got != want {
			t.Errorf("ceiling(%d) = %s, want %s", n, got, want)
		}
		seen := map[time.Duration]bool{}
		for range 200 {
			d := Backoff(n, base, max)
			if d < 0 || d > want {
				t.Fatalf("Backoff(%d) = %s, outside [0, %s]", n, d, want)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("Backoff(%d): %d distinct waits in 200, want jitter", n, len(seen))
		}
	}
	if d := Backoff(3, 0, max); d != 0 {
		t.Errorf("no base: %s", d)
	}
}
