package ledgerwriter

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/bus/bustest"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/github/ghfake"
)

// burst publishes n gate answers over 20 work items and waits until every one
// is fanned out and the inbox is empty.
func burst(t *testing.T, e *env, n int) {
	t.Helper()
	for i := range n {
		e.publish(gateEv(fmt.Sprintf("slack:EvBurst-%04d", i), fmt.Sprintf("github:%s#%d", testRepo, i%20+1), "LGTM"))
	}
	waitFor(t, "every fan-out", 180*time.Second, func() bool { return len(e.fan.all()) >= n })
	waitFor(t, "the inbox to drain", 60*time.Second, e.inboxEmpty)
	if w := e.gh.Counts().Comments; w != n {
		t.Errorf("%d comments, want %d", w, n)
	}
	if d := e.dlq(); len(d) != 0 {
		t.Errorf("%d dead letters, first: %s", len(d), d[0].Reason)
	}
	if s := e.eventsStored(); s != uint64(n) {
		t.Errorf("LOOP_EVENTS holds %d, want %d", s, n)
	}
}

// TestBurstIsPaced: a 1,000-event burst against a fake enforcing GitHub's 80
// content writes per minute (fake time 60× faster) is recorded in full
// without GitHub refusing a single write: the pacer queues the burst.
func TestBurstIsPaced(t *testing.T) {
	t.Parallel()
	const scale = 60
	topo := bustest.FastTopology(16)
	topo.AckWait = 3 * time.Second
	topo.MaxDeliver = 3

	t.Run("paced", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, topo, ghfake.WithTimeScale(scale), ghfake.WithSecondaryLimits(80, 0))
		w := e.start("writer", WithTimeScale(scale), WithPacing(80, 0))
		start := time.Now()
		burst(t, e, 1000)
		if c := e.gh.Counts(); c.SecondaryLimited != 0 {
			t.Errorf("GitHub refused %d writes for the secondary limit: the pacer let the burst through", c.SecondaryLimited)
		}
		// 1,000 writes at 80 per fake minute take at least 12 fake minutes
		// minus one burst: the pacer, not luck, kept the fake happy.
		if min := time.Duration(float64(1000-80) / 80 * float64(time.Minute) / scale); time.Since(start) < min {
			t.Errorf("1,000 writes took %s, faster than the limit allows (%s)", time.Since(start), min)
		}
		if v := gauge(t, w, "loop_ledger_writer_github_ratelimit_remaining"); v <= 0 {
			t.Errorf("rate-limit headroom gauge = %v", v)
		}
	})
	// The control: the same writer with the pacer off against a stricter
	// budget (20 per fake minute, so that even a slow machine outruns it)
	// does trip the limit, and then waits out GitHub's Retry-After — 403
	// and 429 alike — without losing, repeating or dead-lettering anything.
	for _, status := range []int{http.StatusForbidden, http.StatusTooManyRequests} {
		t.Run(fmt.Sprintf("unpaced-%d", status), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, topo, ghfake.WithTimeScale(scale), ghfake.WithSecondaryLimits(20, 0), ghfake.WithSecondaryLimitStatus(status))
			w := e.start("writer", WithTimeScale(scale), WithPacing(0, 0))
			burst(t, e, 100)
			if c := e.gh.Counts(); c.SecondaryLimited == 0 {
				t.Fatalf("the unpaced burst never hit the limit: this control proves nothing")
			}
			if v := counter(t, w, "loop_ledger_writer_retried_total"); v == 0 {
				t.Error("no retry counted")
			}
		})
	}
}

// TestPacerWindow: whatever the load, the pacer never grants more than 90% of
// a limit in any window of the limit's length (fake minute = 1/60 s here),
// and it does grant at about that rate.
func TestPacerWindow(t *testing.T) {
	t.Parallel()
	const scale = 60
	p := newPacer(80, 0, scale)
	var grants []time.Time
	start := time.Now()
	for range 250 {
		if err := p.wait(t.Context(), nil); err != nil {
			t.Fatal(err)
		}
		grants = append(grants, time.Now())
	}
	window := time.Minute / scale
	for i := range grants {
		n := 0
		for j := i; j < len(grants) && grants[j].Sub(grants[i]) < window; j++ {
			n++
		}
		if n > 72 {
			t.Fatalf("%d grants within one fake minute from grant %d, limit 80 less 10%%", n, i)
		}
	}
	// 250 grants need at least (250-7)/65 fake minutes.
	if d, min := time.Since(start), time.Duration(float64(250-7)/65*float64(window)); d < min {
		t.Errorf("250 grants took %s, less than %s", d, min)
	}
}

// TestGitHubDownThenBack: GitHub answers 503 to everything for a while; the
// events wait in order, nothing is dead-lettered, and once it is back every
// event is recorded exactly once in publish order.
func TestGitHubDownThenBack(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer", WithPacing(0, 0)) // 40 writes stay under the fake's limits anyway
	e.gh.SetDown(true)
	const n = 40
	for i := range n {
		e.publish(replyEv(fmt.Sprintf("slack:EvDown-%02d", i), fmt.Sprintf("github:%s#%d", testRepo, i%4+1), "r"))
	}
	// Several AckWaits pass while GitHub is down. A writer that handed each
	// failure back to the runner (a Nak per attempt, 20ms-500ms apart) would
	// have used up MaxDeliver (5) long before and dead-lettered.
	waitFor(t, "the writer to hit the outage", 30*time.Second, func() bool { return e.gh.Counts().Injected > 10 })
	time.Sleep(3 * testTopology().AckWait)
	if len(e.fan.all()) != 0 {
		t.Fatal("events were fanned out while GitHub was down")
	}
	e.gh.SetDown(false)
	waitFor(t, "every fan-out", 90*time.Second, func() bool { return len(e.fan.all()) >= n })
	waitFor(t, "the inbox to drain", 60*time.Second, e.inboxEmpty)
	if d := e.dlq(); len(d) != 0 {
		t.Fatalf("%d dead letters: %s", len(d), d[0].Reason)
	}
	for item := 1; item <= 4; item++ {
		cs := e.gh.Comments(testRepo, item)
		if len(cs) != n/4 {
			t.Errorf("#%d has %d comments, want %d", item, len(cs), n/4)
		}
		prev := ""
		for _, c := range cs {
			l, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: item}, c.Body)
			if err != nil || l.ID <= prev {
				t.Errorf("#%d: %s after %s (%v)", item, l.ID, prev, err)
			}
			prev = l.ID
		}
	}
}
