// Package rawbench is the baseline the benchmarks measure the bus against:
// the raw nats.go JetStream path it wraps, with nothing of ours on it. It
// imports nothing of the bus, so pkg/bus's own benchmarks use it too.
package rawbench

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// B is what RoundTrip needs of a benchmark; *testing.B satisfies it, and
// this package does not import testing outside its tests
// (docs/decisions/081-test-support-tree.md).
type B interface {
	Helper()
	Fatal(args ...any)
	ResetTimer()
	Loop() bool
}

// RoundTrip benchmarks the baseline: one message at a time, as a partition
// is worked — publish with a Nats-Msg-Id, PubAck, pull, DoubleAck.
// stream gives the stream's Name, Subjects and any SubjectTransform; the rest
// is set here as the bus's inbox has it (work queue, file storage, discard
// new, a 2 h duplicate window). Each op publishes data to subject.
func RoundTrip(b B, nc *nats.Conn, stream jetstream.StreamConfig, subject string, data []byte) {
	b.Helper()
	ctx := context.Background()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	stream.Retention, stream.Storage = jetstream.WorkQueuePolicy, jetstream.FileStorage
	stream.Discard, stream.Duplicates = jetstream.DiscardNew, 2*time.Hour
	if _, err := js.CreateOrUpdateStream(ctx, stream); err != nil {
		b.Fatal(err)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, stream.Name, jetstream.ConsumerConfig{
		Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, AckWait: time.Minute,
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{}, 1)
	rctx, cancel := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for rctx.Err() == nil {
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				continue
			}
			for m := range batch.Messages() {
				if err := m.DoubleAck(ctx); err == nil {
					done <- struct{}{}
				}
			}
		}
	}()
	defer func() { cancel(); <-stopped }()
	// Ids unique across the runs b.Loop makes in one stream.
	id := fmt.Sprintf("raw-%d-", time.Now().UnixNano())
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		if _, err := js.Publish(ctx, subject, data, jetstream.WithMsgID(fmt.Sprint(id, i))); err != nil {
			b.Fatal(err)
		}
		<-done
	}
}

// RoundTripAt is RoundTrip on a connection of its own to the server at url,
// for a stream named name that holds subjects: for benchmarks outside
// package bus, which import no NATS client.
func RoundTripAt(b B, url, name string, subjects []string, subject string, data []byte) {
	b.Helper()
	nc, err := nats.Connect(url, nats.Name("bench-raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	RoundTrip(b, nc, jetstream.StreamConfig{Name: name, Subjects: subjects}, subject, data)
}

// Took collects durations by name, in the order each name was first seen:
// a path's hops or end points, for a benchmark to report.
type Took struct {
	Names []string
	By    map[string][]time.Duration
}

// Add appends d to name's durations.
func (t *Took) Add(name string, d time.Duration) {
	if t.By == nil {
		t.By = map[string][]time.Duration{}
	}
	if _, ok := t.By[name]; !ok {
		t.Names = append(t.Names, name)
	}
	t.By[name] = append(t.By[name], d)
}

// Report reports each name's p50 and p99 in milliseconds, as
// "<name>-p50-ms" and "<name>-p99-ms" (of few samples, the p99 is their
// worst).
func (t *Took) Report(b interface{ ReportMetric(float64, string) }) {
	for _, name := range t.Names {
		lat := slices.Clone(t.By[name])
		slices.Sort(lat)
		b.ReportMetric(Percentile(lat, 0.50), name+"-p50-ms")
		b.ReportMetric(Percentile(lat, 0.99), name+"-p99-ms")
	}
}

// Percentile is the p-th quantile (0 < p <= 1) of sorted, in milliseconds:
// the sample of rank p·n rounded to the nearest, so of few samples the p99
// is their worst. Of none, 0.
func Percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := max(0, min(int(p*float64(len(sorted))+0.5)-1, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Millisecond)
}
