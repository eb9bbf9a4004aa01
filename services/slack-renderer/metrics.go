package slackrenderer

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/promreg"
)

// metrics are the service's Prometheus series (decision 053). A metrics error
// never fails a delivery.
type metrics struct {
	delivered   *prometheus.CounterVec // outcome: posted, updated, recovered
	skipped     *prometheus.CounterVec // reason
	failed      *prometheus.CounterVec // error code
	rateLimited prometheus.Counter
	latency     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.With(reg)
	m := &metrics{
		delivered: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_slack_renderer_delivered_total",
			Help: "Events rendered in Slack, by outcome: posted (a new message), updated (a redelivery edited the message), recovered (a message posted before a crash was found and edited).",
		}, []string{"outcome"}),
		skipped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_slack_renderer_skipped_total",
			Help: "Events acknowledged without a Slack message, by reason.",
		}, []string{"reason"}),
		failed: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_slack_renderer_failed_total",
			Help: "Failed Slack writes, by error code (retried or dead-lettered).",
		}, []string{"error"}),
		rateLimited: f.NewCounter(prometheus.CounterOpts{
			Name: "loop_slack_renderer_rate_limited_total",
			Help: "Slack answers with HTTP 429 (Retry-After honoured by a delayed redelivery).",
		}),
		latency: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "loop_slack_renderer_delivery_seconds",
			Help:    "Time to deliver one event to Slack, pacing included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	return m, nil
}
