package bus

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerState is one durable consumer's position, for the status page and
// metrics.
type ConsumerState struct {
	Name string
	// Pending: messages of its filter not yet delivered; AckPending:
	// delivered, not yet acknowledged; Redelivered: of those, delivered
	// more than once.
	Pending, AckPending, Redelivered uint64
	// Delivered and AckFloor are stream sequences: the last delivered, and
	// the one below which every message is acknowledged.
	Delivered, AckFloor uint64
	// Waiting: pull requests waiting (a running replica leaves one).
	Waiting int
}

// ConsumerStats returns the state of stream's consumer name.
func (c *Conn) ConsumerStats(ctx context.Context, stream, name string) (ConsumerState, error) {
	cons, err := c.js.Consumer(ctx, stream, name)
	if err != nil {
		return ConsumerState{}, fmt.Errorf("bus: consumer %s on %s: %w", name, stream, err)
	}
	info := cons.CachedInfo()
	return ConsumerState{
		Name: name, Pending: info.NumPending, AckPending: uint64(info.NumAckPending),
		Redelivered: uint64(info.NumRedelivered), Delivered: info.Delivered.Stream, AckFloor: info.AckFloor.Stream,
		Waiting: info.NumWaiting,
	}, nil
}

// stateScrapeTimeout bounds one scrape's questions to the server.
const stateScrapeTimeout = 3 * time.Second

// StateCollector exports the bus's state as Prometheus gauges, asked of the
// server at every scrape: the DLQ depth, each stream's messages, and per
// partition of each consumer group the pending, unacknowledged and
// redelivered messages. A host registers one for the groups its services
// consume; the DLQ depth is the same in every host.
type StateCollector struct {
	conn       *Conn
	streams    []string
	groups     []ConsumerGroup
	partitions int

	dlq, messages, pending, ackPending, redelivered *prometheus.Desc
}

// NewStateCollector reports streams and groups (partitions each) over conn.
func NewStateCollector(conn *Conn, streams []string, groups []ConsumerGroup, partitions int) *StateCollector {
	part := []string{"service", "stream", "partition"}
	return &StateCollector{
		conn: conn, streams: streams, groups: groups, partitions: partitions,
		dlq:      prometheus.NewDesc("loop_dlq_depth", "Dead letters waiting in LOOP_DLQ for an operator (the-loop dlq list, replay).", nil, nil),
		messages: prometheus.NewDesc("loop_stream_messages", "Messages stored in a stream.", []string{"stream"}, nil),
		pending: prometheus.NewDesc("loop_consumer_pending",
			"Messages of a partition not yet delivered to its consumer.", part, nil),
		ackPending: prometheus.NewDesc("loop_consumer_ack_pending",
			"Messages of a partition delivered and not yet acknowledged (at most one: a partition is worked in order).", part, nil),
		redelivered: prometheus.NewDesc("loop_consumer_redelivered",
			"Messages of a partition delivered more than once and not yet acknowledged: a handler failing and retrying.", part, nil),
	}
}

// Describe implements prometheus.Collector.
func (s *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{s.dlq, s.messages, s.pending, s.ackPending, s.redelivered} {
		ch <- d
	}
}

// Collect implements prometheus.Collector. What the server does not answer
// in time is left out of this scrape rather than reported as zero.
func (s *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), stateScrapeTimeout)
	defer cancel()
	for _, name := range s.streams {
		st, err := s.conn.StreamStats(ctx, name)
		if err != nil {
			continue
		}
		ch <- prometheus.MustNewConstMetric(s.messages, prometheus.GaugeValue, float64(st.Msgs), name)
		if name == StreamDLQ {
			ch <- prometheus.MustNewConstMetric(s.dlq, prometheus.GaugeValue, float64(st.Msgs))
		}
	}
	for _, g := range s.groups {
		for p := range s.partitions {
			cs, err := s.conn.ConsumerStats(ctx, g.Stream, ConsumerName(g.Service, p))
			if err != nil {
				continue
			}
			labels := []string{g.Service, g.Stream, strconv.Itoa(p)}
			ch <- prometheus.MustNewConstMetric(s.pending, prometheus.GaugeValue, float64(cs.Pending), labels...)
			ch <- prometheus.MustNewConstMetric(s.ackPending, prometheus.GaugeValue, float64(cs.AckPending), labels...)
			ch <- prometheus.MustNewConstMetric(s.redelivered, prometheus.GaugeValue, float64(cs.Redelivered), labels...)
		}
	}
}
