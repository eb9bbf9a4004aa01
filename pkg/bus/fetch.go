package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/pkg/catalog"
)

// fetchWait is how long a pull waits for a message: short enough that a
// pinned replica renews its pin well within PinnedTTL.
func (r *Runner) fetchWait(cfg jetstream.ConsumerConfig) time.Duration {
	if r.spec.FetchWait > 0 {
		return r.spec.FetchWait
	}
	w := 5 * time.Second
	if cfg.PinnedTTL > 0 {
		w = min(w, cfg.PinnedTTL/3)
	}
	return max(w, 50*time.Millisecond)
}

// loop works partition l.p until ctx ends (the partition was handed over or
// the runner stops), then unpins it if it still holds the pin.
func (r *Runner) loop(ctx, hctx context.Context, l *partLoop) {
	p := l.p
	name := ConsumerName(r.spec.Service, p)
	log := r.log.With("consumer", name, "partition", p)
	var (
		cons jetstream.Consumer
		cfg  jetstream.ConsumerConfig
		out  = outage{log: log}
	)
	defer r.bound[p].Store(false)
	pause := func(err error, msg string) {
		r.bound[p].Store(false)
		out.pause(ctx, err, msg)
	}
	for ctx.Err() == nil {
		if r.c.nc.IsClosed() {
			return
		}
		if cons == nil {
			c, err := r.consumer(ctx, name)
			if err != nil {
				pause(err, "consumer not available")
				continue
			}
			cons, cfg = c, c.CachedInfo().Config
		}
		// Once the pull request is out, this partition is being consumed:
		// bound from then, not once the pull returns, which on a quiet
		// partition is the whole fetch wait (a start's readiness waited
		// 5 s for it).
		msg, ferr, err := r.fetch(cons, cfg, func() { r.bound[p].Store(true) })
		if err != nil {
			pause(err, "fetch failed")
			continue
		}
		if msg == nil {
			switch {
			case ferr == nil, errors.Is(ferr, jetstream.ErrPinIDMismatch):
				// An empty pull, or our pin was given to another replica
				// (nats.go forgets it): we are a standby now.
			case errors.Is(ferr, jetstream.ErrConsumerDeleted), errors.Is(ferr, jetstream.ErrConsumerNotFound):
				cons = nil
				pause(ferr, "consumer gone")
				continue
			case errors.Is(ferr, nats.ErrConnectionClosed):
				return
			default:
				pause(ferr, "fetch failed")
				continue
			}
			if out.over() {
				log.Info("consuming again")
			}
			r.bound[p].Store(true)
			continue
		}
		out.over()
		r.bound[p].Store(true)
		if pin := msg.Headers().Get(headerPinID); pin != "" {
			l.pin.Store(&pin)
		}
		if ctx.Err() != nil {
			// The partition was handed over, or shutdown began, while this
			// pull was pending: hand the message straight back (it stays
			// first in its partition) rather than start new work.
			_ = msg.Nak()
			break
		}
		r.handle(ctx, hctx, p, name, msg, cfg, log)
	}
	r.unpin(cons, name, l.pinned(), log)
}

// consumer looks up the partition consumer name.
func (r *Runner) consumer(ctx context.Context, name string) (jetstream.Consumer, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return r.c.js.Consumer(cctx, r.spec.Stream, name)
}

// fetch pulls one message of cons through the service's priority group. err
// is the pull request's; when it went out, msg is the message, or nil with
// ferr saying why none came (nil: an empty pull). out is called once the
// request is out, before the pull returns.
func (r *Runner) fetch(cons jetstream.Consumer, cfg jetstream.ConsumerConfig, out func()) (msg jetstream.Msg, ferr, err error) {
	batch, err := cons.Fetch(1,
		jetstream.FetchMaxWait(r.fetchWait(cfg)),
		jetstream.FetchPriorityGroup(r.spec.Group))
	if err != nil {
		return nil, nil, err
	}
	out()
	for m := range batch.Messages() {
		msg = m
	}
	if msg == nil {
		return nil, batch.Error(), nil
	}
	return msg, nil, nil
}

// outage is a partition loop's run of failures: it logs the first and waits
// the bus's jittered backoff between attempts, so the replicas of a service
// that lost the server together do not come back in step.
type outage struct {
	log      *slog.Logger
	failures int
}

// pause records a failure and waits before the next attempt (or until ctx
// ends).
func (o *outage) pause(ctx context.Context, err error, msg string) {
	if o.failures == 0 {
		o.log.Warn(msg, "err", err)
	}
	o.failures++
	select {
	case <-ctx.Done():
	case <-time.After(Backoff(o.failures, 50*time.Millisecond, 2*time.Second)):
	}
}

// over ends the run of failures; it reports whether there was one.
func (o *outage) over() bool {
	was := o.failures > 0
	o.failures = 0
	return was
}

// unpin releases the partition if this loop still holds its pin, so that a
// standby replica takes over now rather than after PinnedTTL.
func (r *Runner) unpin(cons jetstream.Consumer, name, pin string, log *slog.Logger) {
	if cons == nil || pin == "" || !r.c.Connected() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	info, err := cons.Info(ctx)
	if err != nil {
		log.Warn("unpin: consumer info", "err", err)
		return
	}
	for _, g := range info.PriorityGroups {
		if g.Group != r.spec.Group || g.PinnedClientID != pin {
			continue
		}
		s, err := r.c.js.Stream(ctx, r.spec.Stream)
		if err == nil {
			err = s.UnpinConsumer(ctx, name, r.spec.Group)
		}
		if err != nil {
			log.Warn("unpin failed", "err", err)
			return
		}
		log.Debug("unpinned")
	}
}

// handle hands msg to the handler in one of the replica's slots, keeping it
// in progress meanwhile, and settles it by the handler's result.
func (r *Runner) handle(lctx, hctx context.Context, p int, name string, msg jetstream.Msg, cfg jetstream.ConsumerConfig, log *slog.Logger) {
	meta, err := msg.Metadata()
	if err != nil {
		log.Error("delivery without metadata", "err", err)
		_ = msg.NakWithDelay(r.spec.RetryBase)
		return
	}
	d := newDelivery(msg, meta, p, cfg)
	log = log.With("msg_id", d.MsgID, "stream_seq", d.StreamSeq, "delivered", d.NumDelivered)
	inc(r.m.received)
	var pending prometheus.Gauge
	if r.m.pending != nil {
		// The ones waiting behind this one, and this one.
		pending = r.m.pending(name)
		pending.Set(float64(meta.NumPending) + 1)
		defer func() { pending.Set(float64(meta.NumPending)) }()
	}
	if d.NumDelivered > 1 {
		inc(r.m.redelivered)
	}

	stopKeepAlive := r.keepAlive(hctx, d, cfg, log)
	if !r.acquire(lctx) {
		// The partition was handed over (or the runner stops) while the
		// message waited for a slot: hand it back untouched.
		stopKeepAlive()
		_ = msg.Nak()
		return
	}
	start := time.Now()
	tctx, span := traceDelivery(hctx, r.spec.Service, d)
	herr := r.call(tctx, d)
	r.release()
	endSpan(span, herr)
	stopKeepAlive()
	if r.m.latency != nil {
		r.m.latency.Observe(time.Since(start).Seconds())
	}

	// Settle even when the drain deadline has passed: an ack that is never
	// sent costs a redelivery after AckWait.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(hctx), 10*time.Second)
	defer cancel()
	r.settle(sctx, d, name, herr, log)
	if r.afterSettle != nil {
		r.afterSettle(d)
	}
}

// newDelivery is the Delivery of msg, a message of partition p.
func newDelivery(msg jetstream.Msg, meta *jetstream.MsgMetadata, p int, cfg jetstream.ConsumerConfig) *Delivery {
	d := &Delivery{
		Subject:      msg.Subject(),
		Header:       fromNatsHeader(msg.Headers()),
		Data:         msg.Data(),
		MsgID:        msg.Headers().Get(jetstream.MsgIDHeader),
		Partition:    p,
		NumDelivered: meta.NumDelivered,
		Pending:      meta.NumPending,
		MaxDeliver:   cfg.MaxDeliver,
		StreamSeq:    meta.Sequence.Stream,
		Time:         meta.Timestamp,
		msg:          msg,
	}
	if _, _, key, t, ok := catalog.ParseSubject(d.Subject, true); ok {
		d.Key, d.Type = key, t
	}
	return d
}

// keepAlive tells the server that d is in progress every KeepAlive (default
// a third of AckWait) until the returned stop is called, so that a long
// handler is not redelivered to another replica meanwhile. stop waits for
// the ticker to end.
func (r *Runner) keepAlive(hctx context.Context, d *Delivery, cfg jetstream.ConsumerConfig, log *slog.Logger) (stop func()) {
	keep := r.spec.KeepAlive
	if keep <= 0 {
		keep = max(cfg.AckWait/3, 10*time.Millisecond)
	}
	kctx, kcancel := context.WithCancel(hctx)
	var kwg sync.WaitGroup
	kwg.Go(func() {
		t := time.NewTicker(keep)
		defer t.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
				if err := d.InProgress(); err != nil {
					log.Warn("in-progress failed", "err", err)
				}
			}
		}
	})
	return func() {
		kcancel()
		kwg.Wait()
	}
}

// acquire takes one of the replica's handler slots (ConsumerSpec.Concurrency),
// waiting while all are taken; false when ctx ended first.
func (r *Runner) acquire(ctx context.Context) bool {
	if r.slots == nil {
		return true
	}
	select {
	case r.slots <- struct{}{}:
		return true
	default:
	}
	select {
	case r.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

func (r *Runner) release() {
	if r.slots != nil {
		<-r.slots
	}
}

func (r *Runner) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler panic: %v", v)
		}
	}()
	return r.h.Handle(ctx, d)
}
