package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

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

// ConsumerSpec says which partitioned consumers a Runner works and how.
type ConsumerSpec struct {
	// Service is the consuming service, e.g. ServiceLedgerWriter; its
	// consumers are ConsumerName(Service, p). Required.
	Service string
	// Stream is StreamInbox or StreamEvents. Required.
	Stream string
	// Partitions is N, as provisioned (default catalog.DefaultPartitions).
	Partitions int
	// Group is the priority group (default DefaultGroup).
	Group string
	// FetchWait bounds one pull request. It must stay well below the
	// consumer's PinnedTTL: the pin is kept alive by the pull requests of
	// its replica. Default min(PinnedTTL/3, 5s). It also bounds how long a
	// shutdown waits for an idle fetch to end.
	FetchWait time.Duration
	// KeepAlive is the InProgress interval while a handler works (default
	// AckWait/3).
	KeepAlive time.Duration
	// DrainTimeout bounds how long an in-flight handler may keep running
	// after Run's ctx ends; then its ctx is cancelled (default 30s).
	DrainTimeout time.Duration
	// RetryBase and RetryMax shape the redelivery delay of a failed
	// delivery without a Retry delay: Backoff(n, RetryBase, RetryMax), a
	// random wait of at most RetryBase·2^(n-1) and RetryMax (defaults 1s
	// and 1m).
	RetryBase, RetryMax time.Duration
	// Logger (nil discards) and Metrics (nil records nothing).
	Logger  *slog.Logger
	Metrics *Metrics
	// DeadLettered, when set, is told of every message copied to the DLQ
	// (after the copy is stored), so the service can record it in its
	// event log.
	DeadLettered func(ctx context.Context, dl DeadLetter)
}

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

func (s *ConsumerSpec) setDefaults() error {
	if s.Service == "" {
		return errors.New("bus: ConsumerSpec.Service is required")
	}
	if _, err := streamPrefix(s.Stream); err != nil {
		return err
	}
	if s.Partitions <= 0 {
		s.Partitions = catalog.DefaultPartitions
	}
	if s.Group == "" {
		s.Group = DefaultGroup
	}
	if s.DrainTimeout <= 0 {
		s.DrainTimeout = 30 * time.Second
	}
	if s.RetryBase <= 0 {
		s.RetryBase = time.Second
	}
	if s.RetryMax <= 0 {
		s.RetryMax = time.Minute
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}

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

// Runner works every partition consumer of one service: one loop per
// partition, each fetching one message at a time through the pinned priority
// group, so exactly one replica works a partition while the others stand by,
// and a work item's messages are handled one after the other in order.
type Runner struct {
	c       *Conn
	spec    ConsumerSpec
	h       Handler
	log     *slog.Logger
	m       serviceMetrics
	bound   []atomic.Bool
	running atomic.Bool

	// afterSettle, when set (tests, benchmarks), is called after every
	// settled delivery.
	afterSettle func(d *Delivery)
}

// NewRunner prepares a runner; Run starts it.
func (c *Conn) NewRunner(spec ConsumerSpec, h Handler) (*Runner, error) {
	if err := spec.setDefaults(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("bus: NewRunner: nil handler")
	}
	return &Runner{
		c:     c,
		spec:  spec,
		h:     h,
		log:   spec.Logger.With("component", "bus.runner", "service", spec.Service, "stream", spec.Stream),
		m:     spec.Metrics.forService(spec.Service),
		bound: make([]atomic.Bool, spec.Partitions),
	}, nil
}

// Run works the partitions until ctx ends, then drains: it stops fetching,
// lets in-flight handlers finish (bounded by DrainTimeout), settles them,
// unpins its partitions so a standby replica takes over at once, and returns
// nil. It survives the server going away and coming back; it returns
// ErrClosed if the connection is closed under it.
func (r *Runner) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("bus: runner already running")
	}
	defer r.running.Store(false)

	// Handlers get a ctx that outlives ctx by DrainTimeout: a shutdown must
	// not abort a GitHub write half way.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.spec.DrainTimeout, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	defer stop()

	var wg sync.WaitGroup
	for p := range r.spec.Partitions {
		wg.Go(func() { r.loop(ctx, hctx, p) })
	}
	if r.m.pending != nil {
		wg.Go(func() { r.watchPending(ctx) })
	}
	wg.Wait()
	if r.c.nc.IsClosed() && ctx.Err() == nil {
		return ErrClosed
	}
	return nil
}

// Ready reports whether the runner is running, connected, and bound to every
// partition consumer with its last pull request answered normally.
func (r *Runner) Ready() bool {
	if !r.running.Load() || !r.c.Connected() {
		return false
	}
	for i := range r.bound {
		if !r.bound[i].Load() {
			return false
		}
	}
	return true
}

// pendingEvery is how often a runner reads its consumers' pending counts
// from the server; deliveries update them in between.
const pendingEvery = 5 * time.Second

// watchPending keeps the consumer_pending gauges true while a partition is
// idle or its handler stuck (no delivery to read them from), until ctx ends.
func (r *Runner) watchPending(ctx context.Context) {
	t := time.NewTicker(pendingEvery)
	defer t.Stop()
	for {
		for p := range r.spec.Partitions {
			name := ConsumerName(r.spec.Service, p)
			ictx, cancel := context.WithTimeout(ctx, 2*time.Second)
			if c, err := r.c.js.Consumer(ictx, r.spec.Stream, name); err == nil {
				info := c.CachedInfo()
				r.m.pending(name).Set(float64(info.NumPending) + float64(info.NumAckPending))
			}
			cancel()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

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

func (r *Runner) loop(ctx, hctx context.Context, p int) {
	name := ConsumerName(r.spec.Service, p)
	log := r.log.With("consumer", name, "partition", p)
	var (
		cons    jetstream.Consumer
		cfg     jetstream.ConsumerConfig
		lastPin string
		wait    = 50 * time.Millisecond
		failing bool
	)
	defer r.bound[p].Store(false)
	pause := func(err error, msg string) {
		r.bound[p].Store(false)
		if !failing {
			log.Warn(msg, "err", err)
			failing = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	for ctx.Err() == nil {
		if r.c.nc.IsClosed() {
			return
		}
		if cons == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := r.c.js.Consumer(cctx, r.spec.Stream, name)
			cancel()
			if err != nil {
				pause(err, "consumer not available")
				continue
			}
			cons, cfg = c, c.CachedInfo().Config
		}
		batch, err := cons.Fetch(1,
			jetstream.FetchMaxWait(r.fetchWait(cfg)),
			jetstream.FetchPriorityGroup(r.spec.Group))
		if err != nil {
			pause(err, "fetch failed")
			continue
		}
		// The pull request is out: this partition is being consumed.
		r.bound[p].Store(true)
		var msg jetstream.Msg
		for m := range batch.Messages() {
			msg = m
		}
		if msg == nil {
			switch ferr := batch.Error(); {
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
			if failing {
				log.Info("consuming again")
			}
			failing, wait = false, 50*time.Millisecond
			r.bound[p].Store(true)
			continue
		}
		failing, wait = false, 50*time.Millisecond
		r.bound[p].Store(true)
		if pin := msg.Headers().Get(headerPinID); pin != "" {
			lastPin = pin
		}
		if ctx.Err() != nil {
			// Shutdown began while this pull was pending: hand the message
			// straight back (it stays first in its partition) rather than
			// start new work.
			_ = msg.Nak()
			break
		}
		r.handle(hctx, p, name, msg, cfg, log)
	}
	r.unpin(cons, name, lastPin, log)
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

func (r *Runner) handle(hctx context.Context, p int, name string, msg jetstream.Msg, cfg jetstream.ConsumerConfig, log *slog.Logger) {
	meta, err := msg.Metadata()
	if err != nil {
		log.Error("delivery without metadata", "err", err)
		_ = msg.NakWithDelay(r.spec.RetryBase)
		return
	}
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
	start := time.Now()
	herr := r.call(hctx, d)
	kcancel()
	kwg.Wait()
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

func (r *Runner) call(ctx context.Context, d *Delivery) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("handler panic: %v", v)
		}
	}()
	return r.h.Handle(ctx, d)
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
	nm := &nats.Msg{Subject: dlqSubject(consumer, d.Subject), Header: h, Data: d.Data}
	_, err := r.c.publish(ctx, nm, fmt.Sprintf("dlq:%s:%d", r.spec.Stream, d.StreamSeq))
	return err
}

// Run is NewRunner followed by Run.
func (c *Conn) Run(ctx context.Context, spec ConsumerSpec, h Handler) error {
	r, err := c.NewRunner(spec, h)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
