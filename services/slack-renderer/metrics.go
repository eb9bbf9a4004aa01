package slackrenderer

import (
	"github.com/the-loop/bus/pkg/service"

	"github.com/prometheus/client_golang/prometheus"
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
	m := &metrics{
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_slack_renderer_delivered_total",
			Help: "Events rendered in Slack, by outcome: posted (a new message), updated (a redelivery edited the message), recovered (a message posted before a crash was found and edited).",
		}, []string{"outcome"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_slack_renderer_skipped_total",
			Help: "Events acknowledged without a Slack message, by reason.",
		}, []string{"reason"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_slack_renderer_failed_total",
			Help: "Failed Slack writes, by error code (retried or dead-lettered).",
		}, []string{"error"}),
		rateLimited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "loop_slack_renderer_rate_limited_total",
			Help: "Slack answers with HTTP 429 (Retry-After honoured by a delayed redelivery).",
		}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "loop_slack_renderer_delivery_seconds",
			Help:    "Time to deliver one event to Slack, pacing included.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 12),
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.delivered, err = adopt(reg, m.delivered); err != nil {
		return nil, err
	}
	if m.skipped, err = adopt(reg, m.skipped); err != nil {
		return nil, err
	}
	if m.failed, err = adopt(reg, m.failed); err != nil {
		return nil, err
	}
	if m.rateLimited, err = adopt(reg, m.rateLimited); err != nil {
		return nil, err
	}
	if m.latency, err = adopt(reg, m.latency); err != nil {
		return nil, err
	}
	return m, nil
}

// adopt is service.Adopt.
func adopt[T prometheus.Collector](reg prometheus.Registerer, c T) (T, error) {
	return service.Adopt(reg, c)
}
