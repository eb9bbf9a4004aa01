package rawbench

import (
	"testing"
	"time"
)

// TestPercentile: nearest rank, so of 30 samples the p99 is the worst and
// the p50 the 15th; of none, 0.
func TestPercentile(t *testing.T) {
	var lat []time.Duration
	for i := 1; i <= 30; i++ {
		lat = append(lat, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want float64
	}{{0.50, 15}, {0.90, 27}, {0.99, 30}, {0.01, 1}} {
		if got := Percentile(lat, c.p); got != c.want {
			t.Errorf("Percentile(1..30 ms, %v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 0.99); got != 0 {
		t.Errorf("Percentile(none) = %v, want 0", got)
	}
}
