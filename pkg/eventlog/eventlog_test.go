package eventlog

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"
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
