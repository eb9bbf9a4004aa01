package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
)

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
	ms := newMembership(kv, lease, r.self(), r.log)
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
	r.stopLoops()
	if r.c.nc.IsClosed() && ctx.Err() == nil {
		return ErrClosed
	}
	return nil
}

// stopLoops stops every partition loop and waits until each has settled
// the message in hand and handed its partition over.
func (r *Runner) stopLoops() {
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
}

// self is this replica's membership record as it joins: a new incarnation,
// working no partition yet.
func (r *Runner) self() Member {
	return Member{
		ID: r.id, Service: r.spec.Service, Name: r.spec.Member, Since: time.Now().UTC(),
		Partitions: r.spec.Partitions, Concurrency: r.spec.Concurrency, Working: []int{},
		Incarnation: nuid.Next(),
	}
}

// prepare waits until the stream and BucketMembers can be read, and checks
// that the stream has the runner's partition count. It returns a nil bucket
// when ctx ended or the connection closed first.
func (r *Runner) prepare(ctx context.Context) (jetstream.KeyValue, time.Duration, error) {
	warned := false
	for attempt := 1; ctx.Err() == nil && !r.c.nc.IsClosed(); attempt++ {
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
		case <-time.After(Backoff(attempt, 50*time.Millisecond, 2*time.Second)):
		}
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

// Run is NewRunner followed by Run.
func (c *Conn) Run(ctx context.Context, spec ConsumerSpec, h Handler) error {
	r, err := c.NewRunner(spec, h)
	if err != nil {
		return err
	}
	return r.Run(ctx)
}
