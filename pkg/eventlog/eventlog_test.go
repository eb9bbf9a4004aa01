package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
)

type capture struct {
	subject string
	data    []byte
}

func (c *capture) PublishLog(_ context.Context, subject string, data []byte) error {
	c.subject, c.data = subject, data
	return nil
}

func TestEmitDropsContentAndSecrets(t *testing.T) {
	var buf bytes.Buffer
	pub := &capture{}
	l := New("ledger-writer", slog.New(slog.NewJSONHandler(&buf, nil)), pub)
	l.now = func() time.Time { return time.Date(2026, 11, 30, 1, 2, 3, 4e6, time.UTC) }
	l.Emit(context.Background(), "bus.recorded",
		slog.String("event_id", "slack:Ev1"), slog.String("event_type", "gate.feedback"),
		slog.String("text", "the member's words"), slog.String("github_token", "ghp_secretvalue"))
	if pub.subject != "loop.log.ledger-writer.bus.recorded" {
		t.Errorf("subject = %q", pub.subject)
	}
	var rec Record
	if err := json.Unmarshal(pub.data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Event != "bus.recorded" || rec.Level != "info" || rec.TS != "2026-11-30T01:02:03.004Z" || rec.Fields["event_id"] != "slack:Ev1" {
		t.Errorf("record = %+v", rec)
	}
	for _, leaked := range []string{"the member's words", "ghp_secretvalue"} {
		if strings.Contains(string(pub.data), leaked) || strings.Contains(buf.String(), leaked) {
			t.Errorf("%q leaked into the event log", leaked)
		}
	}
	if !strings.Contains(buf.String(), "event-log attribute dropped") {
		t.Error("dropping an attribute was silent")
	}
}

func TestTypesUniqueAndDocumented(t *testing.T) {
	seen := map[string]bool{}
	for _, ty := range Types() {
		if seen[ty.Name] || ty.Description == "" {
			t.Errorf("log type %q duplicated or undocumented", ty.Name)
		}
		seen[ty.Name] = true
	}
	for _, must := range []string{"bus.published", "bus.recorded", "bus.record_failed", "channel.dropped"} {
		if !seen[must] {
			t.Errorf("R8.1 type %s is not registered", must)
		}
	}
}

func TestUnregisteredTypeIsLoud(t *testing.T) {
	var buf bytes.Buffer
	New("x", slog.New(slog.NewJSONHandler(&buf, nil)), nil).Emit(context.Background(), "no.such_type")
	if !strings.Contains(buf.String(), "unregistered event-log type") {
		t.Error("an unregistered type was emitted silently")
	}
}

func TestRecorder(t *testing.T) {
	var next Recorder
	r := &Recorder{Next: &next}
	for _, line := range []string{
		`{"event":"bus.published","fields":{"event_id":"a","stream_seq":7}}`,
		`{"event":"bus.published","fields":{"event_id":"b"}}`,
		`{"event":"channel.posted","fields":{"event_id":"a"}}`,
	} {
		if err := r.PublishLog(context.Background(), "loop.log.x", []byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.PublishLog(context.Background(), "loop.log.x", []byte("not json")); err == nil {
		t.Error("a malformed record was accepted silently")
	}
	if got := r.Find("bus.published", map[string]any{"stream_seq": 7}); len(got) != 1 || got[0].Fields["event_id"] != "a" {
		t.Errorf("Find by a number = %+v", got)
	}
	if got := r.Find("bus.published", nil); len(got) != 2 {
		t.Errorf("Find without match = %d records", len(got))
	}
	if r.Len() != 3 || len(r.Since(2)) != 1 || len(r.Since(9)) != 0 || next.Len() != 3 {
		t.Errorf("Len %d, Since(2) %d, forwarded %d", r.Len(), len(r.Since(2)), next.Len())
	}
}

// TestRecordsCarryTheTraceID: a record emitted inside a trace names it, and
// `the-loop events` shows it; outside one there is none.
func TestRecordsCarryTheTraceID(t *testing.T) {
	pub := &capture{}
	l := New("dispatcher", slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), pub)
	tid, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	sid, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	l.Emit(ctx, "dispatch.succeeded", slog.String("event_id", "gh:1"))
	var rec Record
	if err := json.Unmarshal(pub.data, &rec); err != nil {
		t.Fatal(err)
	}
	if rec.TraceID != tid.String() || !strings.HasSuffix(Format(rec), " trace="+tid.String()) {
		t.Errorf("record %+v, formatted %q: want trace %s", rec, Format(rec), tid)
	}
	l.Emit(context.Background(), "dispatch.succeeded", slog.String("event_id", "gh:2"))
	rec = Record{}
	_ = json.Unmarshal(pub.data, &rec)
	if rec.TraceID != "" || strings.Contains(string(pub.data), "trace_id") {
		t.Errorf("a record outside any trace names one: %s", pub.data)
	}
}
