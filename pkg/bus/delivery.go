package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/pkg/catalog"
)

// Delivery is one delivery of a message to a handler.
type Delivery struct {
	// Subject is the stored subject, loop.{in,ev}.<p>.<key>.<type>.
	Subject string
	// Key and Type are parsed from Subject.
	Key  string
	Type catalog.Type
	// Header is the publisher's headers (the server's Nats-* removed).
	Header Header
	Data   []byte
	// MsgID is the message's Nats-Msg-Id (the event id).
	MsgID     string
	Partition int
	// NumDelivered counts deliveries of this message, this one included;
	// MaxDeliver is the consumer's limit (0: unlimited).
	NumDelivered uint64
	MaxDeliver   int
	StreamSeq    uint64
	// Pending is how many messages waited behind this one in its partition
	// when it was delivered (the server's count; no request needed).
	Pending uint64
	// Time is when the message was stored.
	Time time.Time

	mu      sync.Mutex
	settled bool
	// acked: the handler acknowledged the message itself (Ack).
	acked bool
	msg   jetstream.Msg
}

// Last reports whether this is the last delivery the consumer allows: if the
// handler fails now, the message goes to the DLQ.
func (d *Delivery) Last() bool {
	return d.MaxDeliver > 0 && d.NumDelivered >= uint64(d.MaxDeliver)
}

// InProgress tells the server the handler is still working, restarting the
// AckWait timer. The runner already calls it every KeepAlive; call it
// yourself before a step that may outlast that.
func (d *Delivery) InProgress() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.settled {
		return nil
	}
	return d.msg.InProgress()
}

// Ack acknowledges the message now, before the handler returns, and waits
// for the server's confirmation (a double ack; a lost reply is retried). A
// handler that must settle its message before it does something else calls
// it — the ledger-writer acknowledges the inbox before it publishes the
// fan-out (docs/architecture.md, exactly once). Once Ack returned nil the
// message is settled: the runner neither acknowledges it again nor hands it
// back, whatever the handler then returns. On an error the message is not
// settled by Ack (the server may still have applied it); the handler should
// return an error, and the runner hands the message back as usual.
func (d *Delivery) Ack(ctx context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.acked {
		return nil
	}
	if d.settled {
		return errors.New("bus: ack of a settled delivery")
	}
	if err := doubleAck(ctx, d.msg); err != nil {
		return fmt.Errorf("bus: ack %s: %w", d.MsgID, err)
	}
	d.settled, d.acked = true, true
	return nil
}

// doubleAck acknowledges msg and waits for the server's confirmation,
// retrying a lost reply (acknowledging an acknowledged message is harmless).
func doubleAck(ctx context.Context, msg jetstream.Msg) error {
	var err error
	for attempt := 0; attempt < 3; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		err = msg.DoubleAck(actx)
		cancel()
		if err == nil || errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return nil
		}
		if ctx.Err() != nil {
			break
		}
	}
	return err
}

// Handler handles one delivery. nil → the message is acknowledged; an error
// marked Retry or any other error → redelivered later; Permanent, or any
// error on the last delivery → copied to the DLQ and terminated.
//
// ctx stays alive while the runner drains after a shutdown, and is cancelled
// only when ConsumerSpec.DrainTimeout runs out.
type Handler interface {
	Handle(ctx context.Context, d *Delivery) error
}

// HandlerFunc adapts a function to Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, d *Delivery) error { return f(ctx, d) }
