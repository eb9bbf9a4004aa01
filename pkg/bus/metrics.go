package bus

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/promreg"
)

// Metrics are the consumer runner's Prometheus collectors, labelled by
// service. Create one per registry and share it between runners.
type Metrics struct {
	received    *prometheus.CounterVec
	redelivered *prometheus.CounterVec
	acked       *prometheus.CounterVec
	nakd        *prometheus.CounterVec
	dlqd        *prometheus.CounterVec
	errors      *prometheus.CounterVec
	latency     *prometheus.HistogramVec
	owned       *prometheus.GaugeVec
	pending     *prometheus.GaugeVec
}

// NewMetrics registers the runner's collectors on reg (never the global
// registry) the one way the services do (pkg/promreg). Registering twice on
// one registry returns the collectors already there.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	f := promreg.With(reg)
	counter := func(name, help string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{
			Namespace: "loop", Subsystem: "bus", Name: name, Help: help,
		}, []string{"service"})
	}
	m := &Metrics{
		received:    counter("received_total", "Deliveries handed to a handler."),
		redelivered: counter("redelivered_total", "Deliveries that were not the first of their message."),
		acked:       counter("acked_total", "Messages acknowledged after their handler succeeded."),
		nakd:        counter("nakd_total", "Deliveries negatively acknowledged for a later retry."),
		dlqd:        counter("dlq_total", "Messages copied to the dead-letter queue and terminated."),
		errors:      counter("settle_errors_total", "Acks, naks or dead-letter copies that failed."),
		latency: f.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "loop", Subsystem: "bus", Name: "handler_duration_seconds",
			Help:    "Time a handler took per delivery.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"service"}),
		owned: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "loop", Subsystem: "bus", Name: "partitions_owned",
			Help: "Partitions this process's replica of the service owns (its share of the service's partitions).",
		}, []string{"service"}),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "loop", Subsystem: "bus", Name: "consumer_pending",
			Help: "Messages a partition consumer has not acknowledged yet: waiting in its partition, plus the one in flight. Read from each delivery and, idle or stuck, from the server every few seconds.",
		}, []string{"service", "consumer"}),
	}
	if err := f.Err(); err != nil {
		return nil, fmt.Errorf("bus: metrics: %w", err)
	}
	return m, nil
}

// serviceMetrics is Metrics bound to one service; its zero value (nil
// Metrics) records nothing.
type serviceMetrics struct {
	received, redelivered, acked, nakd, dlqd, errors prometheus.Counter
	latency                                          prometheus.Observer
	owned                                            prometheus.Gauge
	// pending is the gauge of one consumer, by name (nil: not recorded).
	pending func(consumer string) prometheus.Gauge
}

func (m *Metrics) forService(service string) serviceMetrics {
	if m == nil {
		return serviceMetrics{}
	}
	return serviceMetrics{
		received:    m.received.WithLabelValues(service),
		redelivered: m.redelivered.WithLabelValues(service),
		acked:       m.acked.WithLabelValues(service),
		nakd:        m.nakd.WithLabelValues(service),
		dlqd:        m.dlqd.WithLabelValues(service),
		errors:      m.errors.WithLabelValues(service),
		latency:     m.latency.WithLabelValues(service),
		owned:       m.owned.WithLabelValues(service),
		pending:     func(consumer string) prometheus.Gauge { return m.pending.WithLabelValues(service, consumer) },
	}
}

func (m serviceMetrics) setOwned(n int) {
	if m.owned != nil {
		m.owned.Set(float64(n))
	}
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}
