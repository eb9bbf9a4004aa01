// Package tracing follows one event across the loop's hops with
// OpenTelemetry: a span where an ingress accepts a delivery, where a message
// is published to a stream and where a service handles it, and around the
// dispatcher's session prompt. The W3C trace context travels in each
// message's traceparent header, so one webhook is one trace from intake to
// the session (docs/decisions/077-traces-across-the-hops.md).
//
// Spans are exported over OTLP only when the standard OTEL_* variables ask
// for it (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
// OTEL_TRACES_EXPORTER=otlp); otherwise trace ids are still made, carried
// and written into the event log, and nothing leaves the process.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// Scope names the loop's spans.
const Scope = "github.com/the-loop/bus"

// Header is the W3C trace-context header a message carries.
const Header = "traceparent"

var propagator = propagation.TraceContext{}

// Start starts a span of the loop's tracer (the global provider's, looked
// up at each call so that a provider installed later is used).
func Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return otel.Tracer(Scope).Start(ctx, name, trace.WithSpanKind(kind), trace.WithAttributes(attrs...))
}

// End records a failure on span (its status, never the error's words,
// which may quote what a secret scrubber has not seen) and ends it.
func End(span trace.Span, err error) {
	if err != nil {
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
}

// Carrier adapts a message's headers (lowercase keys, as on the bus) to
// OpenTelemetry's propagators.
type Carrier map[string][]string

func (c Carrier) Get(key string) string {
	if v := c[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c Carrier) Set(key, value string) { c[key] = []string{value} }
func (c Carrier) Keys() []string {
	out := make([]string, 0, len(c))
	for k := range c {
		out = append(out, k)
	}
	return out
}

// Extract returns ctx with the remote span context h carries, if any.
func Extract(ctx context.Context, h map[string][]string) context.Context {
	return propagator.Extract(ctx, Carrier(h))
}

// TraceParent is the traceparent of ctx's span, or "" when it has none.
func TraceParent(ctx context.Context) string {
	c := Carrier{}
	propagator.Inject(ctx, c)
	return c.Get(Header)
}

// TraceID is the trace id of ctx's span, or "".
func TraceID(ctx context.Context) string {
	if sc := trace.SpanContextFromContext(ctx); sc.HasTraceID() {
		return sc.TraceID().String()
	}
	return ""
}

// Valid reports whether tp is a W3C traceparent OpenTelemetry accepts.
func Valid(tp string) bool {
	return trace.SpanContextFromContext(Extract(context.Background(), map[string][]string{Header: {tp}})).IsValid()
}

// Getenv reads a process setting.
type Getenv func(string) string

// Setup installs the process's tracer provider and the W3C propagator, and
// returns what flushes and stops it. service names the process in the
// spans' resource unless OTEL_SERVICE_NAME does.
func Setup(ctx context.Context, service string, getenv Getenv) (shutdown func(context.Context) error, err error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	opts := []sdktrace.TracerProviderOption{}
	attrs := []attribute.KeyValue{semconv.ServiceName(service)}
	if n := getenv("OTEL_SERVICE_NAME"); n != "" {
		attrs = []attribute.KeyValue{semconv.ServiceName(n)}
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		res = resource.Default()
	}
	opts = append(opts, sdktrace.WithResource(res))
	if exporting(getenv) {
		exp, err := otlptracehttp.New(ctx)
		if err != nil {
			return nil, fmt.Errorf("tracing: OTLP exporter (OTEL_EXPORTER_OTLP_*): %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagator)
	return tp.Shutdown, nil
}

// exporting: the standard variables ask for OTLP. OTEL_TRACES_EXPORTER=none
// switches it off whatever the endpoint; an endpoint alone switches it on.
func exporting(getenv Getenv) bool {
	switch strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER"))) {
	case "none":
		return false
	case "otlp":
		return true
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}
