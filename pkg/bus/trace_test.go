package bus_test

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/tracing"
)

// TestPublishCarriesTheTrace: Publish and PublishAll store each message
// with the traceparent of its own publish span, a child of the caller's
// span; a traceparent that is not W3C is stored as it came.
func TestPublishCarriesTheTrace(t *testing.T) {
	otel.SetTracerProvider(sdktrace.NewTracerProvider())
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() { otel.SetTracerProvider(noop.NewTracerProvider()) })
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	c := srv.Connect(t, "tracer")
	ctx, span := tracing.Start(context.Background(), "ingress", trace.SpanKindServer)
	defer span.End()
	var msgs []bus.Message
	for i := range 3 {
		msgs = append(msgs, bus.Message{Subject: fmt.Sprintf("loop.in.k%d.t", i), MsgID: fmt.Sprintf("tr%d", i), Data: []byte("x")})
	}
	if _, err := c.PublishAll(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, bus.Message{Subject: "loop.in.k9.t", MsgID: "tr9", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, bus.Message{Subject: "loop.in.k8.t", MsgID: "tr8", Data: []byte("x"), Header: bus.Header{"traceparent": {"00-not-w3c"}}}); err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		if m.Header != nil {
			t.Errorf("the caller's message %s was changed: %v", m.MsgID, m.Header)
		}
	}
	recent, err := c.RecentMessages(context.Background(), bus.StreamInbox, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(recent) != 5 {
		t.Fatalf("%d messages stored, want 5", len(recent))
	}
	want := tracing.TraceID(ctx)
	seen := map[string]bool{}
	for _, m := range recent {
		if m.MsgID == "tr8" {
			if m.TraceParent != "00-not-w3c" {
				t.Errorf("a foreign traceparent was rewritten: %q", m.TraceParent)
			}
			continue
		}
		got := tracing.TraceID(tracing.Extract(context.Background(), map[string][]string{tracing.Header: {m.TraceParent}}))
		if got != want || seen[m.TraceParent] || m.TraceParent == tracing.TraceParent(ctx) {
			t.Errorf("%s carries %q: want trace %s, a span of its own", m.MsgID, m.TraceParent, want)
		}
		seen[m.TraceParent] = true
	}
}
