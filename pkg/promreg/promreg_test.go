package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestAdoptsTheRegisteredCollector: a second factory on one registry hands
// back the collectors the first registered, so both count into one series.
func TestAdoptsTheRegisteredCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	opts := prometheus.CounterOpts{Name: "loop_test_total", Help: "A test counter."}
	a, b := With(reg), With(reg)
	ca := a.NewCounterVec(opts, []string{"kind"})
	cb := b.NewCounterVec(opts, []string{"kind"})
	if a.Err() != nil || b.Err() != nil {
		t.Fatalf("errors: %v, %v", a.Err(), b.Err())
	}
	ca.WithLabelValues("x").Inc()
	cb.WithLabelValues("x").Inc()
	if got := testutil.ToFloat64(ca.WithLabelValues("x")); got != 2 {
		t.Fatalf("shared series = %v, want 2", got)
	}
	if n := testutil.CollectAndCount(reg, "loop_test_total"); n != 1 {
		t.Fatalf("series on the registry = %d, want 1", n)
	}
}

// TestKeepsTheFirstErrorAndRegistersTheRest: a conflicting descriptor is an
// error, and the collectors after it are still registered.
func TestKeepsTheFirstErrorAndRegistersTheRest(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	f := With(reg)
	f.NewGauge(prometheus.GaugeOpts{Name: "loop_test_clash", Help: "A gauge."})
	f.NewGauge(prometheus.GaugeOpts{Name: "loop_test_clash", Help: "Another help text."})
	if f.Err() == nil {
		t.Fatal("a conflicting descriptor registered without an error")
	}
	h := f.NewHistogram(prometheus.HistogramOpts{Name: "loop_test_seconds", Help: "A histogram."})
	h.Observe(1)
	if n := testutil.CollectAndCount(reg, "loop_test_seconds"); n != 1 {
		t.Fatalf("histogram after the error: %d series, want 1", n)
	}
}

// TestNilRegistry: without a registry the collectors count, unregistered.
func TestNilRegistry(t *testing.T) {
	t.Parallel()
	f := With(nil)
	c := f.NewCounter(prometheus.CounterOpts{Name: "loop_test_nil_total", Help: "A counter."})
	c.Inc()
	if f.Err() != nil || testutil.ToFloat64(c) != 1 {
		t.Fatalf("err %v, value %v", f.Err(), testutil.ToFloat64(c))
	}
}
