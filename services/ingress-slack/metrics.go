package ingressslack

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/promreg"
)

// metrics are the service's Prometheus metrics, on the host's registry
// (never the global one). A metrics error never fails a message.
type metrics struct {
	received   *prometheus.CounterVec // messages and presses, by via and kind
	published  *prometheus.CounterVec // events accepted by the bus, by type and via
	dropped    *prometheus.CounterVec // by reason and via
	duplicates *prometheus.CounterVec // PubAck said duplicate (a Slack retry), by via
	rejected   *prometheus.CounterVec // HTTP requests refused before the pipeline, by reason
	inflight   prometheus.Gauge       // Events API requests holding a slot
	retried    *prometheus.CounterVec // messages left for Slack or the next poll to bring again, by via
	acks       prometheus.Counter     // Socket Mode envelopes acknowledged
	latency    prometheus.Histogram   // publish to PubAck
	slackCalls *prometheus.CounterVec // Web API calls of the poller, by method and result
	ratelimit  *prometheus.CounterVec // Slack 429s, by method
	told       *prometheus.CounterVec // ephemeral answers to refused gate presses, by result
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promreg.With(reg)
	m := &metrics{
		received: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_received_total", Help: "Slack messages and button presses received, by transport and kind.",
		}, []string{"via", "kind"}),
		published: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_published_total", Help: "Catalog events accepted by the bus (PubAck), by type and transport.",
		}, []string{"type", "via"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_dropped_total", Help: "Messages that became no event, by reason and transport.",
		}, []string{"reason", "via"}),
		duplicates: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_dedup_hits_total", Help: "Publishes the inbox recognised as a duplicate id (Slack retries, redeliveries).",
		}, []string{"via"}),
		rejected: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_rejected_total", Help: "Events API requests refused before the pipeline, by reason.",
		}, []string{"reason"}),
		inflight: f.NewGauge(prometheus.GaugeOpts{
			Name: "loop_ingress_slack_events_inflight", Help: "Events API requests being handled (at most 64 by default; one more is answered 503).",
		}),
		retried: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_retried_total", Help: "Messages not settled because the bus or KV failed; Slack or the next poll brings them again.",
		}, []string{"via"}),
		acks: f.NewCounter(prometheus.CounterOpts{
			Name: "loop_ingress_slack_socket_acks_total", Help: "Socket Mode envelopes acknowledged.",
		}),
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name: "loop_ingress_slack_publish_seconds", Help: "Time from publish to PubAck of one event.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2.5, 12),
		}),
		slackCalls: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_poll_requests_total", Help: "Slack Web API calls of the poller, by method and result (ok, error, ratelimited).",
		}, []string{"method", "result"}),
		ratelimit: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_ratelimited_total", Help: "Slack answers of 429 (rate limited), by method.",
		}, []string{"method"}),
		told: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_ingress_slack_presser_told_total", Help: "Ephemeral answers (chat.postEphemeral) to people whose gate button press was refused, by result (ok, error).",
		}, []string{"result"}),
	}
	// A registration error is not fatal here: the service keeps counting
	// into the collector, which is simply not exported.
	return m
}
