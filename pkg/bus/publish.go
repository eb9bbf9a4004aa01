package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/pkg/catalog"
)

// Header holds message headers. Keys are case-sensitive, exactly as on the
// wire: we use lowercase ce-* and traceparent, and nothing canonicalises
// them (net/http's textproto would turn traceparent into Traceparent).
type Header map[string][]string

// Get returns the first value of key, or "".
func (h Header) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set replaces the values of key with v.
func (h Header) Set(key, v string) { h[key] = []string{v} }

// Add appends v to the values of key.
func (h Header) Add(key, v string) { h[key] = append(h[key], v) }

// Del removes key's values.
func (h Header) Del(key string) { delete(h, key) }

// Clone returns a deep copy of h (nil stays nil).
func (h Header) Clone() Header {
	if h == nil {
		return nil
	}
	c := make(Header, len(h))
	for k, v := range h {
		c[k] = append([]string(nil), v...)
	}
	return c
}

// Message is what a producer publishes.
type Message struct {
	// Subject is the un-partitioned subject, loop.in.<key>.<type> or
	// loop.ev.<key>.<type> (catalog.InboxSubject, catalog.EventsSubject).
	Subject string
	// Header carries ce-* and traceparent. Keys starting with "Nats-" are
	// reserved for NATS and refused.
	Header Header
	Data   []byte
	// MsgID becomes Nats-Msg-Id: the stream drops a second message with the
	// same id inside its duplicate window. It is the event id (ce-id).
	// Required by Publish.
	MsgID string
}

// PubAck is the stream's receipt for a published message.
type PubAck struct {
	Stream string
	Seq    uint64
	// Duplicate is true when the stream already held a message with this
	// MsgID: nothing new was stored.
	Duplicate bool
}

// Sentinel errors of publishing.
var (
	// ErrReservedHeader: a caller header is under the "Nats-" namespace.
	ErrReservedHeader = errors.New("bus: header under the reserved Nats- namespace")
	// ErrNoMsgID: Publish needs Message.MsgID.
	ErrNoMsgID = errors.New("bus: message has no MsgID")
	// ErrStreamFull: the stream refused the message because it is at its
	// byte or message limit (the inbox's back-pressure). Retry later.
	ErrStreamFull = errors.New("bus: stream full")
)

const natsHeaderPrefix = "nats-"

func isNatsHeader(k string) bool {
	return len(k) >= len(natsHeaderPrefix) && strings.EqualFold(k[:len(natsHeaderPrefix)], natsHeaderPrefix)
}

func checkHeader(h Header) error {
	for k := range h {
		if isNatsHeader(k) {
			return fmt.Errorf("%w: %q (set Message.MsgID for Nats-Msg-Id)", ErrReservedHeader, k)
		}
	}
	return nil
}

func toNatsMsg(m Message) *nats.Msg {
	nm := &nats.Msg{Subject: m.Subject, Data: m.Data}
	if len(m.Header) > 0 || m.MsgID != "" {
		nm.Header = make(nats.Header, len(m.Header)+1)
		for k, v := range m.Header {
			nm.Header[k] = append([]string(nil), v...)
		}
	}
	return nm
}

// fromNatsHeader copies h without the server's own Nats-* headers.
func fromNatsHeader(h nats.Header) Header {
	out := make(Header, len(h))
	for k, v := range h {
		if isNatsHeader(k) {
			continue
		}
		out[k] = append([]string(nil), v...)
	}
	return out
}

// Publish stores m in its stream and waits for the PubAck. A timeout is
// ambiguous (the message may have been stored), so it is retried with the
// same Nats-Msg-Id, which makes the retry harmless; at most
// Options.PublishAttempts times and never past ctx. PubAck.Duplicate reports
// that the stream already had m.MsgID.
func (c *Conn) Publish(ctx context.Context, m Message) (PubAck, error) {
	if m.MsgID == "" {
		return PubAck{}, fmt.Errorf("publish %s: %w", m.Subject, ErrNoMsgID)
	}
	if err := checkHeader(m.Header); err != nil {
		return PubAck{}, fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	if err := checkSubject(m.Subject); err != nil {
		return PubAck{}, err
	}
	if err := c.sign(&m); err != nil {
		return PubAck{}, err
	}
	m, span := tracePublish(ctx, m)
	ack, err := c.publish(ctx, toNatsMsg(m), m.MsgID)
	endSpan(span, err)
	return ack, err
}

// sign signs m as the connection's identity when it is an event on loop.in
// or loop.ev (docs/decisions/099-signed-events.md): every publisher's
// events are signed here, so no service has to remember to. A connection
// without an identity leaves m as it is.
func (c *Conn) sign(m *Message) error {
	if c.signer == nil || !signedSubject(m.Subject) {
		return nil
	}
	return c.signer.Sign(m, c.readerKeys())
}

// signedSubject: the subjects whose consumers act on who published.
func signedSubject(s string) bool {
	return strings.HasPrefix(s, catalog.InboxPrefix+".") || strings.HasPrefix(s, catalog.EventsPrefix+".")
}

func checkSubject(s string) error {
	if s == "" || strings.ContainsAny(s, "*> \t\r\n") || strings.Contains(s, "..") ||
		strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") {
		return fmt.Errorf("bus: invalid subject %q", s)
	}
	return nil
}

// publish is Publish without the caller checks: the DLQ adds its own headers.
func (c *Conn) publish(ctx context.Context, nm *nats.Msg, msgID string) (PubAck, error) {
	var lastErr error
	for attempt := 1; attempt <= c.opts.PublishAttempts; attempt++ {
		actx, cancel := context.WithTimeout(ctx, c.opts.PublishTimeout)
		// PublishMsg may add headers; give every attempt a fresh copy.
		msg := &nats.Msg{Subject: nm.Subject, Data: nm.Data, Header: nats.Header{}}
		for k, v := range nm.Header {
			msg.Header[k] = v
		}
		stop := c.denials.watch(nm.Subject, cancel)
		ack, err := c.js.PublishMsg(actx, msg, jetstream.WithMsgID(msgID))
		stop()
		cancel()
		if c.denials.take(nm.Subject) {
			return PubAck{}, fmt.Errorf("publish %s: %w", nm.Subject, ErrDenied)
		}
		if err == nil {
			return PubAck{Stream: ack.Stream, Seq: ack.Sequence, Duplicate: ack.Duplicate}, nil
		}
		if full := streamFullErr(err); full != nil {
			return PubAck{}, fmt.Errorf("publish %s: %w: %w", nm.Subject, ErrStreamFull, err)
		}
		if !ambiguous(err) {
			return PubAck{}, fmt.Errorf("publish %s: %w", nm.Subject, err)
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
		c.log.Warn("publish ambiguous, retrying with the same msg id",
			"subject", nm.Subject, "msg_id", msgID, "attempt", attempt, "err", err)
		if attempt == c.opts.PublishAttempts {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(Backoff(attempt, 100*time.Millisecond, 2*time.Second)):
		}
	}
	if ctx.Err() != nil {
		return PubAck{}, fmt.Errorf("publish %s: %w (last: %v)", nm.Subject, ctx.Err(), lastErr)
	}
	return PubAck{}, fmt.Errorf("publish %s: giving up after %d attempts: %w", nm.Subject, c.opts.PublishAttempts, lastErr)
}

// ambiguous reports whether a failed publish may be retried: no PubAck came
// back (the message may or may not be stored), or the stream could not be
// reached at all (reconnecting, leader election).
func ambiguous(err error) bool {
	if errors.Is(err, nats.ErrConnectionClosed) {
		return false
	}
	return errors.Is(err, context.DeadlineExceeded) ||
		errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) ||
		errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) ||
		errors.Is(err, nats.ErrDisconnected)
}

func streamFullErr(err error) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		d := strings.ToLower(apiErr.Description)
		if strings.Contains(d, "maximum bytes exceeded") || strings.Contains(d, "maximum messages exceeded") {
			return apiErr
		}
	}
	return nil
}

// PublishCore publishes m with plain NATS, without waiting for anything: a
// stream on the subject (LOOP_LOG for loop.log.>) stores it, but a lost
// message is not reported. Meant for the event log, which must never block or
// fail a service. Reserved headers are refused as by Publish.
func (c *Conn) PublishCore(m Message) error {
	if err := checkHeader(m.Header); err != nil {
		return fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	if err := checkSubject(m.Subject); err != nil {
		return err
	}
	nm := toNatsMsg(m)
	if m.MsgID != "" {
		nm.Header.Set(jetstream.MsgIDHeader, m.MsgID)
	}
	if err := c.nc.PublishMsg(nm); err != nil {
		return fmt.Errorf("publish %s: %w", m.Subject, err)
	}
	return nil
}
