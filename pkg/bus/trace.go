package bus

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/tracing"
)

// tracePublish starts the span of publishing m, a child of the trace
// context m carries or else of ctx's span, and returns m carrying the new
// span's context. A traceparent that is not W3C is left as it is (not ours
// to rewrite). Spans name only the subject, the event's id and its type
// (docs/decisions/077-traces-across-the-hops.md).
func tracePublish(ctx context.Context, m Message) (Message, trace.Span) {
	tp := m.Header.Get(HeaderTraceParent)
	if tp != "" && !tracing.Valid(tp) {
		return m, trace.SpanFromContext(context.Background())
	}
	parent := ctx
	if tp != "" {
		parent = tracing.Extract(ctx, m.Header)
	}
	_, _, _, typ, _ := catalog.ParseSubject(m.Subject, false)
	sctx, span := tracing.Start(parent, "publish "+streamOf(m.Subject), trace.SpanKindProducer,
		attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", m.Subject),
		attribute.String("messaging.message.id", m.MsgID), attribute.String("loop.event.type", string(typ)))
	if next := tracing.TraceParent(sctx); next != "" {
		h := make(Header, len(m.Header)+1)
		for k, v := range m.Header {
			h[k] = v
		}
		h.Set(HeaderTraceParent, next)
		m.Header = h
	}
	return m, span
}

// traceDelivery starts the span of handling d, a child of the trace context
// d carries.
func traceDelivery(ctx context.Context, service string, d *Delivery) (context.Context, trace.Span) {
	if tp := d.Header.Get(HeaderTraceParent); tp != "" && tracing.Valid(tp) {
		ctx = tracing.Extract(ctx, d.Header)
	}
	return tracing.Start(ctx, service+" "+string(d.Type), trace.SpanKindConsumer,
		attribute.String("messaging.system", "nats"), attribute.String("messaging.destination.name", d.Subject),
		attribute.String("messaging.message.id", d.MsgID), attribute.Int("loop.partition", d.Partition),
		attribute.Int64("messaging.delivery_count", int64(d.NumDelivered)))
}

func endSpan(span trace.Span, err error) { tracing.End(span, err) }

// streamOf names the stream a subject is stored in, for a span's name.
func streamOf(subject string) string {
	switch {
	case len(subject) > 8 && subject[:8] == "loop.in.":
		return StreamInbox
	case len(subject) > 8 && subject[:8] == "loop.ev.":
		return StreamEvents
	case len(subject) > 9 && subject[:9] == "loop.dlq.":
		return StreamDLQ
	}
	return subject
}
