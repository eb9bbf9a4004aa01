package ledgerwriter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/bus/bustest"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/github/ghfake"
)

// Replica scaling against a slow GitHub.
const (
	scaleItems   = 64                     // work items the events spread over
	scaleLatency = 100 * time.Millisecond // every GitHub request, wall clock
)

// BenchmarkLedgerReplicas measures ledger-writer throughput as replicas grow
// from 1 to 4 against a GitHub fake that answers every request after 100 ms
// (limits and pacing off): b.N events (replies and gate answers alternating)
// over 64 work items are published to the inbox, and the clock stops when
// every one has been written, recorded and fanned out. It reports events/s,
// x-1-replica (events/s over the 1-replica figure of the same run) and
// max-share (the busiest replica's fraction of the events). Every round fails
// unless each work item's comments, and its fan-out, come out in publish
// order, each event exactly once.
//
// The replicas are Service instances in this process, each with its own bus
// connection, on one in-process JetStream server with the production
// partition count (16), as TestTwoReplicasKeepOrder runs them. Separate
// processes would add only process start-up and binary builds: the work is
// waiting on GitHub, not CPU, and a replica's share of the work is decided
// by the server (the partition pins), which sees connections, not
// processes.
//
// Replicas add no throughput here, for two structural reasons in the
// partitioned runner (pkg/bus Runner, topology consumerConfig):
//   - every replica works every partition, and each partition has one
//     message in flight (MaxAckPending 1: the per-work-item order). One
//     replica therefore already has all 16 partitions waiting on GitHub at
//     once, and the ceiling is partitions ÷ GitHub latency (160 events/s,
//     less the skew of 64 work items over 16 partitions) at any replica
//     count. Throughput grows with bus.Topology.Partitions, not replicas.
//   - the server pins a partition to the replica whose pull request heads
//     its waiting queue when the partition's first message arrives, and
//     keeps it there while that replica keeps pulling; there is no
//     rebalancing. The replica that started first usually takes every
//     partition (max-share near 1) and the others stand by: replicas buy
//     fail-over, not parallelism.
//
// In production the per-credential GitHub pacing (DefaultPerMinute, split
// over the replicas) binds long before either.
func BenchmarkLedgerReplicas(b *testing.B) {
	var one float64 // events/s with one replica, this run
	for n := 1; n <= 4; n++ {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b *testing.B) {
			rate, share := scaleRound(b, n)
			if n == 1 {
				one = rate
			}
			b.ReportMetric(rate, "events/s")
			if one > 0 {
				b.ReportMetric(rate/one, "x-1-replica")
			}
			b.ReportMetric(share, "max-share")
		})
	}
}

// scaleRound runs one round of b.N events through n fresh replicas and
// checks what GitHub and the fan-out received. It returns events/s and the
// busiest replica's share.
func scaleRound(b *testing.B, n int) (rate, share float64) {
	b.StopTimer()
	// The production partition count; the test timings (PinnedTTL 1s, so
	// fetches of a third of it) only make a stopping replica quick.
	topo := bustest.FastTopology(catalog.DefaultPartitions)
	topo.MaxDeliver = bus.DefaultTopology().MaxDeliver
	e := newEnv(b, topo, ghfake.WithPrimaryLimit(0), ghfake.WithSecondaryLimits(0, 0))
	for i := len(e.gh.Issues(testRepo)) + 1; i <= scaleItems; i++ {
		e.gh.AddIssue(testRepo, "octocat", fmt.Sprintf("work item %d", i), "body")
	}
	e.gh.Inject(ghfake.Rule{Delay: scaleLatency})

	var (
		mu      sync.Mutex
		done    = map[string]bool{}
		handled = make([]int, n)
		all     = make(chan struct{})
	)
	writers := make([]*writer, n)
	for r := range n {
		writers[r] = e.start(fmt.Sprintf("writer-%d", r), WithPacing(0, 0), withHook(func(s step, id string) error {
			if s != stepPublished {
				return nil
			}
			mu.Lock()
			defer mu.Unlock()
			if !done[id] {
				done[id] = true
				handled[r]++
				if len(done) == b.N {
					close(all)
				}
			}
			return nil
		}))
	}
	// Every replica has a pull request out on every partition before the
	// first event, so the pins go to whichever replica the server picks,
	// not to the one that happened to start first.
	waitFor(b, "every replica consuming", time.Minute, func() bool {
		for _, w := range writers {
			if len(w.ready.Names()) == 0 || len(w.ready.Check()) > 0 {
				return false
			}
		}
		return true
	})

	id := func(i int) string { return fmt.Sprintf("slack:EvScale-%07d", i) }
	b.StartTimer()
	start := time.Now()
	for i := range b.N {
		ref := fmt.Sprintf("github:%s#%d", testRepo, i%scaleItems+1)
		if i%2 == 0 {
			e.publish(replyEv(id(i), ref, "reply "+strconv.Itoa(i)))
		} else {
			e.publish(gateEv(id(i), ref, "answer "+strconv.Itoa(i)))
		}
	}
	select {
	case <-all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%d of %d events fanned out after 10m", len(done), b.N)
	}
	elapsed := time.Since(start)
	b.StopTimer()

	waitFor(b, "the fan-out", 2*time.Minute, func() bool { return len(e.fan.all()) >= b.N })
	checkScaleOrder(b, e, id)
	var wg sync.WaitGroup
	for _, w := range writers {
		wg.Go(w.stop)
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	return float64(b.N) / elapsed.Seconds(), float64(slices.Max(handled)) / float64(b.N)
}

// checkScaleOrder fails b unless every event of the round is on GitHub once,
// on its own work item, in publish order, and fanned out once per work item
// in the same order.
func checkScaleOrder(b *testing.B, e *env, id func(int) string) {
	b.Helper()
	seq := func(s string) int {
		v, err := strconv.Atoi(strings.TrimPrefix(s, "slack:EvScale-"))
		if err != nil {
			b.Fatalf("unexpected event id %q", s)
		}
		return v
	}
	seen := map[string]bool{}
	for item := 1; item <= scaleItems; item++ {
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
			case s%scaleItems != item-1:
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
