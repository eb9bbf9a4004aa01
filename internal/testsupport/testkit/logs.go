package testkit

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
)

// LogRecord is one record a Logs kept: "msg", "level" and every attribute
// by its key (the logger's own With attributes included), values resolved.
type LogRecord = map[string]any

// Logs keeps every record written through its Handler, for tests that read
// back what a service logged: the event log (which writes through slog)
// and the promise that secrets never reach it. Groups are flattened.
type Logs struct {
	mu   sync.Mutex
	recs []LogRecord
}

// Handler is a slog.Handler that appends to l, at every level.
func (l *Logs) Handler() slog.Handler { return &logsHandler{l: l} }

// Len is how many records l holds: a mark for Since.
func (l *Logs) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.recs)
}

// Events returns the records whose "event" attribute is one of events, in
// order.
func (l *Logs) Events(events ...string) []LogRecord { return l.Since(0, events...) }

// Since returns the records from index i on (a Len taken earlier) whose
// "event" attribute is one of events, or all of them without events.
func (l *Logs) Since(i int, events ...string) []LogRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogRecord
	for _, r := range l.recs[i:] {
		if ev, _ := r["event"].(string); len(events) == 0 || slices.Contains(events, ev) {
			out = append(out, r)
		}
	}
	return out
}

// WithMessage returns the records whose message is msg, in order.
func (l *Logs) WithMessage(msg string) []LogRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []LogRecord
	for _, r := range l.recs {
		if r["msg"] == msg {
			out = append(out, r)
		}
	}
	return out
}

// String is every record, one a line, each value printed with %v (an
// error's message included): what a test searches for a leaked secret.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	for _, r := range l.recs {
		fmt.Fprintf(&b, "%v\n", r)
	}
	return b.String()
}

type logsHandler struct {
	l     *Logs
	attrs []slog.Attr
}

func (h *logsHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logsHandler) Handle(_ context.Context, r slog.Record) error {
	m := LogRecord{"msg": r.Message, "level": r.Level.String()}
	for _, a := range h.attrs {
		m[a.Key] = a.Value.Resolve().Any()
	}
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.Resolve().Any(); return true })
	h.l.mu.Lock()
	h.l.recs = append(h.l.recs, m)
	h.l.mu.Unlock()
	return nil
}

func (h *logsHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logsHandler{l: h.l, attrs: append(slices.Clone(h.attrs), as...)}
}

func (h *logsHandler) WithGroup(string) slog.Handler { return h }
