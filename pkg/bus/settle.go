package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/the-loop/bus/pkg/catalog"
)

// Dead-letter headers, added to the original headers of a DLQ copy. They are
// ours, so not under Nats- (reserved for the server).
const (
	HeaderDLQReason     = "Loop-Dlq-Reason"
	HeaderDLQStream     = "Loop-Dlq-Stream"
	HeaderDLQConsumer   = "Loop-Dlq-Consumer"
	HeaderDLQStreamSeq  = "Loop-Dlq-Stream-Seq"
	HeaderDLQDeliveries = "Loop-Dlq-Deliveries"
	HeaderDLQSubject    = "Loop-Dlq-Subject" // stored (partitioned) subject
	HeaderDLQMsgID      = "Loop-Dlq-Msg-Id"  // the original Nats-Msg-Id
	HeaderDLQTime       = "Loop-Dlq-Time"    // RFC 3339, when dead-lettered
	headerDLQPrefix     = "Loop-Dlq-"
	headerPinID         = "Nats-Pin-Id"
)

// DeadLetter is what DeadLettered is told: the message and why it went.
type DeadLetter struct {
	Delivery *Delivery
	Consumer string
	// Permanent: the handler said no retry could help; otherwise the
	// message used its last allowed delivery.
	Permanent bool
	// Reason is the reason stored with the copy (Loop-Dlq-Reason).
	Reason string
}

func (r *Runner) settle(ctx context.Context, d *Delivery, consumer string, herr error, log *slog.Logger) {
	d.mu.Lock()
	acked := d.acked
	d.settled = true
	d.mu.Unlock()
	msg := d.msg
	switch {
	case acked:
		// The handler acknowledged it (Ack); what it did afterwards is
		// its own to recover.
		inc(r.m.acked)
		if herr != nil {
			log.Info("handler failed after acknowledging its message", "err", herr)
		}
	case herr == nil:
		if err := doubleAck(ctx, msg); err != nil {
			inc(r.m.errors)
			log.Warn("ack failed; the message will be redelivered", "err", err)
			return
		}
		inc(r.m.acked)
	case IsPermanent(herr) || d.Last():
		reason := "permanent: "
		if !IsPermanent(herr) {
			reason = fmt.Sprintf("max deliveries (%d): ", d.NumDelivered)
		}
		reason = headerValue(reason + herr.Error())
		if err := r.deadLetter(ctx, d, consumer, reason); err != nil {
			inc(r.m.errors)
			log.Error("dead-letter copy failed; retrying later", "err", err, "reason", reason)
			_ = msg.NakWithDelay(r.backoff(d.NumDelivered))
			return
		}
		if err := msg.TermWithReason(reason); err != nil {
			inc(r.m.errors)
			log.Warn("term failed", "err", err)
		}
		inc(r.m.dlqd)
		log.Warn("message dead-lettered", "reason", reason)
		if r.spec.DeadLettered != nil {
			r.spec.DeadLettered(ctx, DeadLetter{Delivery: d, Consumer: consumer, Permanent: IsPermanent(herr), Reason: reason})
		}
	default:
		delay, ok := RetryDelay(herr)
		if !ok {
			delay = r.backoff(d.NumDelivered)
		}
		if err := msg.NakWithDelay(delay); err != nil {
			inc(r.m.errors)
			log.Warn("nak failed", "err", err)
			return
		}
		inc(r.m.nakd)
		log.Info("handler failed; will retry", "err", herr, "delay", delay)
	}
}

func (r *Runner) backoff(n uint64) time.Duration {
	return Backoff(int(min(n, 64)), r.spec.RetryBase, r.spec.RetryMax)
}

// headerValue makes s safe as a header value: one line, bounded.
func headerValue(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
	if len(s) > 1024 {
		s = s[:1024]
	}
	return s
}

// dlqSubject is where a dead letter of consumer goes:
// loop.dlq.<consumer>.<stored subject>.
func dlqSubject(consumer, subject string) string {
	return catalog.DLQPrefix + "." + consumer + "." + subject
}

// deadLetter copies d to LOOP_DLQ and waits for the PubAck. Its msg id is
// the original's stream and sequence, so a second copy of the same message
// (a crash between this and the Term) is dropped as a duplicate.
func (r *Runner) deadLetter(ctx context.Context, d *Delivery, consumer, reason string) error {
	h := nats.Header{}
	for k, v := range d.Header {
		h[k] = v
	}
	h.Set(HeaderDLQReason, reason)
	h.Set(HeaderDLQStream, r.spec.Stream)
	h.Set(HeaderDLQConsumer, consumer)
	h.Set(HeaderDLQStreamSeq, strconv.FormatUint(d.StreamSeq, 10))
	h.Set(HeaderDLQDeliveries, strconv.FormatUint(d.NumDelivered, 10))
	h.Set(HeaderDLQSubject, d.Subject)
	h.Set(HeaderDLQMsgID, d.MsgID)
	h.Set(HeaderDLQTime, time.Now().UTC().Format(time.RFC3339Nano))
	subject := dlqSubject(consumer, d.Subject)
	if r.c.signer != nil {
		// The copy says who dead-lettered it, so that a replay can tell
		// it from one planted on loop.dlq by anyone else
		// (docs/decisions/099-signed-events.md).
		if err := r.c.signer.SignDeadLetter(subject, Header(h), d.Data); err != nil {
			return err
		}
	}
	nm := &nats.Msg{Subject: subject, Header: h, Data: d.Data}
	_, err := r.c.publish(ctx, nm, fmt.Sprintf("dlq:%s:%d", r.spec.Stream, d.StreamSeq))
	return err
}
