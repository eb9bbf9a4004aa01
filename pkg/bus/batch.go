package bus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace"
)

// PublishAll stores every message of msgs and returns their PubAcks in the
// same order. The messages go out together, without waiting for one PubAck
// before sending the next, and the acks are awaited together: n messages
// cost one round trip to the stream rather than n. A message that is not
// acknowledged that way (a timeout, a lost reply, a denial) is published
// again alone, through Publish, under the same Nats-Msg-Id, so a message
// stored twice is dropped by the stream. The first error is returned; the
// acks of the messages before it are valid.
func (c *Conn) PublishAll(ctx context.Context, msgs []Message) (acks []PubAck, err error) {
	if err := checkMessages(msgs); err != nil {
		return nil, err
	}
	acks = make([]PubAck, len(msgs))
	// Each message is its own publish span, carrying its traceparent
	// (docs/decisions/077-traces-across-the-hops.md); the caller's slice
	// is left as it was.
	msgs = slices.Clone(msgs)
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		if err := c.sign(&msgs[i]); err != nil {
			return nil, err
		}
		msgs[i], spans[i] = tracePublish(ctx, msgs[i])
	}
	defer func() {
		for i, span := range spans {
			var failed error
			if err != nil && acks[i].Stream == "" {
				failed = err
			}
			endSpan(span, failed)
		}
	}()
	if len(msgs) == 1 {
		ack, err := c.publish(ctx, toNatsMsg(msgs[0]), msgs[0].MsgID)
		acks[0] = ack
		return acks, err
	}
	done, err := c.publishAsync(ctx, msgs, acks)
	if err != nil {
		return acks, err
	}
	for i, m := range msgs {
		if done[i] {
			continue
		}
		ack, err := c.publish(ctx, toNatsMsg(m), m.MsgID)
		if err != nil {
			return acks, err
		}
		acks[i] = ack
	}
	return acks, nil
}

// checkMessages refuses a batch with a message the stream would not dedupe
// (no MsgID) or that the bus does not publish (a bad header or subject).
func checkMessages(msgs []Message) error {
	for _, m := range msgs {
		if m.MsgID == "" {
			return fmt.Errorf("publish %s: %w", m.Subject, ErrNoMsgID)
		}
		if err := checkHeader(m.Header); err != nil {
			return fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		if err := checkSubject(m.Subject); err != nil {
			return err
		}
	}
	return nil
}

// publishAsync sends msgs without waiting between them and collects their
// PubAcks into acks; done says which were acknowledged. A message that was
// not (not sent, refused, or unanswered within PublishTimeout: a denied
// subject is never acknowledged) is left to the one-by-one path, which tells
// a denial from a timeout. The error is a full stream or ctx's end.
func (c *Conn) publishAsync(ctx context.Context, msgs []Message, acks []PubAck) (done []bool, err error) {
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		nm := toNatsMsg(m)
		if nm.Header == nil {
			nm.Header = nats.Header{}
		}
		f, err := c.js.PublishMsgAsync(nm, jetstream.WithMsgID(m.MsgID))
		if err != nil {
			break // this one and the rest are published alone
		}
		futures[i] = f
	}
	done = make([]bool, len(msgs))
	timeout := time.NewTimer(c.opts.PublishTimeout)
	defer timeout.Stop()
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case a := <-f.Ok():
			acks[i], done[i] = PubAck{Stream: a.Stream, Seq: a.Sequence, Duplicate: a.Duplicate}, true
		case err := <-f.Err():
			if full := streamFullErr(err); full != nil {
				return done, fmt.Errorf("publish %s: %w: %w", msgs[i].Subject, ErrStreamFull, err)
			}
		case <-timeout.C:
			return done, nil
		case <-ctx.Done():
			return done, fmt.Errorf("publish %s: %w", msgs[i].Subject, ctx.Err())
		}
	}
	return done, nil
}

// Has reports, for each key, whether it is in the bucket. The keys are read
// concurrently, so n keys cost about one round trip.
func (k *KV) Has(ctx context.Context, keys ...string) ([]bool, error) {
	out := make([]bool, len(keys))
	errs := make([]error, len(keys))
	get := func(i int) {
		_, err := k.Get(ctx, keys[i])
		switch {
		case err == nil:
			out[i] = true
		case errors.Is(err, ErrNotFound):
		default:
			errs[i] = err
		}
	}
	var wg sync.WaitGroup
	for i := 1; i < len(keys); i++ {
		wg.Go(func() { get(i) })
	}
	if len(keys) > 0 {
		get(0)
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// PutAll stores every entry's Value under its Key (Revision and Created are
// ignored), the writes sent together and their acknowledgements awaited
// together: n writes cost about one round trip. It returns the entries that
// were not stored, with the first error.
func (k *KV) PutAll(ctx context.Context, entries []KVEntry) ([]KVEntry, error) {
	futures := make([]jetstream.PubAckFuture, len(entries))
	var failed []KVEntry
	var first error
	fail := func(e KVEntry, err error) {
		failed = append(failed, e)
		if first == nil {
			first = k.err("put", e.Key, err)
		}
	}
	for i, e := range entries {
		f, err := k.js.PublishAsync("$KV."+k.bucket+"."+encodeKey(e.Key), e.Value)
		if err != nil {
			fail(e, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
		case err := <-f.Err():
			fail(entries[i], err)
		case <-ctx.Done():
			fail(entries[i], ctx.Err())
		}
	}
	return failed, first
}
