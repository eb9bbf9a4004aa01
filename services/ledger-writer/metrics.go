package ledgerwriter

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/promreg"
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
	f := promreg.With(reg)
	const ns, sub = "loop", "ledger_writer"
	m := &metrics{
		recorded: f.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "recorded_total", Help: "Events recorded on GitHub (written, or found by a read-back)."}, []string{"type"}),
		failed: f.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "failed_total", Help: "Events that could not be recorded, by reason (permanent failures)."}, []string{"type", "reason"}),
		retried: f.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "retried_total", Help: "Transient GitHub or bus failures waited out and retried, by reason."}, []string{"reason"}),
		dlq: f.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "dlq_total", Help: "Events sent to the dead-letter queue as permanently failed."}, []string{"type"}),
		published: f.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "published_total", Help: "Fan-out events accepted by LOOP_EVENTS."}, []string{"type"}),
		swept: f.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub,
			Name: "outbox_recovered_total", Help: "Fan-outs a delivery acknowledged but did not publish (it stopped), published from the outbox by the partition's next delivery (flush) or a sweeper (sweep)."}, []string{"via"}),
		headroom: f.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "github_ratelimit_remaining", Help: "x-ratelimit-remaining of the last GitHub response (primary budget headroom)."}),
		configured: f.NewGauge(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub,
			Name: "github_configured", Help: "1 when LOOP_GITHUB_TOKEN is set; 0 means every recorded event is held."}),
		latency: f.NewHistogram(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub,
			Name: "record_duration_seconds", Help: "Time from a delivery's start to its record on GitHub, pacing and retries included.",
			Buckets: prometheus.ExponentialBuckets(0.005, 4, 10)}),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
