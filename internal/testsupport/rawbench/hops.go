package rawbench

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Hops is the raw JetStream path of a pipeline's hops, for a benchmark
// outside package bus that compares the system with it: an inbox stream as
// the bus's (work queue, file storage, discard new, a 2 h duplicate window),
// an event stream (limits), consumers that work one message at a time and
// double-ack, and a stream kept as a key-value bucket is (the last message
// of each subject) for compare-and-set.
type Hops struct {
	js     jetstream.JetStream
	prefix string
	gates  jetstream.Stream
	wg     sync.WaitGroup
}

// NewHops creates the streams <name>_IN (subjects <prefix>.in.>), <name>_EV
// (<prefix>.ev.>) and <name>_GATE (<prefix>.gate.>) on nc's server. None is
// capped: a server reserves caps up front.
func NewHops(ctx context.Context, nc *nats.Conn, name, prefix string) (*Hops, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	for _, s := range []jetstream.StreamConfig{
		{Name: name + "_IN", Subjects: []string{prefix + ".in.>"}, Retention: jetstream.WorkQueuePolicy},
		{Name: name + "_EV", Subjects: []string{prefix + ".ev.>"}, Retention: jetstream.LimitsPolicy},
	} {
		s.Storage, s.Discard, s.Duplicates = jetstream.FileStorage, jetstream.DiscardNew, 2*time.Hour
		if _, err := js.CreateOrUpdateStream(ctx, s); err != nil {
			return nil, fmt.Errorf("rawbench: stream %s: %w", s.Name, err)
		}
	}
	gates, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: name + "_GATE", Subjects: []string{prefix + ".gate.>"},
		Storage: jetstream.FileStorage, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew})
	if err != nil {
		return nil, fmt.Errorf("rawbench: stream %s_GATE: %w", name, err)
	}
	return &Hops{js: js, prefix: prefix, gates: gates}, nil
}

// Publish publishes data on subject with a Nats-Msg-Id and waits for the
// PubAck.
func (h *Hops) Publish(ctx context.Context, subject string, data []byte, msgID string) error {
	_, err := h.js.Publish(ctx, subject, data, jetstream.WithMsgID(msgID))
	return err
}

// Msg is a consumed message.
type Msg struct {
	Subject, MsgID string
	Data           []byte
}

// Consume runs a durable pull consumer of stream (filtered on filter, ""
// for all) until ctx ends: one message in flight, handle, then a double ack;
// a message handle fails is left to redelivery and reported to fail.
func (h *Hops) Consume(ctx context.Context, stream, durable, filter string, handle func(Msg) error, fail func(error)) error {
	cons, err := h.js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
		Durable: durable, FilterSubject: filter, AckPolicy: jetstream.AckExplicitPolicy,
		MaxAckPending: 1, AckWait: time.Minute,
	})
	if err != nil {
		return err
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for ctx.Err() == nil {
			batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
			if err != nil {
				continue
			}
			for m := range batch.Messages() {
				if err := handle(Msg{Subject: m.Subject(), MsgID: m.Headers().Get(jetstream.MsgIDHeader), Data: m.Data()}); err != nil {
					if ctx.Err() == nil {
						fail(fmt.Errorf("%s: %w", durable, err))
					}
					continue
				}
				_ = m.DoubleAck(ctx)
			}
		}
	}()
	return nil
}

// Wait waits for the consumers to stop (their ctx ended).
func (h *Hops) Wait() { h.wg.Wait() }

// Move moves gate key: a read of its last state, then a compare-and-set on
// that revision, as a key-value update is.
func (h *Hops) Move(ctx context.Context, key string, value []byte) error {
	subject := h.prefix + ".gate." + key
	rev := uint64(0)
	if m, err := h.gates.GetLastMsgForSubject(ctx, subject); err == nil {
		rev = m.Sequence
	}
	_, err := h.js.Publish(ctx, subject, value, jetstream.WithExpectLastSequencePerSubject(rev))
	return err
}
