package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// MessageMeta is what a status page shows of a stored message: where it is
// and its event's id and type, never its body.
type MessageMeta struct {
	Stream  string
	Seq     uint64
	Subject string
	Time    time.Time
	// ID and Type are the event's (ce-id, ce-type headers); MsgID the
	// Nats-Msg-Id.
	ID, Type, MsgID string
	// TraceParent is the W3C trace context the message carries, if any.
	TraceParent string
}

// RecentMessages returns up to n of stream's newest messages, newest first,
// read one by one by sequence (no consumer is created).
func (c *Conn) RecentMessages(ctx context.Context, stream string, n int) ([]MessageMeta, error) {
	s, err := c.js.Stream(ctx, stream)
	if err != nil {
		return nil, fmt.Errorf("bus: stream %s: %w", stream, err)
	}
	st := s.CachedInfo().State
	var out []MessageMeta
	for seq := st.LastSeq; seq >= st.FirstSeq && seq > 0 && len(out) < n; seq-- {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted or acknowledged away (a work queue)
		}
		if err != nil {
			return out, fmt.Errorf("bus: stream %s seq %d: %w", stream, seq, err)
		}
		out = append(out, MessageMeta{
			Stream: stream, Seq: m.Sequence, Subject: m.Subject, Time: m.Time,
			ID: m.Header.Get("ce-id"), Type: m.Header.Get("ce-type"), MsgID: m.Header.Get("Nats-Msg-Id"),
			TraceParent: m.Header.Get(HeaderTraceParent),
		})
	}
	return out, nil
}

// HeaderTraceParent carries the W3C trace context of the hop that published
// a message (docs/decisions/081-trace-context-on-the-bus.md).
const HeaderTraceParent = "traceparent"
