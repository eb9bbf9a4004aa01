package tracing

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"
)

func TestExportOnlyWhenTheStandardVariablesAskForIt(t *testing.T) {
	cases := []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
	}
	for _, c := range cases {
		if got := exporting(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("%v: exporting = %v, want %v", c.env, got, c.want)
		}
	}
}

func TestSetupMakesTraceIDsWithoutExporting(t *testing.T) {
	stop, err := Setup(context.Background(), "the-loop-test", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	defer stop(context.Background())
	ctx, span := Start(context.Background(), "ingress", trace.SpanKindServer)
	defer span.End()
	tp := TraceParent(ctx)
	if !Valid(tp) || TraceID(ctx) == "" {
		t.Fatalf("traceparent %q, trace id %q", tp, TraceID(ctx))
	}
	// Carried in a message's headers, it makes the next span a child.
	h := map[string][]string{Header: {tp}}
	child, cs := Start(Extract(context.Background(), h), "consume", trace.SpanKindConsumer)
	defer cs.End()
	if TraceID(child) != TraceID(ctx) {
		t.Errorf("the consumer's trace %s is not the ingress's %s", TraceID(child), TraceID(ctx))
	}
	if Valid("00-" + "not-a-trace") {
		t.Error("a malformed traceparent is valid")
	}
}
