package bus_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

func TestProvisionIdempotent(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	topo := bustest.FastTopology(4)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// Several provisioning runs at once (a step retried while the last
	// one still runs), on a server that has nothing yet.
	var g errgroup.Group
	for i := range 4 {
		ci := srv.Connect(t, fmt.Sprintf("provision-%d", i+1))
		g.Go(func() error { return ci.Provision(ctx, topo) })
	}
	if err := g.Wait(); err != nil {
		t.Fatalf("concurrent provision: %v", err)
	}
	c := srv.Connect(t, "provision-0")
	for i := range 2 {
		if err := c.Provision(ctx, topo); err != nil {
			t.Fatalf("provision again #%d: %v", i+1, err)
		}
	}
	for stream, want := range map[string]int{
		bus.StreamInbox:  4,     // ledger-writer
		bus.StreamEvents: 2 * 4, // slack-renderer, dispatcher
	} {
		st, err := c.StreamStats(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if st.Consumers != want {
			t.Errorf("%s has %d consumers, want %d", stream, st.Consumers, want)
		}
	}
	for _, b := range topo.Buckets {
		if _, err := c.KV(ctx, b.Name); err != nil {
			t.Errorf("bucket %s: %v", b.Name, err)
		}
	}
	for _, s := range []string{bus.StreamDLQ, bus.StreamLog, bus.StreamAdvisories} {
		if _, err := c.StreamStats(ctx, s); err != nil {
			t.Errorf("stream %s: %v", s, err)
		}
	}
}

func TestProvisionRejectsDeliverNewOnInbox(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	topo := bustest.FastTopology(2)
	topo.Consumers = []bus.ConsumerGroup{{Service: "x", Stream: bus.StreamInbox, DeliverNew: true}}
	c := srv.Connect(t, "p")
	if err := c.Provision(context.Background(), topo); err == nil {
		t.Fatal("provision accepted DeliverNew on the work-queue inbox")
	}
}

// delivered collects deliveries.
type delivered struct {
	mu sync.Mutex
	ds []*bus.Delivery
}

func (d *delivered) handler() bus.Handler {
	return bus.HandlerFunc(func(ctx context.Context, dv *bus.Delivery) error {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.ds = append(d.ds, dv)
		return nil
	})
}

func (d *delivered) get() []*bus.Delivery {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*bus.Delivery(nil), d.ds...)
}

// runRunner runs a runner until the test ends.
func runRunner(t *testing.T, c *bus.Conn, spec bus.ConsumerSpec, h bus.Handler) *bus.Runner {
	t.Helper()
	r, err := c.NewRunner(spec, h)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("runner: %v", err)
		}
	})
	testkit.WaitWithin(t, 10*time.Second, "runner ready", r.Ready)
	return r
}

func fastSpec(service, stream string, n int) bus.ConsumerSpec {
	return bus.ConsumerSpec{
		Service: service, Stream: stream, Partitions: n,
		RetryBase: 10 * time.Millisecond, RetryMax: 50 * time.Millisecond,
	}
}

// TestPartitionTransform checks on the real server that the stream transform
// loop.in.*.> → loop.in.{{partition(N,1)}}.{{wildcard(1)}}.> carries a type of
// any number of tokens, that a key always lands in one partition, and that the
// stored subject carries exactly one partition token.
func TestPartitionTransform(t *testing.T) {
	t.Parallel()
	const n = 16
	srv := bustest.NewServer(t)
	topo := bustest.FastTopology(n)
	srv.Provision(t, topo)
	c := srv.Connect(t, "transform")
	var got delivered
	runRunner(t, c, fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, n), got.handler())

	ctx := context.Background()
	types := []catalog.Type{"a", catalog.WorkItemReply, "x.y.z.w"}
	const keys = 40
	for k := range keys {
		for i, typ := range types {
			ref := fmt.Sprintf("github:octo/Repo.x#%d", k)
			if _, err := c.Publish(ctx, bus.Message{
				Subject: catalog.InboxSubject(ref, typ),
				MsgID:   fmt.Sprintf("t-%d-%d", k, i),
				Data:    []byte(ref),
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	testkit.WaitWithin(t, 20*time.Second, "all delivered", func() bool { return len(got.get()) == keys*len(types) })
	partOf := map[string]int{}
	used := map[int]bool{}
	for _, d := range got.get() {
		prefix, p, key, typ, ok := catalog.ParseSubject(d.Subject, true)
		if !ok || prefix != catalog.InboxPrefix || strconv.Itoa(d.Partition) != p {
			t.Fatalf("stored subject %q (partition %d) is not loop.in.<p>.<key>.<type>", d.Subject, d.Partition)
		}
		if key != catalog.SubjectKey(string(d.Data)) || key != d.Key || typ != d.Type {
			t.Fatalf("stored subject %q: key %q type %q; delivery key %q type %q", d.Subject, key, typ, d.Key, d.Type)
		}
		if !strings.HasSuffix(d.Subject, "."+string(typ)) || (typ != "a" && typ != catalog.WorkItemReply && typ != "x.y.z.w") {
			t.Fatalf("type lost in %q", d.Subject)
		}
		if prev, seen := partOf[key]; seen && prev != d.Partition {
			t.Fatalf("key %s in partitions %d and %d", key, prev, d.Partition)
		}
		// The client-side mirror of the transform, which benchmarks and
		// `the-loop partitions` rely on, agrees with the server.
		if got := bus.PartitionOf(key, n); got != d.Partition {
			t.Fatalf("PartitionOf(%q, %d) = %d, the server stored it in %d", key, n, got, d.Partition)
		}
		partOf[key] = d.Partition
		used[d.Partition] = true
	}
	if len(used) < n/2 {
		t.Fatalf("%d keys used only %d of %d partitions", keys, len(used), n)
	}
}

// TestStoredSubjectIsTransformedAgain documents why a stored subject must
// never be published as is (and why ReplayDLQ un-partitions): the transform
// matches it a second time and adds a second partition token.
func TestStoredSubjectIsTransformedAgain(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(4))
	c := srv.Connect(t, "twice")
	var got delivered
	runRunner(t, c, fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, 4), got.handler())
	ctx := context.Background()
	if _, err := c.Publish(ctx, bus.Message{Subject: "loop.in.k.t", MsgID: "1"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 10*time.Second, "first delivery", func() bool { return len(got.get()) == 1 })
	stored := got.get()[0].Subject
	if _, err := c.Publish(ctx, bus.Message{Subject: stored, MsgID: "2"}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 10*time.Second, "second delivery", func() bool { return len(got.get()) == 2 })
	again := got.get()[1].Subject
	if strings.Count(again, ".") != strings.Count(stored, ".")+1 || !strings.HasSuffix(again, strings.TrimPrefix(stored, "loop.in")) {
		t.Fatalf("republished %q stored as %q, want one more partition token", stored, again)
	}
}

func TestPublishNeedsKeyAndType(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	c := srv.Connect(t, "one-token")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// loop.in.<key> alone would escape the transform and never be consumed;
	// the inbox does not capture it, so the publish fails.
	// (No responders is retried like a timeout, so bound it.)
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	_, err := c.Publish(sctx, bus.Message{Subject: "loop.in.onlykey", MsgID: "x"})
	if err == nil {
		t.Fatal("publish to loop.in.<key> without a type succeeded")
	}
	for _, s := range []string{"", "loop.in.*.x", "loop.in.>", "loop..in", "loop.in.k.t."} {
		if _, err := c.Publish(ctx, bus.Message{Subject: s, MsgID: "x"}); err == nil {
			t.Errorf("publish to %q succeeded", s)
		}
	}
}
