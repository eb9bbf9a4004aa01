package bustest

// Restarts and takeovers: the server restarting under a runner, a standby
// replica taking over a pinned partition.

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
)

func testServerRestart(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{InProcessOnly: true}, nil)
	const total, before = 20, 8
	const key = "github:octo/repo#restart"
	for n := range total {
		h.publish(key, n, fmt.Sprintf("gh:restart-%d", n))
	}
	var rc recorder
	c := h.srv.Connect(t, "r1")
	var handled atomic.Int32
	stopAfter := make(chan struct{})
	r1 := h.start(c, h.spec(), bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		key, n := parseData(d.Data)
		rc.add(record{replica: "r1", key: key, n: n, msgID: d.MsgID, delivered: d.NumDelivered, ok: true})
		if handled.Add(1) == before {
			close(stopAfter)
		}
		return nil
	}))
	select {
	case <-stopAfter:
	case <-time.After(20 * time.Second):
		t.Fatal("first runner did not handle its messages")
	}
	// Drain: the in-flight handler (the 8th) finishes and is acked.
	if err := r1.stop(t); err != nil {
		t.Fatalf("runner: %v", err)
	}
	got1 := rc.snapshot()
	h.srv.Restart(t)
	// Same connection: it reconnects on its own.
	r2 := h.start(c, h.spec(), rc.handler("r2", nil))
	testkit.WaitWithin(t, 30*time.Second, "the rest delivered after the restart", func() bool { return rc.count(ok) >= total })
	_ = r2
	all := rc.snapshot()
	if len(all) != total {
		t.Fatalf("handled %d messages, want %d: %+v", len(all), total, all)
	}
	for i, r := range all {
		if r.n != i {
			t.Fatalf("message %d handled at position %d (acked ones redelivered or order broken): %+v", r.n, i, all)
		}
		if i >= len(got1) && r.replica != "r2" {
			t.Fatalf("unexpected record %+v", r)
		}
	}
	if len(got1) < before {
		t.Fatalf("first runner handled %d, want at least %d", len(got1), before)
	}
}

func testRunnerSurvivesRestart(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{InProcessOnly: true}, nil)
	var rc recorder
	r := h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", nil))
	const key = "github:octo/repo#survive"
	for n := range 3 {
		h.publish(key, n, fmt.Sprintf("gh:survive-%d", n))
	}
	testkit.WaitWithin(t, 10*time.Second, "messages before the restart", func() bool { return rc.count(ok) >= 3 })
	h.srv.Restart(t)
	// Publish retries under its msg id while the publisher reconnects.
	for n := 3; n < 6; n++ {
		h.publish(key, n, fmt.Sprintf("gh:survive-%d", n))
	}
	testkit.WaitWithin(t, 30*time.Second, "messages after the restart", func() bool { return rc.count(ok) >= 6 })
	testkit.WaitWithin(t, 10*time.Second, "runner ready again", r.r.Ready)
	for i, rec := range rc.snapshot() {
		if rec.n != i {
			t.Fatalf("records %+v out of order", rc.snapshot())
		}
	}
}

func testStandby(t TB, opts ConformanceOptions) {
	const pinnedTTL = 2 * time.Second
	h := newHarness(t, opts, Options{}, func(topo *bus.Topology) {
		topo.Partitions = 1
		topo.PinnedTTL = pinnedTTL
	})
	var rc recorder
	const key = "github:octo/repo#pin"
	a := h.start(h.srv.Connect(t, "replica-a"), h.spec(), rc.handler("a", nil))
	h.publish(key, 0, "gh:pin-0")
	testkit.WaitWithin(t, 10*time.Second, "first message on the pinned replica", func() bool { return rc.count(ok) == 1 })
	h.start(h.srv.Connect(t, "replica-b"), h.spec(), rc.handler("b", nil))
	// Keep messages coming for longer than PinnedTTL: the pin must survive
	// on the live replica's pull requests, not time out to the standby.
	n := 1
	for end := time.Now().Add(pinnedTTL + pinnedTTL/2); time.Now().Before(end); n++ {
		h.publish(key, n, fmt.Sprintf("gh:pin-%d", n))
		testkit.WaitWithin(t, 10*time.Second, "message handled", func() bool { return rc.count(ok) == n+1 })
		time.Sleep(pinnedTTL / 6) // spread the publishes over the window on purpose
	}
	if got := rc.count(func(r record) bool { return r.replica == "b" }); got != 0 {
		t.Fatalf("standby handled %d messages while the pinned replica was alive", got)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("stop pinned replica: %v", err)
	}
	stopped := time.Now()
	h.publish(key, n, fmt.Sprintf("gh:pin-%d", n))
	testkit.WaitWithin(t, 10*time.Second, "standby takes over", func() bool { return rc.count(ok) == n+1 })
	if took := time.Since(stopped); took > pinnedTTL/2 {
		t.Fatalf("standby took over after %s; a clean stop should unpin at once (PinnedTTL %s)", took, pinnedTTL)
	}
	recs := rc.snapshot()
	if last := recs[len(recs)-1]; last.replica != "b" || last.n != n {
		t.Fatalf("last record %+v, want message %d on the standby", last, n)
	}
}
