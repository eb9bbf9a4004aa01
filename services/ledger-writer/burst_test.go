package ledgerwriter

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/envelope"
)

// burst publishes n gate answers over 20 work items and waits until every one
// is fanned out and the inbox is empty.
func burst(t *testing.T, e *env, n int) {
	t.Helper()
	for i := range n {
		e.publish(gateEv(fmt.Sprintf("slack:EvBurst-%04d", i), fmt.Sprintf("github:%s#%d", testRepo, i%20+1), "LGTM"))
	}
	testkit.WaitWithin(t, 180*time.Second, "every fan-out", func() bool { return len(e.fan.all()) >= n })
	testkit.WaitWithin(t, 60*time.Second, "the inbox to drain", e.inboxEmpty)
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

// TestBurstIsPaced: a 500-event burst against a fake enforcing GitHub's 80
// content writes per minute (fake time 20× faster) is recorded in full
// without GitHub refusing a single write: the pacer queues the burst. The
// pacer keeps 10 % of the budget in hand; at 20× that margin is a third of
// a second of scheduling delay, which a loaded machine does not exceed
// (at 60× it was a tenth, which it did).
func TestBurstIsPaced(t *testing.T) {
	t.Parallel()
	const scale, pacedScale = 60, 20
	topo := bustest.FastTopology(16)
	topo.AckWait = 3 * time.Second
	topo.MaxDeliver = 3

	t.Run("paced", func(t *testing.T) {
		t.Parallel()
		e := newEnv(t, topo, ghfake.WithTimeScale(pacedScale), ghfake.WithSecondaryLimits(80, 0))
		w := e.start("writer", WithTimeScale(pacedScale), WithPacing(80, 0))
		start := time.Now()
		const n = 500
		burst(t, e, n)
		if c := e.gh.Counts(); c.SecondaryLimited != 0 {
			t.Errorf("GitHub refused %d writes for the secondary limit: the pacer let the burst through", c.SecondaryLimited)
		}
		// n writes at 80 per fake minute take at least n/80 fake minutes
		// minus one burst: the pacer, not luck, kept the fake happy.
		if min := time.Duration(float64(n-80) / 80 * float64(time.Minute) / pacedScale); time.Since(start) < min {
			t.Errorf("%d writes took %s, faster than the limit allows (%s)", n, time.Since(start), min)
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

// TestGitHubFailuresWithinTheBound: GitHub answers 502 to the first
// MaxDeliver-1 requests on each work item's comments — writes and read-backs
// alike; the events wait in order, nothing is dead-lettered, and every event
// is recorded exactly once in publish order.
func TestGitHubFailuresWithinTheBound(t *testing.T) {
	t.Parallel()
	topo := testTopology()
	e := newEnv(t, topo)
	for item := 1; item <= 4; item++ {
		e.gh.Inject(ghfake.Rule{Path: fmt.Sprintf("/repos/*/*/issues/%d/comments", item), Times: topo.MaxDeliver - 1, Status: http.StatusBadGateway})
	}
	e.start("writer", WithPacing(0, 0)) // 40 writes stay under the fake's limits anyway
	const n = 40
	for i := range n {
		e.publish(replyEv(fmt.Sprintf("slack:EvDown-%02d", i), fmt.Sprintf("github:%s#%d", testRepo, i%4+1), "r"))
	}
	testkit.WaitWithin(t, 90*time.Second, "every fan-out", func() bool { return len(e.fan.all()) >= n })
	testkit.WaitWithin(t, 60*time.Second, "the inbox to drain", e.inboxEmpty)
	if c := e.gh.Counts(); c.Injected != 4*(topo.MaxDeliver-1) {
		t.Fatalf("the fake failed %d requests, want %d", c.Injected, 4*(topo.MaxDeliver-1))
	}
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

// TestGitHubFailingForeverDeadLetters: attack 10. GitHub refuses every write
// on a work item, forever: a 503 (with or without Retry-After), or a 429 rate
// limit with Retry-After. The event is retried a bounded number of times —
// each delivery handed back to the bus after the 503's Retry-After or a
// jittered backoff, a rate limit first waited out rateLimitWaits times inside
// the delivery — then fails with its reason:
// bus.record_failed, the notice to its conversation, LOOP_DLQ after
// MaxDeliver deliveries. The next event of the same partition, which waited
// behind it, is recorded once GitHub takes writes again. A writer that
// retried forever inside one delivery never lets the DLQ entry appear, and the
// fault is lifted only after it does.
func TestGitHubFailingForeverDeadLetters(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		reason   string
		status   int
		header   http.Header
		attempts int // writes per delivery
	}{
		{"github-unavailable", http.StatusServiceUnavailable, nil, 1},
		// A 503 naming its Retry-After spaces the deliveries by it, one
		// write each: it is not a rate limit waited out inside the
		// delivery (decision 040).
		{"github-unavailable", http.StatusServiceUnavailable, http.Header{"Retry-After": {"1"}}, 1},
		{"rate-limited", http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}, 1 + rateLimitWaits},
	} {
		t.Run(tc.reason+tc.header.Get("Retry-After"), func(t *testing.T) {
			t.Parallel()
			topo := testTopology()
			e := newEnv(t, topo)
			remove := e.gh.Inject(ghfake.Rule{Method: "POST", Path: "/repos/*/*/issues/2/comments", Status: tc.status, Header: tc.header})
			e.start("writer", WithPacing(0, 0))
			stuck := gateEv("slack:EvStuck", "github:"+testRepo+"#2", "LGTM")
			next := gateEv("slack:EvNext", "github:"+testRepo+"#2", "ship it")
			e.publish(stuck)
			e.publish(next)
			testkit.WaitWithin(t, 120*time.Second, "the DLQ entry", func() bool { return len(e.dlq()) == 1 })
			remove()
			d := e.dlq()[0]
			if d.CEID != stuck.GetId() || !strings.Contains(d.Reason, tc.reason) || d.Deliveries != uint64(topo.MaxDeliver) {
				t.Errorf("DLQ entry = %s after %d deliveries: %q", d.CEID, d.Deliveries, d.Reason)
			}
			if c := e.gh.Counts(); c.Injected < topo.MaxDeliver*tc.attempts {
				t.Errorf("%d writes refused, want %d per delivery", c.Injected, tc.attempts)
			} else if tc.status != http.StatusTooManyRequests && c.Injected >= 2*topo.MaxDeliver {
				// (the next event may meet the fault once or twice
				// before it is lifted)
				t.Errorf("%d writes refused in %d deliveries: a 5xx was retried inside a delivery", c.Injected, topo.MaxDeliver)
			}
			var failed []testkit.LogRecord
			testkit.WaitWithin(t, 30*time.Second, "bus.record_failed", func() bool { failed = e.logs.WithMessage("bus.record_failed"); return len(failed) == 1 })
			if failed[0]["event_id"] != stuck.GetId() || failed[0]["reason"] != tc.reason {
				t.Errorf("bus.record_failed = %v", failed[0])
			}
			notice := envelope.LoopID("record-failed", stuck.GetId())
			testkit.WaitWithin(t, 30*time.Second, "the failure notice", func() bool { return len(e.fan.byID(notice)) == 1 })
			testkit.WaitWithin(t, 60*time.Second, "the next event of the partition", func() bool { return len(e.fan.byID(next.GetId())) == 1 })
			testkit.WaitWithin(t, 60*time.Second, "the inbox to drain", e.inboxEmpty)
			if len(e.fan.byID(stuck.GetId())) != 0 {
				t.Error("the dead-lettered event was fanned out unrecorded")
			}
			cs := e.gh.Comments(testRepo, 2)
			if len(cs) != 1 {
				t.Fatalf("%d comments on #2, want the next event's only", len(cs))
			}
			if l, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: 2}, cs[0].Body); err != nil || l.ID != next.GetId() {
				t.Errorf("the comment on #2 is %s (%v), want %s", l.ID, err, next.GetId())
			}
		})
	}
}
