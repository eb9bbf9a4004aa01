package bus

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/pkg/catalog"
)

// DLQEntry is one dead letter, as `the-loop dlq list` shows it.
type DLQEntry struct {
	Seq uint64 // sequence in LOOP_DLQ: what ReplayDLQ takes
	// Subject is the original stored (partitioned) subject; PublishSubject
	// the un-partitioned one a replay publishes to.
	Subject, PublishSubject string
	Reason                  string
	Stream, Consumer        string
	StreamSeq               uint64 // in the original stream
	Deliveries              uint64
	MsgID                   string // original Nats-Msg-Id
	CEID                    string // ce-id header
	Time                    time.Time
	Header                  Header // original headers, without Loop-Dlq-*
	Data                    []byte
}

// ListDLQ returns the dead letters, oldest first, at most limit of them
// (0: all).
func (c *Conn) ListDLQ(ctx context.Context, limit int) ([]DLQEntry, error) {
	s, err := c.js.Stream(ctx, StreamDLQ)
	if err != nil {
		return nil, fmt.Errorf("bus: dlq list: %w", err)
	}
	if s.CachedInfo().State.Msgs == 0 {
		return nil, nil
	}
	// An ordered consumer reads the Limits stream without leaving anything
	// behind on the server.
	cons, err := c.js.OrderedConsumer(ctx, StreamDLQ, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("bus: dlq list: %w", err)
	}
	// Ask for exactly what is pending: a Fetch returns once its batch is
	// full, instead of waiting out its MaxWait.
	pending := cons.CachedInfo().NumPending
	var out []DLQEntry
	for pending > 0 && (limit <= 0 || len(out) < limit) {
		batch := int(min(pending, 256))
		if limit > 0 {
			batch = min(batch, limit-len(out))
		}
		b, err := cons.Fetch(batch, jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, fmt.Errorf("bus: dlq list: %w", err)
		}
		n := 0
		for m := range b.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return nil, fmt.Errorf("bus: dlq list: %w", err)
			}
			out = append(out, dlqEntry(meta.Sequence.Stream, m.Subject(), m.Headers(), m.Data(), meta.Timestamp))
			pending = meta.NumPending
		}
		if err := b.Error(); err != nil {
			return nil, fmt.Errorf("bus: dlq list: %w", err)
		}
		if n == 0 {
			break
		}
	}
	return out, nil
}

func dlqEntry(seq uint64, subject string, h nats.Header, data []byte, t time.Time) DLQEntry {
	e := DLQEntry{
		Seq:      seq,
		Subject:  h.Get(HeaderDLQSubject),
		Reason:   h.Get(HeaderDLQReason),
		Stream:   h.Get(HeaderDLQStream),
		Consumer: h.Get(HeaderDLQConsumer),
		MsgID:    h.Get(HeaderDLQMsgID),
		CEID:     h.Get("ce-id"),
		Time:     t,
		Header:   Header{},
		Data:     data,
	}
	if e.Subject == "" {
		e.Subject = subject
	}
	e.StreamSeq, _ = strconv.ParseUint(h.Get(HeaderDLQStreamSeq), 10, 64)
	e.Deliveries, _ = strconv.ParseUint(h.Get(HeaderDLQDeliveries), 10, 64)
	e.PublishSubject = unpartitioned(e.Subject)
	for k, v := range h {
		if strings.HasPrefix(k, headerDLQPrefix) || isNatsHeader(k) {
			continue
		}
		e.Header[k] = append([]string(nil), v...)
	}
	return e
}

// unpartitioned turns a stored loop.{in,ev}.<p>.<key>.<type> back into the
// subject a publisher writes; anything else is returned as is.
func unpartitioned(s string) string {
	prefix, _, key, t, ok := catalog.ParseSubject(s, true)
	if !ok {
		return s
	}
	return prefix + "." + key + "." + string(t)
}

// ErrNoSuchDeadLetter: ReplayDLQ was given a sequence not in LOOP_DLQ.
var ErrNoSuchDeadLetter = errors.New("bus: no such dead letter")

// ReplayResult says what ReplayDLQ published.
type ReplayResult struct {
	Subject string // the un-partitioned subject it was published to
	MsgID   string // the new msg id, <old-id>:replay:<dlq-seq>
	// Original is the dead letter's own msg id (the event id it had).
	Original string
	PubAck   PubAck
}

// ReplayDLQ republishes dead letter seq to its original un-partitioned
// subject, with the original's headers and signature as they were (it is not
// signed again). On a bus with identities it first checks the copy: signed by
// the consumer identity of the original's stream, and the original by a
// publisher that may raise its type; anything else is refused with
// ErrReplayRefused naming why. It publishes to that
// subject (never the stored one, which would be partitioned a second time)
// under a new msg id, "<old-id>:replay:<seq>" — the old id would be dropped as
// a duplicate, and consumers' KV records are keyed by it — then deletes it
// from the DLQ. Re-running a replay that failed half way is safe: the publish
// is deduplicated by the same new id.
func (c *Conn) ReplayDLQ(ctx context.Context, seq uint64) (ReplayResult, error) {
	s, err := c.js.Stream(ctx, StreamDLQ)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, err)
	}
	raw, err := s.GetMsg(ctx, seq)
	if err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, ErrNoSuchDeadLetter)
		}
		return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, err)
	}
	e := dlqEntry(raw.Sequence, raw.Subject, raw.Header, raw.Data, raw.Time)
	var vouchFor *Signers
	if c.signer != nil {
		// On a bus with identities only a dead letter its consumer wrote
		// of a message its publisher signed goes back (decision 099).
		signers, err := c.LoadSigners(ctx)
		if err != nil {
			return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, err)
		}
		if _, err := signers.verifyDeadLetter(c.signer, raw.Subject, Header(raw.Header), raw.Data); err != nil {
			return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, err)
		}
		vouchFor = signers
	}
	id := "replay:" + strconv.FormatUint(seq, 10)
	if e.MsgID != "" {
		id = e.MsgID + ":" + id
	}
	m := Message{Subject: e.PublishSubject, Header: e.Header, Data: e.Data, MsgID: id}
	if err := checkHeader(m.Header); err != nil {
		return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, err)
	}
	if err := checkSubject(m.Subject); err != nil {
		return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, err)
	}
	// The original as it was signed, never signed again by whoever
	// replays it: its publisher's authenticators or signature are what its
	// consumer checks. The replayer, having checked them, adds its own
	// authenticators beside them (HeaderVouch), for a reader whose key
	// changed since; the reader still holds the original's signer to its
	// types.
	if vouchFor != nil {
		m.Header = m.Header.Clone()
		c.signer.vouch(&m, vouchFor)
	}
	m, span := tracePublish(ctx, m)
	ack, err := c.publish(ctx, toNatsMsg(m), m.MsgID)
	endSpan(span, err)
	if err != nil {
		return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: %w", seq, err)
	}
	if err := s.DeleteMsg(ctx, seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return ReplayResult{}, fmt.Errorf("bus: dlq replay %d: published as %s but not deleted: %w", seq, id, err)
	}
	return ReplayResult{Subject: m.Subject, MsgID: id, Original: e.MsgID, PubAck: ack}, nil
}
