package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
)

func TestPublishRefusesReservedHeaders(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	c := srv.Connect(t, "pub")
	ctx := context.Background()
	for _, k := range []string{"Nats-Msg-Id", "Nats-Expected-Stream", "nats-rollup", "NATS-TTL", "Nats-Anything"} {
		m := bus.Message{Subject: "loop.in.k.t", MsgID: "id-" + k, Header: bus.Header{k: {"x"}, "ce-id": {"x"}}}
		if _, err := c.Publish(ctx, m); !errors.Is(err, bus.ErrReservedHeader) {
			t.Errorf("Publish with header %q: err %v, want ErrReservedHeader", k, err)
		}
		if err := c.PublishCore(m); !errors.Is(err, bus.ErrReservedHeader) {
			t.Errorf("PublishCore with header %q: err %v, want ErrReservedHeader", k, err)
		}
	}
	if _, err := c.Publish(ctx, bus.Message{Subject: "loop.in.k.t"}); !errors.Is(err, bus.ErrNoMsgID) {
		t.Errorf("Publish without MsgID: err %v, want ErrNoMsgID", err)
	}
	st, err := c.StreamStats(ctx, bus.StreamInbox)
	if err != nil {
		t.Fatal(err)
	}
	if st.Msgs != 0 {
		t.Fatalf("a refused message was stored: %d in the inbox", st.Msgs)
	}
	// Our own headers are fine, case kept as given.
	if _, err := c.Publish(ctx, bus.Message{Subject: "loop.in.k.t", MsgID: "ok", Header: bus.Header{"traceparent": {"00-x"}, "Loop-Thing": {"y"}}}); err != nil {
		t.Fatalf("publish: %v", err)
	}
	var got delivered
	runRunner(t, c, fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, 2), got.handler())
	testkit.WaitWithin(t, 10*time.Second, "delivery", func() bool { return len(got.get()) == 1 })
	d := got.get()[0]
	if d.Header.Get("traceparent") != "00-x" || d.Header.Get("Loop-Thing") != "y" || d.MsgID != "ok" {
		t.Fatalf("delivery header %v, msg id %q", d.Header, d.MsgID)
	}
	for k := range d.Header {
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			t.Fatalf("delivery exposes server header %q", k)
		}
	}
}

// TestPublishStreamFull checks the inbox's back-pressure: once MaxBytes is
// reached, publishes fail with ErrStreamFull instead of dropping old work.
func TestPublishStreamFull(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	topo := bustest.FastTopology(2)
	topo.InboxMaxBytes = 4 << 10
	srv.Provision(t, topo)
	c := srv.Connect(t, "pub")
	ctx := context.Background()
	data := make([]byte, 512)
	var err error
	n := 0
	for ; n < 100; n++ {
		_, err = c.Publish(ctx, bus.Message{Subject: "loop.in.k.t", MsgID: fmt.Sprint(n), Data: data})
		if err != nil {
			break
		}
	}
	if !errors.Is(err, bus.ErrStreamFull) {
		t.Fatalf("after %d publishes: err %v, want ErrStreamFull", n, err)
	}
	if n == 0 || n > 8 {
		t.Fatalf("stream full after %d messages of 512 B with MaxBytes 4 KiB", n)
	}
}

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                              "nats://127.0.0.1:4222",
		"nats://user:secret@nats:4222":                       "nats://redacted@nats:4222",
		"nats://s3cr3ttoken@nats:4222,nats://a:b@other:4222": "nats://redacted@nats:4222,nats://redacted@other:4222",
		"tls://u:p%zz@host:1":                                "tls://redacted@host:1",
	} {
		got := bus.RedactURL(in)
		if got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
		for _, secret := range []string{"secret", "s3cr3ttoken", ":b@", "u:p"} {
			if strings.Contains(got, secret) {
				t.Errorf("RedactURL(%q) = %q leaks %q", in, got, secret)
			}
		}
	}
}
