package slackrenderer

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Replica scaling against a slow Slack: the same shape as the
// ledger-writer's BenchmarkLedgerReplicas (see there for why these numbers).
const (
	scalePartitions  = 24 // divides evenly among 1–4 replicas
	scaleConcurrency = 2  // divides each replica's share evenly
	scalePerPart     = 4
	scaleLatency     = 400 * time.Millisecond // every chat.postMessage, wall clock
)

// BenchmarkRendererReplicas measures slack-renderer throughput as replicas
// grow from 1 to 4 against a Slack fake that answers every chat.postMessage
// after 400 ms (the per-channel pacer off): b.N comment events over 96 work
// items, four in each of 24 partitions, are published to the event stream,
// and the clock stops when every one has been posted and recorded. Each
// replica handles at most LOOP_CONCURRENCY (2) events at once over the
// partitions it owns, so replicas add throughput up to twelve. It reports
// events/s, x-1-replica and max-share, and every round fails unless each
// work item's thread holds its events once each, in publish order. Run it
// with -benchtime=144x (make bench does).
//
// In production Slack's own pace (about one post per second per channel,
// LOOP_SLACK_POST_INTERVAL, kept by each replica for itself) binds first.
func BenchmarkRendererReplicas(b *testing.B) {
	bustest.ReplicaScaling(b, func(b *testing.B) int { return b.N }, rendererRound)
}

func rendererRound(b *testing.B, n int) (rate, share float64) {
	b.StopTimer()
	ref := func(i int) string { return fmt.Sprintf("github:octo/repo#%d", i) }
	items := bustest.Spread(scalePartitions, scalePerPart, ref)
	// The server syncs on its interval, as in BenchmarkLedgerReplicas.
	e := newEnvOn(b, bustest.Options{InProcessOnly: true, SyncInterval: 2 * time.Minute}, scalePartitions)
	e.setSlack(func(s *config.SlackChannel) { s.Subscribe = []catalog.Type{catalog.CommentHuman} })
	e.fake.AfterPost(func(slackfake.Message) { time.Sleep(scaleLatency) })

	tally := bustest.NewTally(b.N, n)
	for r := range n {
		e.start(startOpts{concurrency: scaleConcurrency, afterRecord: func(_ *Service, _ *bus.Conn, ev *loopv1.Event) {
			tally.Handled(r, ev.GetId())
		}})
	}
	testkit.WaitFor(b, "every replica consuming its share", func() bool {
		ms, err := e.pub.Members(b.Context(), Name)
		return err == nil && bustest.Shared(ms, scalePartitions, n)
	})

	id := func(i int) string { return fmt.Sprintf("loop:scale-%07d", i) }
	b.StartTimer()
	start := time.Now()
	if err := bustest.PublishEach(b.N, len(items), func(i, k int) error {
		m, err := envelope.ToMessage(comment(id(i), ref(items[k])), envelope.Events, "")
		if err != nil {
			return err
		}
		_, err = e.pub.Publish(b.Context(), bus.FromEnvelope(m))
		return err
	}); err != nil {
		b.Fatal(err)
	}
	tally.Wait(b, 10*time.Minute, "posted")
	elapsed := time.Since(start)
	b.StopTimer()
	checkThreads(b, e, items, ref, id)
	return float64(b.N) / elapsed.Seconds(), tally.MaxShare()
}

// checkThreads fails b unless every event of the round was posted once, in
// its work item's thread, in publish order.
func checkThreads(b *testing.B, e *env, items []int, ref func(int) string, id func(int) string) {
	b.Helper()
	seq := func(s string) int {
		v, err := strconv.Atoi(strings.TrimPrefix(s, "loop:scale-"))
		if err != nil {
			b.Fatalf("unexpected event id %q", s)
		}
		return v
	}
	seen := map[string]bool{}
	for _, root := range e.fake.TopLevel(testChannel) {
		msgs := append([]slackfake.Message{root}, e.fake.Thread(testChannel, root.TS)...)
		first := seq(eventIDOf(root))
		want := ref(items[first%len(items)])
		last := -1
		for _, m := range msgs {
			evID := eventIDOf(m)
			s := seq(evID)
			switch {
			case seen[evID]:
				b.Fatalf("%s posted twice", evID)
			case ref(items[s%len(items)]) != want:
				b.Fatalf("%s posted in the thread of %s", evID, want)
			case s <= last:
				b.Fatalf("%s: %s after %s: out of publish order", want, evID, id(last))
			}
			seen[evID] = true
			last = s
		}
	}
	if len(seen) != b.N {
		b.Fatalf("%d events posted, want %d", len(seen), b.N)
	}
}
