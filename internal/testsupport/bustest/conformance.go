package bustest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// ConformanceOptions selects what RunConformance exercises.
type ConformanceOptions struct {
	// Stream is the partitioned stream under test: bus.StreamInbox
	// (default; WorkQueue) or bus.StreamEvents (Limits).
	Stream string
	// Service names the consumers the suite provisions (default
	// "conformance").
	Service string
}

// RunConformance runs the bus guarantees every consumer of package bus relies
// on, each as its own subtest, on a real JetStream server (one per subtest):
//
//   - DedupStoredOnce: a re-published msg id is stored once;
//   - OrderPerKey: per-work-item order with 2 replicas over 8 partitions,
//     retries included;
//   - KilledMidMessage: a replica killed mid-message loses nothing;
//   - PoisonToDLQ and PermanentToDLQ: dead letters, with their reasons;
//   - ServerRestart: nothing acked is lost or redelivered across a restart
//     on the same file store;
//   - RunnerSurvivesRestart: a running runner rides out a server restart;
//   - StandbyTakeover: a standby replica gets a partition only once the
//     pinned one stops, and at once when it stops cleanly;
//   - ReplicasShareAndRebalance: replicas divide the partitions evenly and
//     each handles only its own; a replica that joins takes its share, one
//     that stops hands its share over at once, one that dies loses it after
//     its lease (not after PinnedTTL) — per-key order and exactly-once
//     throughout.
func RunConformance[T Parent[T]](t T, opts ConformanceOptions) {
	if opts.Stream == "" {
		opts.Stream = bus.StreamInbox
	}
	if opts.Service == "" {
		opts.Service = "conformance"
	}
	cases := []struct {
		name string
		fn   func(TB, ConformanceOptions)
	}{
		{"DedupStoredOnce", testDedup},
		{"OrderPerKey", testOrder},
		{"KilledMidMessage", testKilled},
		{"PoisonToDLQ", testPoison},
		{"PermanentToDLQ", testPermanent},
		{"ServerRestart", testServerRestart},
		{"RunnerSurvivesRestart", testRunnerSurvivesRestart},
		{"StandbyTakeover", testStandby},
		{"ReplicasShareAndRebalance", testShare},
	}
	for _, c := range cases {
		t.Run(c.name, func(t T) {
			if os.Getenv(EnvURL) == "" {
				t.Parallel()
			}
			c.fn(t, opts)
		})
	}
}

// harness is one subtest's server, topology and helpers.
type harness struct {
	t    TB
	srv  *Server
	topo bus.Topology
	opts ConformanceOptions
	pub  *bus.Conn
	// runners are the runners started, for start to wait until the
	// partitions have settled between them.
	runners []*running
}

func newHarness(t TB, opts ConformanceOptions, sopts Options, mod func(*bus.Topology)) *harness {
	t.Helper()
	topo := FastTopology(8)
	topo.Consumers = []bus.ConsumerGroup{{Service: opts.Service, Stream: opts.Stream}}
	topo.Buckets = []bus.Bucket{} // not under test here; each costs fsyncs
	if mod != nil {
		mod(&topo)
	}
	srv := StartServer(t, sopts)
	srv.Provision(t, topo)
	h := &harness{t: t, srv: srv, topo: topo, opts: opts}
	h.pub = srv.Connect(t, "conformance-publisher")
	return h
}

func (h *harness) prefix() string {
	if h.opts.Stream == bus.StreamEvents {
		return catalog.EventsPrefix
	}
	return catalog.InboxPrefix
}

// subject is the un-partitioned subject for a key; the type has a dot, as
// catalog types do.
func (h *harness) subject(key string) string {
	return h.prefix() + "." + catalog.SubjectKey(key) + ".work-item.reply"
}

func (h *harness) publish(key string, n int, id string) bus.PubAck {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ack, err := h.pub.Publish(ctx, bus.Message{
		Subject: h.subject(key),
		Header:  bus.Header{"ce-id": {id}, "ce-type": {"work-item.reply"}, "traceparent": {"00-" + id}},
		Data:    []byte(key + "|" + strconv.Itoa(n)),
		MsgID:   id,
	})
	if err != nil {
		h.t.Fatalf("publish %s: %v", id, err)
	}
	return ack
}

func (h *harness) spec() bus.ConsumerSpec {
	return bus.ConsumerSpec{
		Service:      h.opts.Service,
		Stream:       h.opts.Stream,
		Partitions:   h.topo.Partitions,
		RetryBase:    10 * time.Millisecond,
		RetryMax:     100 * time.Millisecond,
		DrainTimeout: 5 * time.Second,
	}
}

// running is a runner started by start.
type running struct {
	r      *bus.Runner
	cancel context.CancelFunc
	done   chan error
}

// stop cancels the runner and waits for Run to return.
func (rn *running) stop(t TB) error {
	t.Helper()
	rn.cancel()
	select {
	case err := <-rn.done:
		rn.done <- err
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("runner did not stop within 30s")
		return nil
	}
}

func (h *harness) start(c *bus.Conn, spec bus.ConsumerSpec, hd bus.Handler) *running {
	h.t.Helper()
	r, err := c.NewRunner(spec, hd)
	if err != nil {
		h.t.Fatalf("new runner: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rn := &running{r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { rn.done <- r.Run(ctx) }()
	h.t.Cleanup(func() { _ = rn.stop(h.t) })
	waitFor(h.t, 10*time.Second, r.Ready, "runner ready")
	// A new replica takes some partitions from the running ones: wait
	// until every hand-over is done, so that a test's first message is
	// not handed back by a replica giving its partition away.
	h.runners = append(h.runners, rn)
	waitFor(h.t, 10*time.Second, func() bool {
		owners := map[int]int{}
		for _, o := range h.runners {
			select {
			case err := <-o.done:
				o.done <- err
				continue // stopped
			default:
			}
			if !o.r.Settled() {
				return false
			}
			for _, p := range o.r.Owned() {
				owners[p]++
			}
		}
		for p := range h.topo.Partitions {
			if owners[p] != 1 {
				return false
			}
		}
		return true
	}, "partitions settled between the replicas, each owned once")
	return rn
}

// waitFor polls cond until it holds or d passes.
func waitFor(t TB, d time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// record is one handler call.
type record struct {
	replica   string
	key       string
	n         int
	msgID     string
	delivered uint64
	ok        bool
}

type recorder struct {
	mu   sync.Mutex
	recs []record
}

func (rc *recorder) add(r record) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.recs = append(rc.recs, r)
}

func (rc *recorder) snapshot() []record {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]record(nil), rc.recs...)
}

func (rc *recorder) count(f func(record) bool) int {
	n := 0
	for _, r := range rc.snapshot() {
		if f(r) {
			n++
		}
	}
	return n
}

func parseData(b []byte) (string, int) {
	key, ns, _ := strings.Cut(string(b), "|")
	n, _ := strconv.Atoi(ns)
	return key, n
}

// handler records every call and returns what fail says (nil: success).
func (rc *recorder) handler(replica string, fail func(d *bus.Delivery) error) bus.Handler {
	return bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		key, n := parseData(d.Data)
		var err error
		if fail != nil {
			err = fail(d)
		}
		rc.add(record{replica: replica, key: key, n: n, msgID: d.MsgID, delivered: d.NumDelivered, ok: err == nil})
		return err
	})
}

func ok(r record) bool { return r.ok }

func testDedup(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{}, nil)
	first := h.publish("github:octo/repo#1", 0, "gh:dup-1")
	if first.Duplicate {
		t.Fatalf("first publish reported duplicate: %+v", first)
	}
	for range 3 {
		again := h.publish("github:octo/repo#1", 0, "gh:dup-1")
		if !again.Duplicate || again.Seq != first.Seq {
			t.Fatalf("re-publish = %+v, want duplicate of seq %d", again, first.Seq)
		}
	}
	other := h.publish("github:octo/repo#1", 1, "gh:dup-2")
	if other.Duplicate || other.Seq == first.Seq {
		t.Fatalf("a new id was treated as a duplicate: %+v", other)
	}
	ctx := context.Background()
	st, err := h.pub.StreamStats(ctx, opts.Stream)
	if err != nil {
		t.Fatal(err)
	}
	if st.Msgs != 2 {
		t.Fatalf("stream holds %d messages, want 2 (one per id)", st.Msgs)
	}
	var rc recorder
	h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", nil))
	waitFor(t, 10*time.Second, func() bool { return rc.count(ok) >= 2 }, "both messages handled")
	if opts.Stream == bus.StreamInbox {
		// Acked work-queue messages leave the stream.
		waitFor(t, 5*time.Second, func() bool {
			st, err := h.pub.StreamStats(ctx, opts.Stream)
			return err == nil && st.Msgs == 0
		}, "inbox empty after acks")
	}
	recs := rc.snapshot()
	if len(recs) != 2 || recs[0].msgID == recs[1].msgID {
		t.Fatalf("handled %+v, want the two ids once each", recs)
	}
}

func testOrder(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{}, nil)
	const keys, perKey = 24, 12
	var rc recorder
	// Every key's message 3 fails on its first delivery: a retry must hold
	// the partition, not let message 4 overtake it.
	fail := func(d *bus.Delivery) error {
		if _, n := parseData(d.Data); n == 3 && d.NumDelivered == 1 {
			return bus.Retry(errors.New("transient"), 20*time.Millisecond)
		}
		return nil
	}
	spec := h.spec()
	h.start(h.srv.Connect(t, "replica-a"), spec, rc.handler("a", fail))
	h.start(h.srv.Connect(t, "replica-b"), spec, rc.handler("b", fail))
	for n := range perKey {
		for k := range keys {
			key := fmt.Sprintf("github:octo/repo#%d", k)
			h.publish(key, n, fmt.Sprintf("gh:order-%d-%d", k, n))
		}
	}
	waitFor(t, 60*time.Second, func() bool { return rc.count(ok) >= keys*perKey }, "every message handled")
	next := map[string]int{}
	for _, r := range rc.snapshot() {
		if !r.ok {
			continue
		}
		if r.n != next[r.key] {
			t.Fatalf("key %s: handled message %d, want %d (out of order or duplicated)", r.key, r.n, next[r.key])
		}
		next[r.key]++
	}
	if len(next) != keys {
		t.Fatalf("%d keys handled, want %d", len(next), keys)
	}
	for k, n := range next {
		if n != perKey {
			t.Fatalf("key %s: %d messages handled, want %d", k, n, perKey)
		}
	}
	if retried := rc.count(func(r record) bool { return !r.ok }); retried != keys {
		t.Fatalf("%d failed deliveries, want %d", retried, keys)
	}
}

func testKilled(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{}, nil)
	var rc recorder
	started := make(chan string, 2)
	release := make(chan struct{})
	// The first delivery blocks its replica as if the process hung mid-call.
	blockFirst := func(replica string) bus.Handler {
		return bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
			key, n := parseData(d.Data)
			if n == 0 && d.NumDelivered == 1 {
				started <- replica
				select {
				case <-release:
				case <-ctx.Done():
				}
				return errors.New("killed")
			}
			rc.add(record{replica: replica, key: key, n: n, msgID: d.MsgID, delivered: d.NumDelivered, ok: true})
			return nil
		})
	}
	conns := map[string]*bus.Conn{
		"a": h.srv.Connect(t, "replica-a"),
		"b": h.srv.Connect(t, "replica-b"),
	}
	spec := h.spec()
	for name, c := range conns {
		h.start(c, spec, blockFirst(name))
	}
	// Registered after the runners' own cleanups, so it runs before them.
	t.Cleanup(func() { close(release) })
	const key = "github:octo/repo#7"
	h.publish(key, 0, "gh:killed-0")
	var victim string
	select {
	case victim = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no replica received the message")
	}
	// Kill the victim's connection: no ack, no nak, no unpin.
	conns[victim].Close()
	survivor := "a"
	if victim == "a" {
		survivor = "b"
	}
	for n := 1; n <= 3; n++ {
		h.publish(key, n, fmt.Sprintf("gh:killed-%d", n))
	}
	waitFor(t, 20*time.Second, func() bool { return rc.count(ok) >= 4 }, "all four messages handled by the survivor")
	recs := rc.snapshot()
	for i, r := range recs {
		if r.replica != survivor || r.n != i {
			t.Fatalf("handled %+v; want messages 0..3 in order on replica %s", recs, survivor)
		}
	}
	if recs[0].delivered != 2 {
		t.Fatalf("message 0 delivered %d times, want 2 (the killed delivery plus one)", recs[0].delivered)
	}
}

func dlqHarness(t TB, opts ConformanceOptions) (*harness, *recorder, func(d *bus.Delivery) error) {
	h := newHarness(t, opts, Options{}, nil)
	var rc recorder
	fail := func(d *bus.Delivery) error {
		switch key, _ := parseData(d.Data); key {
		case "poison":
			return errors.New("boom\nsecond line")
		case "permanent":
			return bus.Permanent(errors.New("422 unprocessable"))
		}
		return nil
	}
	return h, &rc, fail
}

func findDLQ(t TB, c *bus.Conn, ceID string) (bus.DLQEntry, bool) {
	t.Helper()
	es, err := c.ListDLQ(context.Background(), 0)
	if err != nil {
		t.Fatalf("list dlq: %v", err)
	}
	for _, e := range es {
		if e.CEID == ceID {
			return e, true
		}
	}
	return bus.DLQEntry{}, false
}

func checkDLQEntry(t TB, h *harness, e bus.DLQEntry, id, key string, deliveries uint64, reason string) {
	t.Helper()
	if e.MsgID != id || e.Deliveries != deliveries || !strings.Contains(e.Reason, reason) ||
		e.Stream != h.opts.Stream || !strings.HasPrefix(e.Consumer, h.opts.Service+"-p") ||
		e.PublishSubject != h.subject(key) || e.Header.Get("traceparent") != "00-"+id ||
		e.StreamSeq == 0 || strings.ContainsAny(e.Reason, "\r\n") {
		t.Fatalf("dlq entry %+v; want id %s, %d deliveries, reason containing %q, subject %s",
			e, id, deliveries, reason, h.subject(key))
	}
}

func testPoison(t TB, opts ConformanceOptions) {
	h, rc, fail := dlqHarness(t, opts)
	h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", fail))
	h.publish("poison", 0, "gh:poison")
	h.publish("poison", 1, "gh:poison-next") // same key: must not wait forever behind it
	var e bus.DLQEntry
	waitFor(t, 20*time.Second, func() bool {
		var found bool
		e, found = findDLQ(t, h.pub, "gh:poison")
		return found
	}, "poison message in the DLQ")
	max := uint64(h.topo.MaxDeliver)
	checkDLQEntry(t, h, e, "gh:poison", "poison", max, fmt.Sprintf("max deliveries (%d): boom", max))
	if n := rc.count(func(r record) bool { return r.msgID == "gh:poison" }); n != int(max) {
		t.Fatalf("poison handled %d times, want MaxDeliver=%d", n, max)
	}
	// The next message of the same key was delivered after the poison one,
	// also failed MaxDeliver times, and is dead-lettered too: the partition
	// moved on.
	waitFor(t, 20*time.Second, func() bool {
		_, found := findDLQ(t, h.pub, "gh:poison-next")
		return found
	}, "the following message processed")
	if opts.Stream == bus.StreamInbox {
		waitFor(t, 5*time.Second, func() bool {
			st, err := h.pub.StreamStats(context.Background(), opts.Stream)
			return err == nil && st.Msgs == 0
		}, "dead letters removed from the inbox")
	}
	waitFor(t, 5*time.Second, func() bool {
		st, err := h.pub.StreamStats(context.Background(), bus.StreamAdvisories)
		return err == nil && st.Msgs >= 2
	}, "terminated advisories kept as the safety net")
}

func testPermanent(t TB, opts ConformanceOptions) {
	h, rc, fail := dlqHarness(t, opts)
	h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", fail))
	h.publish("permanent", 0, "gh:perm")
	h.publish("permanent-ok", 0, "gh:after")
	var e bus.DLQEntry
	waitFor(t, 10*time.Second, func() bool {
		var found bool
		e, found = findDLQ(t, h.pub, "gh:perm")
		return found
	}, "permanent failure in the DLQ")
	checkDLQEntry(t, h, e, "gh:perm", "permanent", 1, "permanent: 422 unprocessable")
	waitFor(t, 10*time.Second, func() bool { return rc.count(ok) == 1 }, "the other message handled")
	if n := rc.count(func(r record) bool { return r.msgID == "gh:perm" }); n != 1 {
		t.Fatalf("permanent failure handled %d times, want 1", n)
	}
}

func testServerRestart(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{InProcessOnly: true}, nil)
	const total, before = 20, 8
	const key = "github:octo/repo#restart"
	for n := range total {
		h.publish(key, n, fmt.Sprintf("gh:restart-%d", n))
	}
	var rc recorder
	c := h.srv.Connect(t, "r1")
	var handled atomic.Int32
	stopAfter := make(chan struct{})
	r1 := h.start(c, h.spec(), bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		key, n := parseData(d.Data)
		rc.add(record{replica: "r1", key: key, n: n, msgID: d.MsgID, delivered: d.NumDelivered, ok: true})
		if handled.Add(1) == before {
			close(stopAfter)
		}
		return nil
	}))
	select {
	case <-stopAfter:
	case <-time.After(20 * time.Second):
		t.Fatal("first runner did not handle its messages")
	}
	// Drain: the in-flight handler (the 8th) finishes and is acked.
	if err := r1.stop(t); err != nil {
		t.Fatalf("runner: %v", err)
	}
	got1 := rc.snapshot()
	h.srv.Restart(t)
	// Same connection: it reconnects on its own.
	r2 := h.start(c, h.spec(), rc.handler("r2", nil))
	waitFor(t, 30*time.Second, func() bool { return rc.count(ok) >= total }, "the rest delivered after the restart")
	_ = r2
	all := rc.snapshot()
	if len(all) != total {
		t.Fatalf("handled %d messages, want %d: %+v", len(all), total, all)
	}
	for i, r := range all {
		if r.n != i {
			t.Fatalf("message %d handled at position %d (acked ones redelivered or order broken): %+v", r.n, i, all)
		}
		if i >= len(got1) && r.replica != "r2" {
			t.Fatalf("unexpected record %+v", r)
		}
	}
	if len(got1) < before {
		t.Fatalf("first runner handled %d, want at least %d", len(got1), before)
	}
}

func testRunnerSurvivesRestart(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{InProcessOnly: true}, nil)
	var rc recorder
	r := h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", nil))
	const key = "github:octo/repo#survive"
	for n := range 3 {
		h.publish(key, n, fmt.Sprintf("gh:survive-%d", n))
	}
	waitFor(t, 10*time.Second, func() bool { return rc.count(ok) >= 3 }, "messages before the restart")
	h.srv.Restart(t)
	// Publish retries under its msg id while the publisher reconnects.
	for n := 3; n < 6; n++ {
		h.publish(key, n, fmt.Sprintf("gh:survive-%d", n))
	}
	waitFor(t, 30*time.Second, func() bool { return rc.count(ok) >= 6 }, "messages after the restart")
	waitFor(t, 10*time.Second, r.r.Ready, "runner ready again")
	for i, rec := range rc.snapshot() {
		if rec.n != i {
			t.Fatalf("records %+v out of order", rc.snapshot())
		}
	}
}

func testStandby(t TB, opts ConformanceOptions) {
	const pinnedTTL = 2 * time.Second
	h := newHarness(t, opts, Options{}, func(topo *bus.Topology) {
		topo.Partitions = 1
		topo.PinnedTTL = pinnedTTL
	})
	var rc recorder
	const key = "github:octo/repo#pin"
	a := h.start(h.srv.Connect(t, "replica-a"), h.spec(), rc.handler("a", nil))
	h.publish(key, 0, "gh:pin-0")
	waitFor(t, 10*time.Second, func() bool { return rc.count(ok) == 1 }, "first message on the pinned replica")
	h.start(h.srv.Connect(t, "replica-b"), h.spec(), rc.handler("b", nil))
	// Keep messages coming for longer than PinnedTTL: the pin must survive
	// on the live replica's pull requests, not time out to the standby.
	n := 1
	for end := time.Now().Add(pinnedTTL + pinnedTTL/2); time.Now().Before(end); n++ {
		h.publish(key, n, fmt.Sprintf("gh:pin-%d", n))
		waitFor(t, 10*time.Second, func() bool { return rc.count(ok) == n+1 }, "message handled")
		time.Sleep(pinnedTTL / 6) // spread the publishes over the window on purpose
	}
	if got := rc.count(func(r record) bool { return r.replica == "b" }); got != 0 {
		t.Fatalf("standby handled %d messages while the pinned replica was alive", got)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("stop pinned replica: %v", err)
	}
	stopped := time.Now()
	h.publish(key, n, fmt.Sprintf("gh:pin-%d", n))
	waitFor(t, 10*time.Second, func() bool { return rc.count(ok) == n+1 }, "standby takes over")
	if took := time.Since(stopped); took > pinnedTTL/2 {
		t.Fatalf("standby took over after %s; a clean stop should unpin at once (PinnedTTL %s)", took, pinnedTTL)
	}
	recs := rc.snapshot()
	if last := recs[len(recs)-1]; last.replica != "b" || last.n != n {
		t.Fatalf("last record %+v, want message %d on the standby", last, n)
	}
}

func testShare(t TB, opts ConformanceOptions) {
	// A pin outlives every step below by far: whatever hands a partition
	// over here, it is not the pin timing out.
	const pinnedTTL = time.Minute
	h := newHarness(t, opts, Options{}, func(topo *bus.Topology) {
		topo.PinnedTTL = pinnedTTL
	})
	spec := h.spec()
	spec.FetchWait = 200 * time.Millisecond
	var rc recorder
	conns := map[string]*bus.Conn{}
	runners := map[string]*running{}
	start := func(name string) {
		conns[name] = h.srv.Connect(t, "replica-"+name)
		sp := spec
		sp.Member = name
		runners[name] = h.start(conns[name], sp, rc.handler(name, nil))
	}
	const keys = 32
	sent := 0
	send := func(per int) {
		for range per {
			for k := range keys {
				h.publish(fmt.Sprintf("github:octo/repo#%d", k), sent, fmt.Sprintf("gh:share-%d-%d", k, sent))
			}
			sent++
		}
	}
	// sendWhile sends per rounds in the background while during runs, and
	// returns once both are done.
	sendWhile := func(per int, during func()) {
		t.Helper()
		errc := make(chan error, 1)
		first := sent
		sent += per
		go func() {
			for n := first; n < first+per; n++ {
				for k := range keys {
					key := fmt.Sprintf("github:octo/repo#%d", k)
					id := fmt.Sprintf("gh:share-%d-%d", k, n)
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					_, err := h.pub.Publish(ctx, bus.Message{
						Subject: h.subject(key), Header: bus.Header{"ce-id": {id}},
						Data: []byte(key + "|" + strconv.Itoa(n)), MsgID: id,
					})
					cancel()
					if err != nil {
						errc <- err
						return
					}
				}
			}
			errc <- nil
		}()
		during()
		if err := <-errc; err != nil {
			t.Fatalf("publish: %v", err)
		}
	}
	handledAll := func(what string) {
		waitFor(t, 30*time.Second, func() bool { return rc.count(ok) >= keys*sent }, what)
	}
	// owners maps each partition to the replica owning it now.
	owners := func() map[int]string {
		o := map[int]string{}
		for name, rn := range runners {
			select {
			case err := <-rn.done:
				rn.done <- err
				continue
			default:
			}
			for _, p := range rn.r.Owned() {
				o[p] = name
			}
		}
		return o
	}
	// checkOwners: since mark, every message was handled by its
	// partition's owner, and every replica named handled some.
	checkOwners := func(mark int, own map[int]string, busy ...string) {
		t.Helper()
		per := map[string]int{}
		for _, r := range rc.snapshot()[mark:] {
			p := bus.PartitionOf(catalog.SubjectKey(r.key), h.topo.Partitions)
			if own[p] != r.replica {
				t.Fatalf("%s (partition %d) handled on %s; its owner is %s", r.msgID, p, r.replica, own[p])
			}
			per[r.replica]++
		}
		for _, name := range busy {
			if per[name] == 0 {
				t.Fatalf("replica %s handled nothing (shares %v)", name, per)
			}
		}
	}

	start("a")
	start("b")
	own := owners()
	for name := range runners {
		if n := len(runners[name].r.Owned()); n != h.topo.Partitions/2 {
			t.Fatalf("replica %s owns %d of %d partitions with two replicas", name, n, h.topo.Partitions)
		}
	}
	send(3)
	handledAll("events handled by two replicas")
	checkOwners(0, own, "a", "b")

	// A third replica joins while events flow: it takes its share.
	sendWhile(3, func() { start("c") })
	handledAll("events handled while a replica joins")
	own = owners()
	for name, rn := range runners {
		if n := len(rn.r.Owned()); n < h.topo.Partitions/3 || n > h.topo.Partitions/3+1 {
			t.Fatalf("replica %s owns %d of %d partitions with three replicas", name, n, h.topo.Partitions)
		}
	}
	mark := len(rc.snapshot())
	send(2)
	handledAll("events handled by three replicas")
	checkOwners(mark, own, "a", "b", "c")

	// b stops cleanly while events flow: its partitions go to a and c at
	// once, long before its pin could time out.
	stopped := time.Now()
	sendWhile(3, func() {
		if err := runners["b"].stop(t); err != nil {
			t.Fatalf("stop b: %v", err)
		}
	})
	handledAll("events handled while a replica stops")
	if took := time.Since(stopped); took > pinnedTTL/2 {
		t.Fatalf("handing b's partitions over took %s: a clean stop must unpin them (PinnedTTL %s)", took, pinnedTTL)
	}
	delete(runners, "b")
	waitFor(t, 10*time.Second, func() bool { return len(owners()) == h.topo.Partitions }, "a and c own every partition")
	own = owners()
	mark = len(rc.snapshot())
	send(2)
	handledAll("events handled by the two left")
	checkOwners(mark, own, "a", "c")

	// c dies (its connection closes: no leave, no unpin). Its partitions
	// wait for its lease, then a takes them over and unpins what c held.
	mark = len(rc.snapshot())
	conns["c"].Close()
	died := time.Now()
	send(2)
	handledAll("c's partitions taken over after its lease")
	if took := time.Since(died); took < h.topo.MemberLease/2 || took > pinnedTTL/2 {
		t.Fatalf("c's partitions were worked again %s after it died; want about its lease (%s), well before PinnedTTL (%s)",
			took, h.topo.MemberLease, pinnedTTL)
	}
	for _, r := range rc.snapshot()[mark:] {
		if r.replica != "a" {
			t.Fatalf("%s handled on %s after c died; only a is left", r.msgID, r.replica)
		}
	}

	next := map[string]int{}
	for _, r := range rc.snapshot() {
		if r.n != next[r.key] {
			t.Fatalf("key %s: handled message %d, want %d (out of order or twice)", r.key, r.n, next[r.key])
		}
		next[r.key]++
	}
	for k, n := range next {
		if n != sent {
			t.Fatalf("key %s: %d messages handled, want %d", k, n, sent)
		}
	}
}
