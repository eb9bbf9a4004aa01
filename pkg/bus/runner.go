package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
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
	// Member names this replica among its service's replicas (default the
	// host name: a pod's name on Kubernetes, a container's id under
	// compose). It need not be unique: the member id adds the process id
	// and a sequence.
	Member string
	// Concurrency bounds the handlers this replica runs at once, over all
	// the partitions it owns (0: one per owned partition). With the
	// partition count it decides how many replicas add throughput: the
	// service handles at most Partitions messages at once, one replica at
	// most Concurrency.
	Concurrency int
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
	if s.Member == "" {
		s.Member, _ = os.Hostname()
	}
	if s.Concurrency < 0 {
		return errors.New("bus: ConsumerSpec.Concurrency must not be negative")
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

// Runner works one service's partition consumers in one replica. The
// replicas of a service share the partitions: each announces itself in
// BucketMembers, every replica computes the same division of the partitions
// between the live ones (assign), and each pulls only the partitions it
// owns — one loop per partition, each fetching one message at a time
// through the pinned priority group, so a work item's messages are handled
// one after the other in order. When a replica joins, leaves or dies, the
// division changes: a replica hands a partition it no longer owns over
// (finishes the message in hand, unpins, says so in its record), and the new
// owner takes it — at once after a clean stop, a lease after a death
// (docs/decisions/071-replicas-share-the-partitions.md). Whatever the
// replicas believe, the consumer's MaxAckPending of 1 keeps one message of a
// partition in flight at a time.
type Runner struct {
	c       *Conn
	spec    ConsumerSpec
	h       Handler
	log     *slog.Logger
	m       serviceMetrics
	id      string
	bound   []atomic.Bool
	running atomic.Bool
	// joined: the runner has its first view of the service's replicas.
	joined atomic.Bool
	// slots bounds the handlers running at once (nil: no bound).
	slots chan struct{}

	// mu guards owned and parts.
	mu sync.Mutex
	// owned are the partitions this replica owns in its latest view.
	owned []int
	// parts are the partition loops running, owned or being handed over.
	parts map[int]*partLoop
	// stopped is closed when Run stops acting on views (set by Run before
	// any loop starts).
	stopped chan struct{}

	// afterSettle, when set (tests, benchmarks), is called after every
	// settled delivery.
	afterSettle func(d *Delivery)
}

// partLoop is one partition's fetch loop.
type partLoop struct {
	p      int
	cancel context.CancelFunc
	done   chan struct{}
	// pin is the pin id this loop last received ("" before its first
	// message).
	pin atomic.Pointer[string]
}

func (l *partLoop) pinned() string {
	if p := l.pin.Load(); p != nil {
		return *p
	}
	return ""
}

// NewRunner prepares a runner; Run starts it.
func (c *Conn) NewRunner(spec ConsumerSpec, h Handler) (*Runner, error) {
	if err := spec.setDefaults(); err != nil {
		return nil, err
	}
	if h == nil {
		return nil, errors.New("bus: NewRunner: nil handler")
	}
	id := newMemberID(spec.Service, spec.Member)
	r := &Runner{
		c:     c,
		spec:  spec,
		h:     h,
		id:    id,
		log:   spec.Logger.With("component", "bus.runner", "service", spec.Service, "stream", spec.Stream, "member", id),
		m:     spec.Metrics.forService(spec.Service),
		bound: make([]atomic.Bool, spec.Partitions),
		parts: map[int]*partLoop{},
	}
	if spec.Concurrency > 0 {
		r.slots = make(chan struct{}, spec.Concurrency)
	}
	return r, nil
}

// Member is this runner's id among its service's replicas (BucketMembers).
func (r *Runner) Member() string { return r.id }

// Owned returns the partitions this replica owns now, ascending.
func (r *Runner) Owned() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.owned)
}

// Run works the partitions this replica owns until ctx ends, then drains:
// it leaves the membership (the others take its partitions at once), stops
// fetching, lets in-flight handlers finish (bounded by DrainTimeout),
// settles them, unpins its partitions, and returns nil. It survives the
// server going away and coming back; it returns ErrClosed if the connection
// is closed under it, and an error at once if the stream's partition count
// is not the runner's.
func (r *Runner) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("bus: runner already running")
	}
	defer r.running.Store(false)
	defer r.joined.Store(false)

	// Handlers get a ctx that outlives ctx by DrainTimeout: a shutdown must
	// not abort a GitHub write half way.
	hctx, hcancel := context.WithCancel(context.WithoutCancel(ctx))
	defer hcancel()
	stop := context.AfterFunc(ctx, func() {
		t := time.AfterFunc(r.spec.DrainTimeout, hcancel)
		context.AfterFunc(hctx, func() { t.Stop() })
	})
	defer stop()

	kv, lease, err := r.prepare(ctx)
	if err != nil || kv == nil {
		if r.c.nc.IsClosed() && ctx.Err() == nil {
			return ErrClosed
		}
		return err
	}
	self := Member{
		ID: r.id, Service: r.spec.Service, Name: r.spec.Member, Since: time.Now().UTC(),
		Partitions: r.spec.Partitions, Concurrency: r.spec.Concurrency, Working: []int{},
		Incarnation: nuid.Next(),
	}
	ms := newMembership(kv, lease, self, r.log)
	mctx, mcancel := context.WithCancel(ctx)
	var mwg sync.WaitGroup
	mwg.Go(func() { ms.run(mctx) })
	if r.m.pending != nil {
		mwg.Go(func() { r.watchPending(mctx) })
	}

	ended := make(chan int, r.spec.Partitions)
	stopped := make(chan struct{})
	r.stopped = stopped
	var claimed map[int]bool
	r.log.Info("consuming: this replica shares the partitions with the service's other live replicas", "partitions", r.spec.Partitions)
	closed := r.c.closed
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case <-closed:
			break loop
		case view := <-ms.views:
			claimed = r.apply(ctx, hctx, view, claimed, ended, ms)
		case p := <-ended:
			r.ended(ctx, hctx, p, ended, ms)
		}
	}
	// Leave first: the others start pulling this replica's partitions while
	// its loops drain; the server hands each one over when its in-flight
	// message is settled and its loop unpins it.
	close(stopped)
	mcancel()
	mwg.Wait()
	if !r.c.nc.IsClosed() {
		ms.leave()
	}
	r.mu.Lock()
	r.owned = nil
	loops := make([]*partLoop, 0, len(r.parts))
	for _, l := range r.parts {
		l.cancel()
		loops = append(loops, l)
	}
	r.mu.Unlock()
	for _, l := range loops {
		<-l.done
	}
	r.mu.Lock()
	clear(r.parts)
	r.mu.Unlock()
	r.m.setOwned(0)
	if r.c.nc.IsClosed() && ctx.Err() == nil {
		return ErrClosed
	}
	return nil
}

// prepare waits until the stream and BucketMembers can be read, and checks
// that the stream has the runner's partition count. It returns a nil bucket
// when ctx ended or the connection closed first.
func (r *Runner) prepare(ctx context.Context) (jetstream.KeyValue, time.Duration, error) {
	wait := 50 * time.Millisecond
	warned := false
	for ctx.Err() == nil && !r.c.nc.IsClosed() {
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			n, err := r.c.StreamPartitions(cctx, r.spec.Stream)
			if err != nil {
				return err
			}
			if n != r.spec.Partitions {
				return fmt.Errorf("%w: %s has %d partitions, this replica runs with %d: every process must run with the stream's count",
					errWrongPartitions, r.spec.Stream, n, r.spec.Partitions)
			}
			return nil
		}()
		var kv jetstream.KeyValue
		var lease time.Duration
		if err == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			kv, err = r.c.js.KeyValue(cctx, BucketMembers)
			if err == nil {
				var st jetstream.KeyValueStatus
				if st, err = kv.Status(cctx); err == nil {
					lease = st.TTL()
				}
			}
			cancel()
		}
		if errors.Is(err, errWrongPartitions) {
			return nil, 0, err
		}
		if err == nil && lease > 0 {
			return kv, lease, nil
		}
		if err == nil {
			err = fmt.Errorf("bucket %s has no TTL", BucketMembers)
		}
		if !warned {
			r.log.Warn("stream or membership bucket not available; retrying", "err", err)
			warned = true
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
	return nil, 0, nil
}

var errWrongPartitions = errors.New("bus: partition count mismatch")

// apply acts on a new view of the service's replicas: it stops the loops of
// partitions this replica no longer owns (each hands its partition over as
// it ends) and starts loops for the partitions it now owns. A partition no
// other live replica works is unpinned before this replica pulls it, so a
// pin left by a dead replica does not hold it until PinnedTTL. It returns
// which partitions other replicas work.
func (r *Runner) apply(ctx, hctx context.Context, view []Member, before map[int]bool, ended chan int, ms *membership) map[int]bool {
	mine := assign(r.spec.Service, r.spec.Partitions, view)[r.id]
	claimed := map[int]bool{}
	for _, m := range view {
		if m.ID == r.id {
			continue
		}
		if m.Partitions != r.spec.Partitions {
			r.log.Warn("a replica of this service runs with another partition count", "other", m.ID, "its_partitions", m.Partitions)
		}
		for _, p := range m.Working {
			claimed[p] = true
		}
	}
	r.mu.Lock()
	prev := r.owned
	r.owned = mine
	var unpin []*partLoop
	for p, l := range r.parts {
		if !slices.Contains(mine, p) {
			l.cancel()
			continue
		}
		// A replica that worked p stopped (its record changed or
		// expired) before this loop was ever given a message: whatever
		// pin remains is a dead replica's.
		if before[p] && !claimed[p] && l.pinned() == "" {
			unpin = append(unpin, l)
		}
	}
	started := false
	for _, p := range mine {
		if _, ok := r.parts[p]; ok {
			continue
		}
		l := r.startLoop(ctx, hctx, p, ended, !claimed[p])
		r.parts[p] = l
		started = true
	}
	working := r.workingLocked()
	r.mu.Unlock()
	r.m.setOwned(len(mine))
	r.joined.Store(true)
	if !slices.Equal(prev, mine) {
		r.log.Info("partitions assigned", "owned", mine, "replicas", len(view))
	}
	for _, l := range unpin {
		go r.unpinForeign(l)
	}
	if started {
		ms.setWorking(ctx, working)
	}
	return claimed
}

// ended removes a finished partition loop, starts it again if the partition
// is owned once more, and announces what this replica works now.
func (r *Runner) ended(ctx, hctx context.Context, p int, ended chan int, ms *membership) {
	r.mu.Lock()
	l, ok := r.parts[p]
	if ok {
		select {
		case <-l.done:
			delete(r.parts, p)
		default:
			ok = false // a newer loop of p, still running
		}
	}
	if ok && slices.Contains(r.owned, p) && ctx.Err() == nil && !r.c.nc.IsClosed() {
		r.parts[p] = r.startLoop(ctx, hctx, p, ended, false)
	}
	working := r.workingLocked()
	r.mu.Unlock()
	if ctx.Err() == nil {
		ms.setWorking(ctx, working)
	}
}

func (r *Runner) workingLocked() []int {
	w := make([]int, 0, len(r.parts))
	for p := range r.parts {
		w = append(w, p)
	}
	slices.Sort(w)
	return w
}

// startLoop starts partition p's loop; unpinFirst releases a pin held by a
// replica that no longer works p before the loop pulls.
func (r *Runner) startLoop(ctx, hctx context.Context, p int, ended chan<- int, unpinFirst bool) *partLoop {
	lctx, cancel := context.WithCancel(ctx)
	l := &partLoop{p: p, cancel: cancel, done: make(chan struct{})}
	stopped := r.stopped
	go func() {
		defer func() {
			close(l.done)
			select {
			case ended <- p:
			case <-stopped:
			}
		}()
		if unpinFirst {
			r.unpinForeign(l)
		}
		r.loop(lctx, hctx, l)
	}()
	return l
}

// unpinForeign unpins l's partition when it is pinned to another client
// than l.
func (r *Runner) unpinForeign(l *partLoop) {
	name := ConsumerName(r.spec.Service, l.p)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cons, err := r.c.js.Consumer(ctx, r.spec.Stream, name)
	if err != nil {
		return
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return
	}
	for _, g := range info.PriorityGroups {
		if g.Group != r.spec.Group || g.PinnedClientID == "" || g.PinnedClientID == l.pinned() {
			continue
		}
		s, err := r.c.js.Stream(ctx, r.spec.Stream)
		if err == nil {
			err = s.UnpinConsumer(ctx, name, r.spec.Group)
		}
		if err != nil {
			r.log.Warn("unpinning a partition its last replica left failed; it is released after PinnedTTL", "partition", l.p, "err", err)
			return
		}
		r.log.Info("unpinned a partition its last replica left", "partition", l.p)
	}
}

// Ready reports whether the runner is running, connected, has joined its
// service's replicas, and is bound to every partition consumer it owns with
// its last pull request answered normally. A replica that owns no partition
// (more replicas than partitions) is ready: it stands by.
func (r *Runner) Ready() bool {
	if !r.running.Load() || !r.joined.Load() || !r.c.Connected() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.owned {
		if !r.bound[p].Load() {
			return false
		}
	}
	return true
}

// Settled reports whether the runner is Ready and works exactly the
// partitions it owns: no partition is being handed over to or from it.
func (r *Runner) Settled() bool {
	if !r.Ready() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.parts) != len(r.owned) {
		return false
	}
	for _, p := range r.owned {
		if _, ok := r.parts[p]; !ok {
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
// A replica reports the partitions it owns; the others' gauges it holds at
// 0, so that a sum over the replicas counts each partition once.
func (r *Runner) watchPending(ctx context.Context) {
	t := time.NewTicker(pendingEvery)
	defer t.Stop()
	for {
		owned := r.Owned()
		for p := range r.spec.Partitions {
			name := ConsumerName(r.spec.Service, p)
			if !slices.Contains(owned, p) {
				r.m.pending(name).Set(0)
				continue
			}
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

// loop works partition l.p until ctx ends (the partition was handed over or
// the runner stops), then unpins it if it still holds the pin.
func (r *Runner) loop(ctx, hctx context.Context, l *partLoop) {
	p := l.p
	name := ConsumerName(r.spec.Service, p)
	log := r.log.With("consumer", name, "partition", p)
	var (
		cons    jetstream.Consumer
		cfg     jetstream.ConsumerConfig
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

func (r *Runner) handle(lctx, hctx context.Context, p int, name string, msg jetstream.Msg, cfg jetstream.ConsumerConfig, log *slog.Logger) {
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
	if !r.acquire(lctx) {
		// The partition was handed over (or the runner stops) while the
		// message waited for a slot: hand it back untouched.
		kcancel()
		kwg.Wait()
		_ = msg.Nak()
		return
	}
	start := time.Now()
	tctx, span := traceDelivery(hctx, r.spec.Service, d)
	herr := r.call(tctx, d)
	r.release()
	endSpan(span, herr)
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
