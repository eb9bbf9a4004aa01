package bustest

// The delivery guarantees: one stored copy per id, order per key, nothing
// lost to a killed replica.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
)

func testDedup(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{}, nil)
	first := h.publish("github:octo/repo#1", 0, "gh:dup-1")
	if first.Duplicate {
		t.Fatalf("first publish reported duplicate: %+v", first)
	}
	for range 3 {
		again := h.publish("github:octo/repo#1", 0, "gh:dup-1")
		if !again.Duplicate || again.Seq != first.Seq {
			t.Fatalf("re-publish = %+v, want duplicate of seq %d", again, first.Seq)
		}
	}
	other := h.publish("github:octo/repo#1", 1, "gh:dup-2")
	if other.Duplicate || other.Seq == first.Seq {
		t.Fatalf("a new id was treated as a duplicate: %+v", other)
	}
	ctx := context.Background()
	st, err := h.pub.StreamStats(ctx, opts.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if st.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (one per id)", st.Msgs)
	}
	var rc recorder
	h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", nil))
	testkit.WaitWithin(t, 10*time.Second, "both messages handled", func() bool { return rc.count(ok) >= 2 })
	if opts.Stream == bus.StreamInbox {
		// Acked work-queue messages leave the stream.
		testkit.WaitWithin(t, 5*time.Second, "inbox empty after acks", func() bool {
			st, err := h.pub.StreamStats(ctx, opts.Stream)
			return err == nil && st.Msgs == 0
		})
	}
	recs := rc.snapshot()
	if len(recs) != 2 || recs[0].msgID == recs[1].msgID {
		t.Fatalf("handled %+v, want the two ids once each", recs)
	}
}

func testOrder(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{}, nil)
	const keys, perKey = 24, 12
	var rc recorder
	// Every key's message 3 fails on its first delivery: a retry must hold
	// the partition, not let message 4 overtake it.
	fail := func(d *bus.Delivery) error {
		if _, n := parseData(d.Data); n == 3 && d.NumDelivered == 1 {
			return bus.Retry(errors.New("transient"), 20*time.Millisecond)
		}
		return nil
	}
	spec := h.spec()
	h.start(h.srv.Connect(t, "replica-a"), spec, rc.handler("a", fail))
	h.start(h.srv.Connect(t, "replica-b"), spec, rc.handler("b", fail))
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("github:octo/repo#%d", k)
			h.publish(key, n, fmt.Sprintf("gh:order-%d-%d", k, n))
		}
	}
	testkit.WaitWithin(t, 60*time.Second, "every message handled", func() bool { return rc.count(ok) >= keys*perKey })
	next := map[string]int{}
	for _, r := range rc.snapshot() {
		if !r.ok {
			continue
		}
		if r.n != next[r.key] {
			t.Fatalf("key %s: handled message %d, want %d (out of order or duplicated)", r.key, r.n, next[r.key])
		}
		next[r.key]++
	}
	if len(next) != keys {
		t.Fatalf("%d keys handled, want %d", len(next), keys)
	}
	for k, n := range next {
		if n != perKey {
			t.Fatalf("key %s: %d messages handled, want %d", k, n, perKey)
		}
	}
	if retried := rc.count(func(r record) bool { return !r.ok }); retried != keys {
		t.Fatalf("%d failed deliveries, want %d", retried, keys)
	}
}

func testKilled(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{}, nil)
	var rc recorder
	started := make(chan string, 2)
	release := make(chan struct{})
	// The first delivery blocks its replica as if the process hung mid-call.
	blockFirst := func(replica string) bus.Handler {
		return bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
			key, n := parseData(d.Data)
			if n == 0 && d.NumDelivered == 1 {
				started <- replica
				select {
				case <-release:
				case <-ctx.Done():
				}
				return errors.New("killed")
			}
			rc.add(record{replica: replica, key: key, n: n, msgID: d.MsgID, delivered: d.NumDelivered, ok: true})
			return nil
		})
	}
	conns := map[string]*bus.Conn{
		"a": h.srv.Connect(t, "replica-a"),
		"b": h.srv.Connect(t, "replica-b"),
	}
	spec := h.spec()
	for name, c := range conns {
		h.start(c, spec, blockFirst(name))
	}
	// Registered after the runners' own cleanups, so it runs before them.
	t.Cleanup(func() { close(release) })
	const key = "github:octo/repo#7"
	h.publish(key, 0, "gh:killed-0")
	var victim string
	select {
	case victim = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no replica received the message")
	}
	// Kill the victim's connection: no ack, no nak, no unpin.
	conns[victim].Close()
	survivor := "a"
	if victim == "a" {
		survivor = "b"
	}
	for n := 1; n <= 3; n++ {
		h.publish(key, n, fmt.Sprintf("gh:killed-%d", n))
	}
	testkit.WaitWithin(t, 20*time.Second, "all four messages handled by the survivor", func() bool { return rc.count(ok) >= 4 })
	recs := rc.snapshot()
	for i, r := range recs {
		if r.replica != survivor || r.n != i {
			t.Fatalf("handled %+v; want messages 0..3 in order on replica %s", recs, survivor)
		}
	}
	if recs[0].delivered != 2 {
		t.Fatalf("message 0 delivered %d times, want 2 (the killed delivery plus one)", recs[0].delivered)
	}
}
