package ingressgithub

import (
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/promreg"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// metrics are the service's Prometheus metrics, on the host's registry.
// A metrics error never fails a request.
type metrics struct {
	received  *prometheus.CounterVec   // by event, via
	rejected  *prometheus.CounterVec   // HTTP rejections, by reason
	published *prometheus.CounterVec   // by type, via
	dropped   *prometheus.CounterVec   // by reason, via
	latency   prometheus.Histogram     // PubAck latency of one delivery's events
	intake    *prometheus.HistogramVec // webhook request to answer, by result
	marks     *prometheus.CounterVec   // seen marks written or given up
	poll      *prometheus.CounterVec   // GitHub requests of the poller, by result
	cycles    *prometheus.CounterVec   // poll cycles, by result
	unsigned  prometheus.Counter       // deliveries accepted without a signature check
	inflight  prometheus.Gauge         // webhook requests holding a slot
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promreg.With(reg)
	m := &metrics{
		received: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_received_total", Help: "GitHub deliveries received (webhook) or synthesised (poll), by event.",
		}, []string{"event", "via"}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_rejected_total", Help: "Webhook requests refused before routing, by reason (over-capacity, invalid-signature, payload-too-large, …).",
		}, []string{"reason"}),
		published: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_published_total", Help: "Catalog events accepted by the bus (PubAck), by type.",
		}, []string{"type", "via"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_dropped_total", Help: "Deliveries that became no event, by reason.",
		}, []string{"reason", "via"}),
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "loop_ingress_github_publish_seconds", Help: "Time from publishing a delivery's events (together) to their PubAcks.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
		intake: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loop_ingress_github_intake_seconds",
			Help:    "Webhook intake latency: from the request to its answer, by result (accepted: 202, the events stored; dropped: 200; refused: 4xx or 503 before routing; unavailable: 503, the bus down or full).",
			Buckets: []float64{.00025, .0005, .001, .002, .004, .008, .016, .032, .064, .128, .256, .512, 1, 2, 4, 8},
		}, []string{"result"}),
		marks: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_seen_marks_total", Help: "Seen-bucket marks of published deliveries, by result (written, or lost after retries: a redelivery past the duplicate window would be published again).",
		}, []string{"result"}),
		poll: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_poll_requests_total", Help: "GitHub REST requests of the poller, by result (ok, not_modified, error).",
		}, []string{"result"}),
		cycles: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_poll_cycles_total", Help: "Poll cycles, by result.",
		}, []string{"result"}),
		unsigned: f.NewCounter(prometheus.CounterOpts{
			Name: "loop_ingress_github_unverified_total", Help: "Webhook deliveries accepted without a signature check (insecure mode).",
		}),
		inflight: f.NewGauge(prometheus.GaugeOpts{
			Name: "loop_ingress_github_webhook_inflight", Help: "Webhook requests being handled (at most LOOP_GITHUB_WEBHOOK_CONCURRENCY).",
		}),
	}
	// A registration error is not fatal here: the service keeps counting
	// into the collector, which is simply not exported.
	return m
}

// eventLabel bounds the label's values: an unsigned (insecure) request
// could otherwise mint a time series per header value.
func eventLabel(event string) string {
	if event == "ping" || slices.Contains(route.DefaultEvents, event) {
		return event
	}
	return "other"
}
