package bus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/internal/testsupport/rawbench"
)

// BenchmarkPublishConsume measures one event's round trip, publish (with
// PubAck) → handler → DoubleAck confirmed, one message in flight, on an
// embedded server with SyncAlways. "bus" goes through Publish and a Runner
// (pinned priority group, keep-alive, metrics off); "raw" is the same work
// with nats.go JetStream directly (Fetch(1), DoubleAck) on a stream of the
// same shape. Compare the two: absolute times drift on shared machines, the
// ratio does not (decision 054).
func BenchmarkPublishConsume(b *testing.B) {
	ctx := context.Background()
	emb, err := StartEmbedded(ctx, EmbeddedOptions{StoreDir: b.TempDir(), Port: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer emb.Shutdown()
	data := make([]byte, 512)
	// -count reruns a sub-benchmark on the same server: ids must not repeat,
	// or the duplicate window would swallow the messages.
	run := 0
	nonce := func() string { run++; return fmt.Sprint(run, "-") }

	b.Run("bus", func(b *testing.B) {
		c, err := emb.Connect(ctx, Options{Name: "bench-bus"})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		topo := DefaultTopology()
		topo.Consumers = []ConsumerGroup{{Service: "bench", Stream: StreamInbox}}
		topo.Buckets = []Bucket{}
		if err := c.Provision(ctx, topo); err != nil {
			b.Fatal(err)
		}
		done := make(chan struct{}, 1)
		r, err := c.NewRunner(ConsumerSpec{Service: "bench", Stream: StreamInbox, Partitions: topo.Partitions},
			HandlerFunc(func(context.Context, *Delivery) error { return nil }))
		if err != nil {
			b.Fatal(err)
		}
		r.afterSettle = func(*Delivery) { done <- struct{}{} }
		rctx, cancel := context.WithCancel(ctx)
		stopped := make(chan error, 1)
		go func() { stopped <- r.Run(rctx) }()
		defer func() { cancel(); <-stopped }()
		for !r.Ready() {
			time.Sleep(time.Millisecond)
		}
		id := "b" + nonce()
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			if _, err := c.Publish(ctx, Message{Subject: "loop.in.key.bench", Data: data, MsgID: fmt.Sprint(id, i)}); err != nil {
				b.Fatal(err)
			}
			<-done
		}
	})

	b.Run("raw", func(b *testing.B) {
		nc, err := nats.Connect("", nats.InProcessServer(emb.srv), nats.Name("bench-raw"))
		if err != nil {
			b.Fatal(err)
		}
		defer nc.Close()
		rawbench.RoundTrip(b, nc, jetstream.StreamConfig{
			Name: "RAW", Subjects: []string{"raw.in.*.>"}, SubjectTransform: partitionTransform("raw.in", 16),
		}, "raw.in.key.bench", data)
	})
}
