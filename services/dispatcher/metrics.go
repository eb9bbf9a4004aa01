package dispatcher

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/promreg"
)

// metrics are the dispatcher's Prometheus series (decision 053). A metrics
// error never fails a delivery.
type metrics struct {
	deliveries *prometheus.CounterVec // outcome: delivered, spawned, respawned, failed
	spawns     *prometheus.CounterVec // kind: spawn, respawn, resume, refused, failed
	dropped    *prometheus.CounterVec // reason
	control    *prometheus.CounterVec // command, effect (or rejected, ambiguous)
	elsewhere  prometheus.Counter
	depth      prometheus.Gauge
	// sessionRefused counts refused session-endpoint requests, by reason.
	sessionRefused *prometheus.CounterVec
	// gateWait is how long human gates waited for the answer that moved
	// them on, by the gate's kind.
	gateWait *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	f := promreg.With(reg)
	m := &metrics{
		deliveries: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_dispatcher_deliveries_total",
			Help: "Events typed into agent sessions, by outcome: delivered (pasted), spawned (boot prompt of a new session), respawned (boot prompt of a respawned one), failed (retried).",
		}, []string{"outcome"}),
		spawns: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_dispatcher_spawns_total",
			Help: "Session starts, by kind: spawn, respawn (fresh conversation), resume, refused (name held by a live session), failed.",
		}, []string{"kind"}),
		dropped: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_dispatcher_dropped_total",
			Help: "Events not delivered to a session, by dispatch.dropped reason.",
		}, []string{"reason"}),
		control: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_dispatcher_control_total",
			Help: "Control commands, by command and effect (rejected and ambiguous included).",
		}, []string{"command", "effect"}),
		elsewhere: f.NewCounter(prometheus.CounterOpts{
			Name: "loop_dispatcher_hosted_elsewhere_total",
			Help: "Sessions taken over from another replica whose lease was still fresh (the partition moved here).",
		}),
		sessionRefused: f.NewCounterVec(prometheus.CounterOpts{
			Name: "loop_dispatcher_session_refused_total",
			Help: "Requests to the session endpoint refused, by reason: no-token, bad-token, no-session, other-work-item, hosted-elsewhere, empty-question, bad-request, too-large, registry-unavailable, human-gate.",
		}, []string{"reason"}),
		gateWait: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "loop_gate_wait_seconds",
			Help:    "Time a work item waited at a human gate until a person's answer moved it on, by the gate's classifier (feedback: approvals and reviews; reply: decisions; execute: the start).",
			Buckets: []float64{60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 24 * 3600, 3 * 24 * 3600, 7 * 24 * 3600},
		}, []string{"gate"}),
		depth: f.NewGauge(prometheus.GaugeOpts{
			Name: "loop_dispatcher_queue_depth",
			Help: "Messages waiting in LOOP_EVENTS behind the one being handled, in its partition, sampled per event (loop_bus_consumer_pending has every consumer's).",
		}),
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	// Every kind is exported from the start, so that a dashboard and an
	// alert find the series before the first gate moves.
	for _, c := range []graph.Classifier{graph.Feedback, graph.Reply, graph.Execute} {
		m.gateWait.WithLabelValues(string(c))
	}
	return m, nil
}

// observeDepth samples the queue depth behind d, as the server counted it
// when it delivered d: no request per event.
func (s *Service) observeDepth(_ context.Context, d *bus.Delivery) {
	s.m.depth.Set(float64(d.Pending))
}
