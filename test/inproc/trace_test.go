package inproc

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/socketfake"
)

// TestOneWebhookIsOneTrace follows one comment webhook through every hop —
// ingress-github, the inbox, the ledger-writer's write, the fan-out to
// LOOP_EVENTS, the slack-renderer's render, the dispatcher's dispatch and
// the prompt typed into the session — and finds one trace with a span for
// each, spans in an in-memory exporter. The event log's records of that
// event carry its trace id, and no span names a secret.
func TestOneWebhookIsOneTrace(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	t.Cleanup(func() {
		otel.SetTracerProvider(noop.NewTracerProvider())
		_ = tp.Shutdown(context.Background())
	})

	w := newWorld(t)
	number, r := w.start("Trace one webhook")
	root := w.thread(r)
	c, delivery := w.commentID(number, alice, "Alice: the trace should reach the session.")
	w.waitSlack(root, "the trace should reach the session")
	// Typed into the session: the dispatcher's record of it.
	eventID := "gh:issue-comment:" + itoa(c.ID)
	w.waitLog("dispatch.succeeded", map[string]any{"event_id": eventID})

	var traceID string
	for _, s := range exp.GetSpans() {
		if s.Name == "ingress-github issue_comment" && hasAttr(s.Attributes, "github.delivery_id", delivery) {
			traceID = s.SpanContext.TraceID().String()
		}
	}
	if traceID == "" {
		t.Fatalf("no ingress span for delivery %s among %d spans", delivery, len(exp.GetSpans()))
	}
	var names []string
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID().String() == traceID {
			names = append(names, s.Name)
		}
	}
	for _, hop := range []string{
		"ingress-github issue_comment", // the webhook accepted
		"publish LOOP_INBOX",           // into the inbox
		"ledger-writer comment.human",  // the ledger write
		"publish LOOP_EVENTS",          // the fan-out
		"slack-renderer comment.human", // the render
		"dispatcher comment.human",     // the dispatch
		"session prompt",               // typed into the session
	} {
		if !slices.Contains(names, hop) {
			t.Errorf("trace %s has no %q span; it has %q", traceID, hop, names)
		}
	}

	// The event log's records of this event name its trace.
	for _, name := range []string{"dispatch.succeeded"} {
		recs := w.loopLog.find(name, map[string]any{"event_id": eventID})
		if len(recs) == 0 || recs[0].TraceID != traceID {
			t.Errorf("%s records of %s: %+v, want trace_id %s", name, eventID, recs, traceID)
		}
	}

	// Nothing secret in any span.
	secrets := []string{ghToken, webhookSecret, envelopeKey, slackfake.Token, socketfake.AppToken}
	for _, s := range exp.GetSpans() {
		text := s.Name + " " + s.Status.Description
		for _, a := range s.Attributes {
			text += " " + a.Value.String()
		}
		for _, e := range s.Events {
			text += " " + e.Name
			for _, a := range e.Attributes {
				text += " " + a.Value.String()
			}
		}
		for _, sec := range secrets {
			if strings.Contains(text, sec) {
				t.Errorf("span %q carries a secret (%.6s…)", s.Name, sec)
			}
		}
		if strings.Contains(text, "the trace should reach the session") {
			t.Errorf("span %q carries the comment's words", s.Name)
		}
	}
}

func hasAttr(attrs []attribute.KeyValue, key, value string) bool {
	for _, a := range attrs {
		if string(a.Key) == key && a.Value.String() == value {
			return true
		}
	}
	return false
}
