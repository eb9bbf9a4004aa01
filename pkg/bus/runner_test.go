package bus_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

func TestNewRunnerValidatesSpec(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	c := srv.Connect(t, "spec")
	h := bus.HandlerFunc(func(context.Context, *bus.Delivery) error { return nil })
	for _, spec := range []bus.ConsumerSpec{
		{Stream: bus.StreamInbox},
		{Service: "x", Stream: bus.StreamDLQ},
		{Service: "x"},
	} {
		if _, err := c.NewRunner(spec, h); err == nil {
			t.Errorf("NewRunner(%+v) accepted", spec)
		}
	}
	if _, err := c.NewRunner(bus.ConsumerSpec{Service: "x", Stream: bus.StreamInbox}, nil); err == nil {
		t.Error("NewRunner accepted a nil handler")
	}
}

// TestRunnerDrainsAndCounts checks the shutdown contract (stop fetching, let
// the in-flight handler finish, ack it, return), readiness, and the metrics.
func TestRunnerDrainsAndCounts(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	c := srv.Connect(t, "drain")
	reg := prometheus.NewPedanticRegistry()
	m, err := bus.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if m2, err := bus.NewMetrics(reg); err != nil || m2 == nil {
		t.Fatalf("second NewMetrics on one registry: %v", err)
	}
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	var handlerCtxErr error
	h := bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		switch string(d.Data) {
		case "slow":
			entered <- struct{}{}
			<-release
			handlerCtxErr = ctx.Err()
			return nil
		case "flaky":
			if d.NumDelivered == 1 {
				return errors.New("transient")
			}
		case "panic":
			if d.NumDelivered == 1 {
				panic("handler bug")
			}
		case "bad":
			return bus.Permanent(errors.New("422"))
		}
		return nil
	})
	spec := fastSpec("ledger-writer", bus.StreamInbox, 2)
	spec.Metrics = m
	r, err := c.NewRunner(spec, h)
	if err != nil {
		t.Fatal(err)
	}
	if r.Ready() {
		t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	testkit.WaitWithin(t, 10*time.Second, "ready", r.Ready)

	pub := func(key, data string) {
		t.Helper()
		if _, err := c.Publish(context.Background(), bus.Message{
			Subject: catalog.InboxSubject(key, catalog.GateFeedback), MsgID: key, Data: []byte(data),
		}); err != nil {
			t.Fatal(err)
		}
	}
	pub("k1", "flaky")
	pub("k2", "panic")
	pub("k3", "bad")
	count := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				var s float64
				for _, m := range mf.GetMetric() {
					if m.Counter != nil {
						s += m.Counter.GetValue()
					}
					if m.Histogram != nil {
						s += float64(m.Histogram.GetSampleCount())
					}
				}
				return s
			}
		}
		return 0
	}
	testkit.WaitWithin(t, 10*time.Second, "flaky and panicking messages acked on their retry, bad one dead-lettered", func() bool {
		return count("loop_bus_acked_total") == 2 && count("loop_bus_dlq_total") == 1
	})

	pub("k4", "slow")
	<-entered
	cancel()
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while a handler was in flight", err)
	case <-time.After(100 * time.Millisecond):
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if handlerCtxErr != nil {
		t.Fatalf("handler ctx cancelled during the drain: %v", handlerCtxErr)
	}
	if r.Ready() {
		t.Fatal("ready after Run returned")
	}
	for name, want := range map[string]float64{
		"loop_bus_received_total":           6, // flaky×2, panic×2, bad, slow
		"loop_bus_redelivered_total":        2,
		"loop_bus_acked_total":              3,
		"loop_bus_nakd_total":               2,
		"loop_bus_dlq_total":                1,
		"loop_bus_settle_errors_total":      0,
		"loop_bus_handler_duration_seconds": 6,
	} {
		if got := count(name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	// The slow message was acked during the drain: nothing left to redeliver.
	st, err := c.StreamStats(context.Background(), bus.StreamInbox)
	if err != nil || st.Msgs != 0 {
		t.Fatalf("inbox after drain: %+v, %v", st, err)
	}
}

func TestRunnerReturnsErrClosed(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	c := srv.Connect(t, "closed")
	r, err := c.NewRunner(fastSpec("ledger-writer", bus.StreamInbox, 1), bus.HandlerFunc(func(context.Context, *bus.Delivery) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	testkit.WaitWithin(t, 10*time.Second, "ready", r.Ready)
	c.Close()
	select {
	case err := <-done:
		if !errors.Is(err, bus.ErrClosed) {
			t.Fatalf("Run = %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after Close")
	}
}

func TestEmbedded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{Port: -1}); err == nil {
		t.Fatal("StartEmbedded without StoreDir succeeded")
	}
	e, err := bus.StartEmbedded(ctx, bus.EmbeddedOptions{StoreDir: t.TempDir(), Port: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Shutdown()
	if e.Port() <= 0 || !strings.HasSuffix(e.ClientURL(), ":"+strconv.Itoa(e.Port())) {
		t.Fatalf("port %d, url %s", e.Port(), e.ClientURL())
	}
	c, err := e.Connect(ctx, bus.Options{Name: "in-process"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Provision(ctx, bustest.FastTopology(1)); err != nil {
		t.Fatal(err)
	}
	ack, err := c.Publish(ctx, bus.Message{Subject: "loop.ev.k.t", MsgID: "1"})
	if err != nil || ack.Stream != bus.StreamEvents {
		t.Fatalf("publish over the in-process connection: %+v, %v", ack, err)
	}
	tcp, err := bus.Connect(ctx, bus.Options{URL: e.ClientURL(), Name: "tcp"})
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	if err := tcp.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tcp.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if tcp.Connected() {
		t.Fatal("connected after Drain")
	}
}

// TestRunnerReportsPending: loop_bus_consumer_pending says how many messages
// a partition consumer holds — waiting behind a stuck handler, then none
// once they are handled.
func TestRunnerReportsPending(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	c := srv.Connect(t, "pending")
	reg := prometheus.NewPedanticRegistry()
	m, err := bus.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	h := bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		<-release
		return nil
	})
	spec := fastSpec("ledger-writer", bus.StreamInbox, 1)
	spec.Metrics = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx, spec, h) }()
	defer func() { cancel(); <-done }()
	for i := range 5 {
		if _, err := c.Publish(context.Background(), bus.Message{
			Subject: catalog.InboxSubject("k", catalog.GateFeedback), MsgID: "p" + strconv.Itoa(i), Data: []byte("x"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	pending := func() float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "loop_bus_consumer_pending" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "consumer" && l.GetValue() == bus.ConsumerName("ledger-writer", 0) {
						return m.GetGauge().GetValue()
					}
				}
			}
		}
		return -1
	}
	testkit.WaitWithin(t, 15*time.Second, "5 pending behind the stuck handler", func() bool { return pending() == 5 })
	close(release)
	testkit.WaitWithin(t, 15*time.Second, "none pending once handled", func() bool { return pending() == 0 })
}

// TestHandlerAcksFirst: a handler that acknowledges its message itself
// (Delivery.Ack) and then fails is not redelivered — the message is settled
// — while a handler that fails without acknowledging is, as before.
func TestHandlerAcksFirst(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	c := srv.Connect(t, "ack-first")
	reg := prometheus.NewPedanticRegistry()
	m, err := bus.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	type call struct {
		data      string
		delivered uint64
		again     error // a second Ack's result
	}
	calls := make(chan call, 16)
	h := bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		cl := call{data: string(d.Data), delivered: d.NumDelivered}
		if cl.data == "ack-then-fail" {
			if err := d.Ack(ctx); err != nil {
				t.Errorf("Ack: %v", err)
			}
			cl.again = d.Ack(ctx)
		}
		calls <- cl
		return errors.New("fails after its work")
	})
	spec := fastSpec("ledger-writer", bus.StreamInbox, 1)
	spec.Metrics = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	r, err := c.NewRunner(spec, h)
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	testkit.WaitWithin(t, 10*time.Second, "ready", r.Ready)
	for _, data := range []string{"ack-then-fail", "fail"} {
		if _, err := c.Publish(context.Background(), bus.Message{
			Subject: catalog.InboxSubject(data, catalog.GateFeedback), MsgID: data, Data: []byte(data),
		}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]uint64{}
	deadline := time.After(10 * time.Second)
	for seen["fail"] < 3 {
		select {
		case cl := <-calls:
			seen[cl.data] = max(seen[cl.data], cl.delivered)
			if cl.data == "ack-then-fail" && cl.again != nil {
				t.Errorf("a second Ack of an acknowledged delivery: %v", cl.again)
			}
		case <-deadline:
			t.Fatalf("the failing message was not redelivered: %v", seen)
		}
	}
	if seen["ack-then-fail"] != 1 {
		t.Errorf("the message acknowledged by its handler was delivered %d times, want once", seen["ack-then-fail"])
	}
}

// TestReadyOnceThePullIsOut: a partition counts as consumed once its pull
// request is out, not once the pull returns — on a quiet stream that is
// the whole fetch wait, which a start's readiness used to wait out.
func TestReadyOnceThePullIsOut(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	c := srv.Connect(t, "ready")
	spec := fastSpec("ledger-writer", bus.StreamInbox, 2)
	spec.FetchWait = 2 * time.Minute // longer than the wait below: an empty pull never returns in it
	r, err := c.NewRunner(spec, bus.HandlerFunc(func(context.Context, *bus.Delivery) error { return nil }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = r.Run(ctx) }()
	testkit.WaitWithin(t, 20*time.Second, "ready with both partitions' pulls pending on an empty stream", r.Ready)
}
