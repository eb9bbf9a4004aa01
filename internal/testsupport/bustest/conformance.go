package bustest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
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
	testkit.WaitWithin(h.t, 10*time.Second, "runner ready", r.Ready)
	// A new replica takes some partitions from the running ones: wait
	// until every hand-over is done, so that a test's first message is
	// not handed back by a replica giving its partition away.
	h.runners = append(h.runners, rn)
	testkit.WaitWithin(h.t, 10*time.Second, "partitions settled between the replicas, each owned once", func() bool {
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
	})
	return rn
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
