package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// TestChangingThePartitionCount walks the documented way of changing
// LOOP_PARTITIONS (README, Operations; decision 073) and the two refusals
// that keep it safe: Provision will not change the count while a consumer
// has a message pending (it would be handled after the work item's next
// events, which land in another partition), nor while a replica runs with
// the old count; a runner refuses a stream whose count is not its own. Done
// in order — drain, stop, change, start — every work item's events are
// handled once each and in order across the change, up and back down.
func TestChangingThePartitionCount(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	topo := func(n int) bus.Topology {
		tp := bustest.FastTopology(n)
		tp.Consumers = []bus.ConsumerGroup{{Service: "changer", Stream: bus.StreamInbox}}
		tp.Buckets = []bus.Bucket{}
		return tp
	}
	srv.Provision(t, topo(4))
	c := srv.Connect(t, "changer")
	ctx := context.Background()

	var (
		mu      sync.Mutex
		handled = map[string][]int{} // key → message numbers, in handling order
	)
	handler := bus.HandlerFunc(func(_ context.Context, d *bus.Delivery) error {
		key, n, _ := strings.Cut(string(d.Data), "|")
		var i int
		fmt.Sscan(n, &i)
		mu.Lock()
		handled[key] = append(handled[key], i)
		mu.Unlock()
		return nil
	})
	const keys = 12
	next := 0
	publish := func(per int) int {
		t.Helper()
		for range per {
			for k := range keys {
				key := fmt.Sprintf("github:octo/repo#%d", k)
				if _, err := c.Publish(ctx, bus.Message{
					Subject: catalog.InboxSubject(key, catalog.WorkItemReply),
					MsgID:   fmt.Sprintf("change-%d-%d", k, next),
					Data:    []byte(fmt.Sprintf("%s|%d", key, next)),
				}); err != nil {
					t.Fatal(err)
				}
			}
			next++
		}
		return next * keys
	}
	total := func() int {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, v := range handled {
			n += len(v)
		}
		return n
	}
	start := func(n int) func() {
		t.Helper()
		r, err := c.NewRunner(fastSpec("changer", bus.StreamInbox, n), handler)
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		testkit.WaitWithin(t, 10*time.Second, "runner ready", r.Ready)
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Fatalf("runner: %v", err)
			}
		}
	}
	provision := func(n int) error {
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		return c.Provision(pctx, topo(n))
	}

	stop := start(4)
	want := publish(3)
	testkit.WaitWithin(t, 20*time.Second, "first events handled with 4 partitions", func() bool { return total() == want })
	stop()

	// Events waiting in the inbox: the change is refused, naming them.
	want = publish(2)
	err := provision(8)
	if !errors.Is(err, bus.ErrPartitionChange) || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("provision to 8 with events pending: %v, want ErrPartitionChange naming what is pending", err)
	}
	// A replica still running with the old count: refused too.
	stop = start(4)
	testkit.WaitWithin(t, 20*time.Second, "pending events drained", func() bool { return total() == want })
	err = provision(8)
	if !errors.Is(err, bus.ErrPartitionChange) || !strings.Contains(err.Error(), "runs with 4") {
		t.Fatalf("provision to 8 with a replica running with 4: %v, want ErrPartitionChange naming the replica", err)
	}
	stop()

	// Drained and stopped: the change goes ahead.
	if err := provision(8); err != nil {
		t.Fatalf("provision to 8 after drain and stop: %v", err)
	}
	if n, err := c.StreamPartitions(ctx, bus.StreamInbox); err != nil || n != 8 {
		t.Fatalf("inbox partitions after the change: %d, %v", n, err)
	}
	// A replica left with the old count refuses to consume.
	r4, err := c.NewRunner(fastSpec("changer", bus.StreamInbox, 4), handler)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = r4.Run(rctx)
	cancel()
	if err == nil || !strings.Contains(err.Error(), "8 partitions") {
		t.Fatalf("a runner with 4 partitions on an 8-partition stream: Run = %v, want an error naming the count", err)
	}
	stop = start(8)
	want = publish(3)
	testkit.WaitWithin(t, 20*time.Second, "events handled with 8 partitions", func() bool { return total() == want })
	stop()

	// And back down, the same way.
	if err := provision(4); err != nil {
		t.Fatalf("provision back to 4: %v", err)
	}
	stop = start(4)
	want = publish(2)
	testkit.WaitWithin(t, 20*time.Second, "events handled with 4 partitions again", func() bool { return total() == want })
	stop()

	mu.Lock()
	defer mu.Unlock()
	for key, ns := range handled {
		for i, n := range ns {
			if n != i {
				t.Fatalf("%s: handled %v; want 0..%d once each, in order", key, ns, next-1)
			}
		}
		if len(ns) != next {
			t.Fatalf("%s: %d events handled, want %d", key, len(ns), next)
		}
	}
}
