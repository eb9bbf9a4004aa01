package bus

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkStoreLevers measures, on an embedded server syncing every write
// (as `the-loop up` runs), what two changes to the inbox would buy before
// either is made (docs/performance.md, "Webhook intake"). Messages are
// 20 KiB, the size of a typical webhook's event.
//
//   - ack/raw: one sender publishing with PubAck, nobody consuming — the
//     store's own limit. ack/workqueue: the same while a consumer per
//     partition fetches and double-acks each message of a WorkQueue stream,
//     as the ledger-writer does with LOOP_INBOX: each acknowledgement writes
//     a tombstone, synced, under the stream's lock. ack/limits-trim: the
//     same on a Limits stream, acknowledged messages removed by a purge up
//     to each partition's acknowledged floor every 100 ms — one write per
//     purge instead of one per message. msgs/s of the sender, over the
//     whole run (the consumers done too).
//   - batch/raw: eight senders publishing one message at a time with PubAck,
//     as eight concurrent webhook deliveries do. batch/atomic=8: the same
//     messages published as atomic batches of eight (Nats-Batch-*), which
//     a single server commits with one sync for the batch — the group
//     commit an intake coalescing concurrent deliveries would get;
//     batch/atomic=64 the same in batches of 64.
//
// The load is fixed (-benchtime does not size it); `make bench` prints each
// variant as a ratio to its group's raw.
func BenchmarkStoreLevers(b *testing.B) {
	ctx := context.Background()
	emb, err := StartEmbedded(ctx, EmbeddedOptions{StoreDir: b.TempDir(), Port: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer emb.Shutdown()
	nc, err := nats.Connect("", nats.InProcessServer(emb.srv), nats.Name("bench-levers"))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	data := make([]byte, 20<<10)
	const n, partitions = 2000, 16

	stream := func(name string, retention jetstream.RetentionPolicy, atomicOK bool) string {
		prefix := "lever." + name
		if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
			Name: "LEVER_" + name, Subjects: []string{prefix + ".*.>"}, Retention: retention,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew, Duplicates: 2 * time.Minute,
			SubjectTransform: partitionTransform(prefix, partitions), AllowAtomicPublish: atomicOK,
		}); err != nil {
			b.Fatal(err)
		}
		return prefix
	}
	subject := func(prefix string, i int) string { return fmt.Sprintf("%s.k%d.x", prefix, i%200) }

	// Three rounds, alternating the order of the variants, each its own
	// stream; a variant's rate is its total over its rounds.
	totals := map[string][2]float64{}
	add := func(name string, msgs int, el time.Duration) {
		t := totals[name]
		t[0] += float64(msgs)
		t[1] += el.Seconds()
		totals[name] = t
	}
	for r := range 3 {
		order := []string{"raw", "workqueue", "limits-trim"}
		if r%2 == 1 {
			order = []string{"limits-trim", "workqueue", "raw"}
		}
		for _, v := range order {
			name := fmt.Sprintf("ack_%s_%d", v, r)
			retention := jetstream.WorkQueuePolicy
			if v != "workqueue" {
				retention = jetstream.LimitsPolicy
			}
			prefix := stream(name, retention, false)
			var stop func()
			if v != "raw" {
				stop = consumeAll(b, js, "LEVER_"+name, prefix, partitions, v == "limits-trim")
			}
			start := time.Now()
			for i := range n {
				if _, err := js.Publish(ctx, subject(prefix, i), data, jetstream.WithMsgID(strconv.Itoa(i))); err != nil {
					b.Fatal(err)
				}
			}
			if stop != nil {
				stop()
			}
			add("ack/"+v, n, time.Since(start))
			_ = js.DeleteStream(ctx, "LEVER_"+name)
		}
		order = []string{"raw", "atomic=8", "atomic=64"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		for k, v := range order {
			name := fmt.Sprintf("batch_%d_%d", k, r)
			prefix := stream(name, jetstream.LimitsPolicy, true)
			start := time.Now()
			if v == "raw" {
				publishConcurrently(b, js, 8, n, func(i int) string { return subject(prefix, i) }, data)
			} else {
				size, _ := strconv.Atoi(strings.TrimPrefix(v, "atomic="))
				publishAtomic(b, nc, size, n, func(i int) string { return subject(prefix, i) }, data)
			}
			el := time.Since(start)
			if info, err := js.Stream(ctx, "LEVER_"+name); err != nil || info.CachedInfo().State.Msgs != n {
				b.Fatalf("%s: stream holds the wrong count: %v", v, err)
			}
			add("batch/"+v, n, el)
			_ = js.DeleteStream(ctx, "LEVER_"+name)
		}
	}
	for _, group := range []string{"ack", "batch"} {
		b.Run(group, func(b *testing.B) {
			for _, v := range []string{"raw", "workqueue", "limits-trim", "atomic=8", "atomic=64"} {
				t, ok := totals[group+"/"+v]
				if !ok {
					continue
				}
				rate := t[0] / t[1] // messages over seconds, all rounds
				b.Run(v, func(b *testing.B) {
					b.ReportMetric(rate, "msgs/s")
					b.ReportMetric(1e9/rate, "ns/op")
				})
			}
		})
	}
}

// consumeAll runs a consumer per partition of the stream, one message in
// flight, double-acking each; trim also purges each partition's
// acknowledged messages every 100 ms. The returned func waits until every
// message published so far is acknowledged, then stops them.
func consumeAll(b *testing.B, js jetstream.JetStream, stream, prefix string, partitions int, trim bool) func() {
	ctx, cancel := context.WithCancel(context.Background())
	s, err := js.Stream(ctx, stream)
	if err != nil {
		b.Fatal(err)
	}
	var acked atomic.Int64
	var wg sync.WaitGroup
	cons := make([]jetstream.Consumer, partitions)
	for p := range partitions {
		c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: fmt.Sprintf("p%02d", p), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1,
			FilterSubject: fmt.Sprintf("%s.%d.>", prefix, p),
		})
		if err != nil {
			b.Fatal(err)
		}
		cons[p] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				batch, err := c.Fetch(1, jetstream.FetchMaxWait(200*time.Millisecond))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					if m.DoubleAck(ctx) == nil {
						acked.Add(1)
					}
				}
			}
		}()
	}
	if trim {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(100 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				for p, c := range cons {
					info, err := c.Info(ctx)
					if err != nil || info.AckFloor.Stream == 0 {
						continue
					}
					_ = s.Purge(ctx, jetstream.WithPurgeSubject(fmt.Sprintf("%s.%d.>", prefix, p)),
						jetstream.WithPurgeSequence(info.AckFloor.Stream+1))
				}
			}
		}()
	}
	return func() {
		info, err := s.Info(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		want := int64(info.State.LastSeq)
		for acked.Load() < want {
			time.Sleep(time.Millisecond)
		}
		cancel()
		wg.Wait()
	}
}

// publishConcurrently publishes n messages from senders publishers, each
// waiting for its PubAck before its next.
func publishConcurrently(b *testing.B, js jetstream.JetStream, senders, n int, subject func(int) string, data []byte) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if _, err := js.Publish(context.Background(), subject(i), data, jetstream.WithMsgID(strconv.Itoa(i))); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// publishAtomic publishes n messages as atomic batches of size, one batch
// at a time, each committed by its last message's request.
func publishAtomic(b *testing.B, nc *nats.Conn, size, n int, subject func(int) string, data []byte) {
	for first := 0; first < n; first += size {
		id := fmt.Sprintf("lever-%d-%d", time.Now().UnixNano(), first)
		last := min(first+size, n) - 1
		for i := first; i <= last; i++ {
			m := nats.NewMsg(subject(i))
			m.Data = data
			m.Header.Set(jetstream.MsgIDHeader, strconv.Itoa(i))
			m.Header.Set("Nats-Batch-Id", id)
			m.Header.Set("Nats-Batch-Sequence", strconv.Itoa(i-first+1))
			if i < last {
				if err := nc.PublishMsg(m); err != nil {
					b.Fatal(err)
				}
				continue
			}
			m.Header.Set("Nats-Batch-Commit", "1")
			resp, err := nc.RequestMsg(m, 10*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			if !bytes.HasPrefix(resp.Data, []byte("{")) || bytes.Contains(resp.Data, []byte(`"error"`)) {
				b.Fatalf("batch %s: %s", id, resp.Data)
			}
		}
	}
}
