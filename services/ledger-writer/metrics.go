package ledgerwriter

import (
	"github.com/the-loop/bus/pkg/service"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the writer's own collectors, on the host's registry (never the
// global one). The runner's (received, redelivered, acked, DLQ copies,
// handler latency) are in pkg/bus under loop_bus_*{service="ledger-writer"}.
type metrics struct {
	recorded   *prometheus.CounterVec // by type
	failed     *prometheus.CounterVec // by type, reason: permanent failures
	retried    *prometheus.CounterVec // by reason: transient failures waited out
	dlq        *prometheus.CounterVec // by type: events this service sent to the DLQ
	published  *prometheus.CounterVec // by type: fan-out events (PubAck received)
	swept      *prometheus.CounterVec // by via: fan-outs published from the outbox for a stopped delivery
	headroom   prometheus.Gauge       // x-ratelimit-remaining of the last response
	configured prometheus.Gauge       // 1 when a GitHub token is configured
	latency    prometheus.Histogram   // delivery start → record on GitHub
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const ns, sub = "loop", "ledger_writer"
	m := &metrics{
		recorded: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "recorded_total", Help: "Events recorded on GitHub (written, or found by a read-back)."}, []string{"type"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "failed_total", Help: "Events that could not be recorded, by reason (permanent failures)."}, []string{"type", "reason"}),
		retried: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "retried_total", Help: "Transient GitHub or bus failures waited out and retried, by reason."}, []string{"reason"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "dlq_total", Help: "Events sent to the dead-letter queue as permanently failed."}, []string{"type"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "published_total", Help: "Fan-out events accepted by LOOP_EVENTS."}, []string{"type"}),
		swept: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "outbox_recovered_total", Help: "Fan-outs a delivery acknowledged but did not publish (it stopped), published from the outbox by the partition's next delivery (flush) or a sweeper (sweep)."}, []string{"via"}),
		headroom: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "github_ratelimit_remaining", Help: "x-ratelimit-remaining of the last GitHub response (primary budget headroom)."}),
		configured: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "github_configured", Help: "1 when LOOP_GITHUB_TOKEN is set; 0 means every recorded event is held."}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "record_duration_seconds", Help: "Time from a delivery's start to its record on GitHub, pacing and retries included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10)}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	m.recorded = register(reg, m.recorded, &err)
	m.failed = register(reg, m.failed, &err)
	m.retried = register(reg, m.retried, &err)
	m.dlq = register(reg, m.dlq, &err)
	m.published = register(reg, m.published, &err)
	m.swept = register(reg, m.swept, &err)
	m.headroom = register(reg, m.headroom, &err)
	m.configured = register(reg, m.configured, &err)
	m.latency = register(reg, m.latency, &err)
	if err != nil {
		return nil, err
	}
	return m, nil
}

// register is service.Adopt that stops at the first error, kept in *errp.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, errp *error) C {
	if *errp != nil {
		return c
	}
	c, *errp = service.Adopt(reg, c)
	return c
}
