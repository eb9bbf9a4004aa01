package ledgerwriter

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestTwoReplicasKeepOrder: two writer replicas share the partitions; 200
// events over 20 work items (replies and gate answers interleaved) are
// published, and half way one replica shuts down so the other takes its
// partitions over. On every work item the comments appear in publish order,
// none twice, none missing, and the fan-out keeps the same order.
func TestTwoReplicasKeepOrder(t *testing.T) {
	t.Parallel()
	const total, items = 200, 20
	e := newEnv(t, testTopology(), ghfake.WithTimeScale(600))
	// Each replica gets half of the credential's budget (WithPacing doc).
	opts := []Option{WithTimeScale(600), WithPacing(DefaultConfig().WritesPerMinute/2, DefaultConfig().WritesPerHour/2)}
	a := e.start("writer-a", opts...)
	e.start("writer-b", opts...)

	id := func(i int) string { return fmt.Sprintf("slack:EvOrd-%03d", i) }
	for i := range total {
		ref := fmt.Sprintf("github:%s#%d", testRepo, i%items+1)
		var ev *loopv1.Event
		if i%2 == 0 {
			ev = replyEv(id(i), ref, "reply "+strconv.Itoa(i))
		} else {
			ev = gateEv(id(i), ref, "answer "+strconv.Itoa(i))
		}
		e.publish(ev)
		if i == total/2 {
			go a.stop()
		}
	}
	testkit.WaitWithin(t, 120*time.Second, "every fan-out", func() bool { return len(e.fan.all()) >= total })
	testkit.WaitWithin(t, 60*time.Second, "the inbox to drain", e.inboxEmpty)

	seen := map[string]bool{}
	for n := 1; n <= items; n++ {
		last := -1
		for _, c := range e.gh.Comments(testRepo, n) {
			l, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: n}, c.Body)
			if err != nil {
				t.Fatalf("#%d comment %d: %v", n, c.ID, err)
			}
			if seen[l.ID] {
				t.Errorf("%s recorded twice", l.ID)
			}
			seen[l.ID] = true
			seq, _ := strconv.Atoi(strings.TrimPrefix(l.ID, "slack:EvOrd-"))
			if seq%items != n-1 {
				t.Errorf("%s landed on #%d", l.ID, n)
			}
			if seq <= last {
				t.Errorf("#%d: %s after %03d: out of publish order", n, l.ID, last)
			}
			last = seq
		}
	}
	if len(seen) != total {
		t.Errorf("%d events recorded, want %d", len(seen), total)
	}
	lastFan := map[string]int{}
	for _, r := range e.fan.all() {
		seq, _ := strconv.Atoi(strings.TrimPrefix(r.ev.GetId(), "slack:EvOrd-"))
		if prev, ok := lastFan[r.ev.GetSubject()]; ok && seq <= prev {
			t.Errorf("fan-out of %s: %03d after %03d", r.ev.GetSubject(), seq, prev)
		}
		lastFan[r.ev.GetSubject()] = seq
	}
	if n := e.eventsStored(); n != total {
		t.Errorf("LOOP_EVENTS holds %d, want %d", n, total)
	}
}
