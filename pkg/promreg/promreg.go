// Package promreg is the one way the bus and its services register their
// Prometheus collectors: a factory bound to the host's registry, shaped like
// promauto.With, that adopts a collector already registered instead of
// panicking.
//
// Adopting matters because one process may build a service twice on one
// registry (the host restarting a service, replicas in a test, the demo);
// both instances then count into the same series. promauto.With cannot do
// that: it panics on prometheus.AlreadyRegisteredError. See decision 086.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Factory creates collectors and registers them on one registry. A nil
// registry registers nothing (the collectors still count, unexported). The
// first registration error is kept for Err and every later collector is
// still registered, so a caller that tolerates the error keeps counting and
// exports all it can.
type Factory struct {
	reg prometheus.Registerer
	err error
}

// With returns a Factory registering on reg (never the global registry
// unless reg is it).
func With(reg prometheus.Registerer) *Factory {
	return &Factory{reg: reg}
}

// Err is the first registration error, if any.
func (f *Factory) Err() error { return f.err }

// NewCounter creates and registers a counter.
func (f *Factory) NewCounter(o prometheus.CounterOpts) prometheus.Counter {
	return adopt(f, prometheus.NewCounter(o))
}

// NewCounterVec creates and registers a counter vector.
func (f *Factory) NewCounterVec(o prometheus.CounterOpts, labels []string) *prometheus.CounterVec {
	return adopt(f, prometheus.NewCounterVec(o, labels))
}

// NewGauge creates and registers a gauge.
func (f *Factory) NewGauge(o prometheus.GaugeOpts) prometheus.Gauge {
	return adopt(f, prometheus.NewGauge(o))
}

// NewGaugeVec creates and registers a gauge vector.
func (f *Factory) NewGaugeVec(o prometheus.GaugeOpts, labels []string) *prometheus.GaugeVec {
	return adopt(f, prometheus.NewGaugeVec(o, labels))
}

// NewHistogram creates and registers a histogram.
func (f *Factory) NewHistogram(o prometheus.HistogramOpts) prometheus.Histogram {
	return adopt(f, prometheus.NewHistogram(o))
}

// NewHistogramVec creates and registers a histogram vector.
func (f *Factory) NewHistogramVec(o prometheus.HistogramOpts, labels []string) *prometheus.HistogramVec {
	return adopt(f, prometheus.NewHistogramVec(o, labels))
}

// adopt registers c, or returns the identical collector already registered.
func adopt[C prometheus.Collector](f *Factory, c C) C {
	if f.reg == nil {
		return c
	}
	err := f.reg.Register(c)
	if err == nil {
		return c
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing
		}
	}
	if f.err == nil {
		f.err = err
	}
	return c
}
