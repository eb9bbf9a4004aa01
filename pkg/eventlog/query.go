package eventlog

import (
	"fmt"
	"slices"
	"time"
)

// Query selects records of the event log, as `the-loop events` and the
// control plane's API filter it. The zero Query selects every record.
type Query struct {
	// WorkItem is a work item's reference: records that name it, in
	// work_item or among work_items.
	WorkItem string
	// Type is a record's own type (graph.advanced) or the catalog type of
	// the event it is about (event_type: gate.feedback).
	Type string
	// DeliveryID is a GitHub delivery's id (X-GitHub-Delivery), or the
	// id a channel gave the delivery.
	DeliveryID string
	// Since drops records emitted before it.
	Since time.Time
}

// Match reports whether r is selected by q.
func (q Query) Match(r Record) bool {
	if q.Type != "" && r.Event != q.Type && field(r, "event_type") != q.Type {
		return false
	}
	if q.DeliveryID != "" && field(r, "delivery_id") != q.DeliveryID {
		return false
	}
	if q.WorkItem != "" && field(r, "work_item") != q.WorkItem && !slices.Contains(list(r, "work_items"), q.WorkItem) {
		return false
	}
	if !q.Since.IsZero() {
		at, err := time.Parse(time.RFC3339Nano, r.TS)
		if err != nil || at.Before(q.Since) {
			return false
		}
	}
	return true
}

func field(r Record, key string) string {
	v, ok := r.Fields[key]
	if !ok {
		return ""
	}
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}

func list(r Record, key string) []string {
	vs, _ := r.Fields[key].([]any)
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// ParseSince reads a --since value: a duration back from now ("90m",
// "2h") or a time (RFC 3339).
func ParseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("since %q: want a duration back from now (90m, 2h) or a time (2026-12-02T15:04:05Z)", s)
}
