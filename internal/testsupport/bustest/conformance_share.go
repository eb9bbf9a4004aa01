package bustest

// Replicas sharing the partitions: an even division, a replica that joins,
// one that stops cleanly and one that dies, with events flowing throughout.

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// shareKeys is how many work items the share test sends to in each round.
const shareKeys = 32

// sharePinnedTTL outlives every step of the share test by far: whatever
// hands a partition over there, it is not the pin timing out.
const sharePinnedTTL = time.Minute

// shareRun is the share test's replicas and what they handled.
type shareRun struct {
	t       TB
	h       *harness
	spec    bus.ConsumerSpec
	rc      recorder
	conns   map[string]*bus.Conn
	runners map[string]*running
	sent    int // rounds sent, each one message per key
}

func testShare(t TB, opts ConformanceOptions) {
	h := newHarness(t, opts, Options{}, func(topo *bus.Topology) {
		topo.PinnedTTL = sharePinnedTTL
	})
	s := &shareRun{t: t, h: h, spec: h.spec(), conns: map[string]*bus.Conn{}, runners: map[string]*running{}}
	s.spec.FetchWait = 200 * time.Millisecond

	s.twoShare()
	s.thirdJoins()
	s.oneStopsCleanly()
	s.oneDies()
	s.checkOrder()
}

// twoShare: two replicas divide the partitions evenly, each handling its own.
func (s *shareRun) twoShare() {
	s.start("a")
	s.start("b")
	own := s.owners()
	for name, rn := range s.runners {
		if n := len(rn.r.Owned()); n != s.h.topo.Partitions/2 {
			s.t.Fatalf("replica %s owns %d of %d partitions with two replicas", name, n, s.h.topo.Partitions)
		}
	}
	s.send(3)
	s.handledAll("events handled by two replicas")
	s.checkOwners(0, own, "a", "b")
}

// thirdJoins: a third replica joins while events flow: it takes its share.
func (s *shareRun) thirdJoins() {
	s.sendWhile(3, func() { s.start("c") })
	s.handledAll("events handled while a replica joins")
	own := s.owners()
	parts := s.h.topo.Partitions
	for name, rn := range s.runners {
		if n := len(rn.r.Owned()); n < parts/3 || n > parts/3+1 {
			s.t.Fatalf("replica %s owns %d of %d partitions with three replicas", name, n, parts)
		}
	}
	mark := len(s.rc.snapshot())
	s.send(2)
	s.handledAll("events handled by three replicas")
	s.checkOwners(mark, own, "a", "b", "c")
}

// oneStopsCleanly: b stops cleanly while events flow: its partitions go to a
// and c at once, long before its pin could time out.
func (s *shareRun) oneStopsCleanly() {
	stopped := time.Now()
	s.sendWhile(3, func() {
		if err := s.runners["b"].stop(s.t); err != nil {
			s.t.Fatalf("stop b: %v", err)
		}
	})
	s.handledAll("events handled while a replica stops")
	if took := time.Since(stopped); took > sharePinnedTTL/2 {
		s.t.Fatalf("handing b's partitions over took %s: a clean stop must unpin them (PinnedTTL %s)", took, sharePinnedTTL)
	}
	delete(s.runners, "b")
	testkit.WaitWithin(s.t, 10*time.Second, "a and c own every partition", func() bool { return len(s.owners()) == s.h.topo.Partitions })
	own := s.owners()
	mark := len(s.rc.snapshot())
	s.send(2)
	s.handledAll("events handled by the two left")
	s.checkOwners(mark, own, "a", "c")
}

// oneDies: c dies (its connection closes: no leave, no unpin). Its
// partitions wait for its lease, then a takes them over and unpins what c
// held.
func (s *shareRun) oneDies() {
	// The handler records a message before its runner acknowledges it: wait
	// for the server to hold every acknowledgement, or c's death would
	// rightly have a handled but unacknowledged message delivered again.
	s.acked()
	mark := len(s.rc.snapshot())
	s.conns["c"].Close()
	died := time.Now()
	s.send(2)
	s.handledAll("c's partitions taken over after its lease")
	if took := time.Since(died); took < s.h.topo.MemberLease/2 || took > sharePinnedTTL/2 {
		s.t.Fatalf("c's partitions were worked again %s after it died; want about its lease (%s), well before PinnedTTL (%s)",
			took, s.h.topo.MemberLease, sharePinnedTTL)
	}
	for _, r := range s.rc.snapshot()[mark:] {
		if r.replica != "a" {
			s.t.Fatalf("%s handled on %s after c died; only a is left", r.msgID, r.replica)
		}
	}
}

// checkOrder: every key's messages were handled once each, in order.
func (s *shareRun) checkOrder() {
	next := map[string]int{}
	for _, r := range s.rc.snapshot() {
		if r.n != next[r.key] {
			s.t.Fatalf("key %s: handled message %d, want %d (out of order or twice)", r.key, r.n, next[r.key])
		}
		next[r.key]++
	}
	for k, n := range next {
		if n != s.sent {
			s.t.Fatalf("key %s: %d messages handled, want %d", k, n, s.sent)
		}
	}
}

func (s *shareRun) start(name string) {
	s.conns[name] = s.h.srv.Connect(s.t, "replica-"+name)
	sp := s.spec
	sp.Member = name
	s.runners[name] = s.h.start(s.conns[name], sp, s.rc.handler(name, nil))
}

// send sends per rounds and returns once they are published.
func (s *shareRun) send(per int) {
	for range per {
		for k := range shareKeys {
			s.h.publish(fmt.Sprintf("github:octo/repo#%d", k), s.sent, fmt.Sprintf("gh:share-%d-%d", k, s.sent))
		}
		s.sent++
	}
}

// sendWhile sends per rounds in the background while during runs, and
// returns once both are done.
func (s *shareRun) sendWhile(per int, during func()) {
	s.t.Helper()
	errc := make(chan error, 1)
	first := s.sent
	s.sent += per
	go func() { errc <- s.publishRounds(first, first+per) }()
	during()
	if err := <-errc; err != nil {
		s.t.Fatalf("publish: %v", err)
	}
}

// publishRounds publishes rounds from to to, off the test's goroutine (it
// returns the error rather than failing the test).
func (s *shareRun) publishRounds(from, to int) error {
	for n := from; n < to; n++ {
		for k := range shareKeys {
			key := fmt.Sprintf("github:octo/repo#%d", k)
			id := fmt.Sprintf("gh:share-%d-%d", k, n)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			_, err := s.h.pub.Publish(ctx, bus.Message{
				Subject: s.h.subject(key), Header: bus.Header{"ce-id": {id}},
				Data: []byte(key + "|" + strconv.Itoa(n)), MsgID: id,
			})
			cancel()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// acked waits until no partition's consumer has a delivery awaiting its
// acknowledgement.
func (s *shareRun) acked() {
	s.t.Helper()
	testkit.WaitWithin(s.t, 10*time.Second, "every handled message acknowledged", func() bool {
		for p := range s.h.topo.Partitions {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := s.h.pub.ConsumerStats(ctx, s.spec.Stream, bus.ConsumerName(s.spec.Service, p))
			cancel()
			if err != nil || st.AckPending > 0 || st.Pending > 0 {
				return false
			}
		}
		return true
	})
}

func (s *shareRun) handledAll(what string) {
	testkit.WaitWithin(s.t, 30*time.Second, what, func() bool { return s.rc.count(ok) >= shareKeys*s.sent })
}

// owners maps each partition to the replica owning it now.
func (s *shareRun) owners() map[int]string {
	o := map[int]string{}
	for name, rn := range s.runners {
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

// checkOwners: since mark, every message was handled by its partition's
// owner, and every replica named handled some.
func (s *shareRun) checkOwners(mark int, own map[int]string, busy ...string) {
	s.t.Helper()
	per := map[string]int{}
	for _, r := range s.rc.snapshot()[mark:] {
		p := bus.PartitionOf(catalog.SubjectKey(r.key), s.h.topo.Partitions)
		if own[p] != r.replica {
			s.t.Fatalf("%s (partition %d) handled on %s; its owner is %s", r.msgID, p, r.replica, own[p])
		}
		per[r.replica]++
	}
	for _, name := range busy {
		if per[name] == 0 {
			s.t.Fatalf("replica %s handled nothing (shares %v)", name, per)
		}
	}
}
