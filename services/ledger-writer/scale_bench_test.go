package ledgerwriter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/service"
)

// Replica scaling against a slow GitHub.
const (
	// scalePartitions divides evenly among 1, 2, 3 and 4 replicas (16 would
	// leave one of three replicas 6 partitions to the others' 5), and
	// scaleConcurrency (LOOP_CONCURRENCY) divides each replica's share
	// evenly too, so that its handler slots stay busy to the end of a
	// round: replicas add throughput up to twelve.
	scalePartitions  = 24
	scaleConcurrency = 2
	scalePerPart     = 4                      // work items per partition
	scaleLatency     = 400 * time.Millisecond // every GitHub request, wall clock
)

// BenchmarkLedgerReplicas measures ledger-writer throughput as replicas grow
// from 1 to 4 against a GitHub fake that answers every request after 400 ms
// (limits and pacing off): b.N events (replies and gate answers alternating)
// over 96 work items, four in each of the 24 partitions, are published to
// the inbox, and the clock stops when every one has been written, recorded
// and fanned out. It reports events/s, x-1-replica (events/s over the
// 1-replica figure of the same run) and max-share (the busiest replica's
// fraction of the events). Every round fails unless each work item's
// comments, and its fan-out, come out in publish order, each event exactly
// once.
//
// The replicas divide the partitions between them (bus Runner, decision
// 071), and each handles at most LOOP_CONCURRENCY events at once over the
// partitions it owns, here 2. So one replica works 2 of the 24 partitions at
// a time, and each replica that joins adds 2 more, until replicas ×
// concurrency reaches the partition count: the service's ceiling,
// partitions ÷ GitHub latency. With the defaults (16 and 16) one replica
// already reaches it, and more replicas add fail-over and spread, not
// throughput: replicas add throughput where something bounds one replica
// (its CPU, its memory, its sessions' host, its own GitHub credential),
// which LOOP_CONCURRENCY stands for.
//
// Run it with a fixed count, -benchtime=144x (make bench does): a round
// then lasts many GitHub round trips at every replica count, and 144 events
// load the 24 partitions equally. The server syncs its store on an interval
// (see scaleRound), and the slow GitHub keeps the rate under 20 events/s
// with four replicas, so that neither the disk nor the CPU of a shared
// 2-core machine is what is measured.
//
// The work items are chosen four per partition, so that every partition
// carries the same load: what is measured is how the replicas share the
// partitions, not how the keys happen to hash (a partition carrying more
// work items than the others bounds any number of replicas).
//
// The replicas are Service instances in this process, each with its own bus
// connection, on one in-process JetStream server, as TestTwoReplicasKeepOrder
// runs them. Separate processes would add only process start-up and binary
// builds: the work is waiting on GitHub, not CPU.
//
// In production the per-credential GitHub pacing (DefaultPerMinute, split
// over the replicas sharing the credential) binds long before either.
func BenchmarkLedgerReplicas(b *testing.B) {
	bustest.ReplicaScaling(b, func(b *testing.B) int { return b.N }, scaleRound)
}

// scaleRound runs one round of b.N events through n fresh replicas and
// checks what GitHub and the fan-out received. It returns events/s and the
// busiest replica's share.
func scaleRound(b *testing.B, n int) (rate, share float64) {
	b.StopTimer()
	// The test timings (PinnedTTL 1s, so fetches of a third of it) only
	// make a stopping replica quick.
	topo := bustest.FastTopology(scalePartitions)
	topo.MaxDeliver = bus.DefaultTopology().MaxDeliver
	// The server syncs to disk on its interval, as a JetStream cluster's
	// nodes do: on a shared machine, one server syncing every write of
	// every replica is a bottleneck of its own that no replica count moves.
	e := newEnvOn(b, bustest.Options{InProcessOnly: true, SyncInterval: 2 * time.Minute}, topo,
		ghfake.WithPrimaryLimit(0), ghfake.WithSecondaryLimits(0, 0))
	items := bustest.Spread(scalePartitions, scalePerPart, func(i int) string { return fmt.Sprintf("github:%s#%d", testRepo, i) })
	for i := len(e.gh.Issues(testRepo)) + 1; i <= slices.Max(items); i++ {
		e.gh.AddIssue(testRepo, "octocat", fmt.Sprintf("work item %d", i), "body")
	}
	e.gh.Inject(ghfake.Rule{Delay: scaleLatency})

	tally := bustest.NewTally(b.N, n)
	writers := make([]*writer, n)
	for r := range n {
		writers[r] = e.startWith(fmt.Sprintf("writer-%d", r), func(d *service.Deps, _ *Config) { d.Concurrency = scaleConcurrency },
			WithPacing(0, 0), withHook(func(s step, id string) error {
				if s != stepPublished {
					return nil
				}
				tally.Handled(r, id)
				return nil
			}))
	}
	// Every replica has joined and pulls its share before the first event.
	testkit.WaitWithin(b, time.Minute, "every replica consuming its share", func() bool {
		for _, w := range writers {
			if len(w.ready.Names()) == 0 || len(w.ready.Check()) > 0 {
				return false
			}
		}
		ms, err := e.pub.Members(b.Context(), Name)
		return err == nil && bustest.Shared(ms, scalePartitions, n)
	})

	id := func(i int) string { return fmt.Sprintf("slack:EvScale-%07d", i) }
	b.StartTimer()
	start := time.Now()
	// Each work item's events are published in order, the work items at
	// once, as many channels would: the publisher is not what is measured.
	if err := bustest.PublishEach(b.N, len(items), func(i, k int) error {
		ref := fmt.Sprintf("github:%s#%d", testRepo, items[k])
		ev := replyEv(id(i), ref, "reply "+strconv.Itoa(i))
		if i%2 == 1 {
			ev = gateEv(id(i), ref, "answer "+strconv.Itoa(i))
		}
		return e.tryPublish(ev)
	}); err != nil {
		b.Fatal(err)
	}
	tally.Wait(b, 10*time.Minute, "fanned out")
	elapsed := time.Since(start)
	b.StopTimer()

	testkit.WaitWithin(b, 2*time.Minute, "the fan-out", func() bool { return len(e.fan.all()) >= b.N })
	checkScaleOrder(b, e, items, id)
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(w.stop)
	}
	wg.Wait()
	return float64(b.N) / elapsed.Seconds(), tally.MaxShare()
}

// checkScaleOrder fails b unless every event of the round is on GitHub once,
// on its own work item, in publish order, and fanned out once per work item
// in the same order.
func checkScaleOrder(b *testing.B, e *env, items []int, id func(int) string) {
	b.Helper()
	seq := func(s string) int {
		v, err := strconv.Atoi(strings.TrimPrefix(s, "slack:EvScale-"))
		if err != nil {
			b.Fatalf("unexpected event id %q", s)
		}
		return v
	}
	seen := map[string]bool{}
	for _, item := range items {
		last := -1
		for _, c := range e.gh.Comments(testRepo, item) {
			l, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: item}, c.Body)
			if err != nil {
				b.Fatalf("#%d comment %d: %v", item, c.ID, err)
			}
			s := seq(l.ID)
			switch {
			case seen[l.ID]:
				b.Fatalf("%s recorded twice", l.ID)
			case items[s%len(items)] != item:
				b.Fatalf("%s recorded on #%d", l.ID, item)
			case s <= last:
				b.Fatalf("#%d: %s recorded after %s: out of publish order", item, l.ID, id(last))
			}
			seen[l.ID] = true
			last = s
		}
	}
	if len(seen) != b.N {
		b.Fatalf("%d events recorded on GitHub, want %d", len(seen), b.N)
	}
	fanned := map[string]bool{}
	lastFan := map[string]int{}
	for _, r := range e.fan.all() {
		evID := r.ev.GetId()
		if fanned[evID] {
			b.Fatalf("%s fanned out twice", evID)
		}
		fanned[evID] = true
		s := seq(evID)
		if prev, ok := lastFan[r.ev.GetSubject()]; ok && s <= prev {
			b.Fatalf("fan-out of %s: %s after %s", r.ev.GetSubject(), evID, id(prev))
		}
		lastFan[r.ev.GetSubject()] = s
	}
	if len(fanned) != b.N {
		b.Fatalf("%d events fanned out, want %d", len(fanned), b.N)
	}
}
