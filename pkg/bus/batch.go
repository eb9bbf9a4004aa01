package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// PublishAll stores every message of msgs and returns their PubAcks in the
// same order. The messages go out together, without waiting for one PubAck
// before sending the next, and the acks are awaited together: n messages
// cost one round trip to the stream rather than n. A message that is not
// acknowledged that way (a timeout, a lost reply, a denial) is published
// again alone, through Publish, under the same Nats-Msg-Id, so a message
// stored twice is dropped by the stream. The first error is returned; the
// acks of the messages before it are valid.
func (c *Conn) PublishAll(ctx context.Context, msgs []Message) ([]PubAck, error) {
	acks := make([]PubAck, len(msgs))
	for _, m := range msgs {
		if m.MsgID == "" {
			return nil, fmt.Errorf("publish %s: %w", m.Subject, ErrNoMsgID)
		}
		if err := checkHeader(m.Header); err != nil {
			return nil, fmt.Errorf("publish %s: %w", m.Subject, err)
		}
		if err := checkSubject(m.Subject); err != nil {
			return nil, err
		}
	}
	if len(msgs) == 1 {
		ack, err := c.publish(ctx, toNatsMsg(msgs[0]), msgs[0].MsgID)
		acks[0] = ack
		return acks, err
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i, m := range msgs {
		nm := toNatsMsg(m)
		if nm.Header == nil {
			nm.Header = nats.Header{}
		}
		f, err := c.js.PublishMsgAsync(nm, jetstream.WithMsgID(m.MsgID))
		if err != nil {
			break // this one and the rest are published alone below
		}
		futures[i] = f
	}
	// A future that does not resolve in PublishTimeout (a denied subject is
	// never acknowledged) is left to the one-by-one path, which tells a
	// denial from a timeout.
	done := make([]bool, len(msgs))
	timeout := time.NewTimer(c.opts.PublishTimeout)
	defer timeout.Stop()
wait:
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case a := <-f.Ok():
			acks[i], done[i] = PubAck{Stream: a.Stream, Seq: a.Sequence, Duplicate: a.Duplicate}, true
		case err := <-f.Err():
			if full := streamFullErr(err); full != nil {
				return acks, fmt.Errorf("publish %s: %w: %w", msgs[i].Subject, ErrStreamFull, err)
			}
		case <-timeout.C:
			break wait
		case <-ctx.Done():
			return acks, fmt.Errorf("publish %s: %w", msgs[i].Subject, ctx.Err())
		}
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
