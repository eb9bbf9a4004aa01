package eventlog

import (
	"testing"
	"time"
)

func TestQueryMatch(t *testing.T) {
	rec := Record{TS: "2026-12-02T10:00:00.5Z", Event: "routing.routed",
		Fields: map[string]any{"delivery_id": "d-1", "event_type": "comment.human", "work_items": []any{"github:o/r#1", "github:o/r#2"}}}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		q    Query
		want bool
	}{
		{Query{}, true},
		{Query{Type: "routing.routed"}, true},
		{Query{Type: "comment.human"}, true},
		{Query{Type: "graph.advanced"}, false},
		{Query{DeliveryID: "d-1"}, true},
		{Query{DeliveryID: "d-2"}, false},
		{Query{WorkItem: "github:o/r#2"}, true},
		{Query{WorkItem: "github:o/r#3"}, false},
		{Query{Since: at}, true},
		{Query{Since: at.Add(time.Second)}, false},
		{Query{WorkItem: "github:o/r#1", Type: "routing.routed", DeliveryID: "d-1", Since: at}, true},
	} {
		if got := c.q.Match(rec); got != c.want {
			t.Errorf("%+v.Match = %v, want %v", c.q, got, c.want)
		}
	}
	one := Record{TS: "2026-12-02T10:00:00Z", Event: "graph.advanced", Fields: map[string]any{"work_item": "github:o/r#1"}}
	if !(Query{WorkItem: "github:o/r#1"}).Match(one) || (Query{WorkItem: "github:o/r#2"}).Match(one) {
		t.Error("work_item is not matched")
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	if got, err := ParseSince("90m", now); err != nil || !got.Equal(now.Add(-90*time.Minute)) {
		t.Errorf("90m = %v, %v", got, err)
	}
	if got, err := ParseSince("2026-12-01T00:00:00Z", now); err != nil || !got.Equal(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("a time = %v, %v", got, err)
	}
	if got, err := ParseSince("", now); err != nil || !got.IsZero() {
		t.Errorf("empty = %v, %v", got, err)
	}
	if _, err := ParseSince("yesterday", now); err == nil {
		t.Error("yesterday is accepted")
	}
}
