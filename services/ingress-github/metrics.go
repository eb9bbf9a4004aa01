package ingressgithub

import (
	"github.com/the-loop/bus/services/runtime"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// metrics are the service's Prometheus metrics, on the host's registry.
// A metrics error never fails a request.
type metrics struct {
	received  *prometheus.CounterVec // by event, via
	rejected  *prometheus.CounterVec // HTTP rejections, by reason
	published *prometheus.CounterVec // by type, via
	dropped   *prometheus.CounterVec // by reason, via
	latency   prometheus.Histogram   // PubAck latency of one event
	poll      *prometheus.CounterVec // GitHub requests of the poller, by result
	cycles    *prometheus.CounterVec // poll cycles, by result
	unsigned  prometheus.Counter     // deliveries accepted without a signature check
	inflight  prometheus.Gauge       // webhook requests holding a slot
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_received_total", Help: "GitHub deliveries received (webhook) or synthesised (poll), by event.",
		}, []string{"event", "via"}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_rejected_total", Help: "Webhook requests refused before routing, by reason (over-capacity, invalid-signature, payload-too-large, …).",
		}, []string{"reason"}),
		published: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_published_total", Help: "Catalog events accepted by the bus (PubAck), by type.",
		}, []string{"type", "via"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_dropped_total", Help: "Deliveries that became no event, by reason.",
		}, []string{"reason", "via"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "loop_ingress_github_publish_seconds", Help: "Time from publish to PubAck of one event.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
		poll: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_poll_requests_total", Help: "GitHub REST requests of the poller, by result (ok, not_modified, error).",
		}, []string{"result"}),
		cycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_github_poll_cycles_total", Help: "Poll cycles, by result.",
		}, []string{"result"}),
		unsigned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loop_ingress_github_unverified_total", Help: "Webhook deliveries accepted without a signature check (insecure mode).",
		}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "loop_ingress_github_webhook_inflight", Help: "Webhook requests being handled (at most LOOP_GITHUB_WEBHOOK_CONCURRENCY).",
		}),
	}
	if reg == nil {
		return m
	}
	m.received = runtime.AdoptOrKeep(reg, m.received)
	m.rejected = runtime.AdoptOrKeep(reg, m.rejected)
	m.published = runtime.AdoptOrKeep(reg, m.published)
	m.dropped = runtime.AdoptOrKeep(reg, m.dropped)
	m.latency = runtime.AdoptOrKeep(reg, m.latency)
	m.poll = runtime.AdoptOrKeep(reg, m.poll)
	m.cycles = runtime.AdoptOrKeep(reg, m.cycles)
	m.unsigned = runtime.AdoptOrKeep(reg, m.unsigned)
	m.inflight = runtime.AdoptOrKeep(reg, m.inflight)
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
