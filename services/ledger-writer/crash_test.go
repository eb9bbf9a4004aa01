package ledgerwriter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

var errKilled = errors.New("test: writer killed")

// crashOpts are short enough that a crashed claim is taken over in seconds,
// and a fan-out left in the outbox is swept within a second. The lease still
// exceeds the HTTP timeout, as it must.
func crashOpts() []Option {
	return []Option{WithHTTPTimeout(2 * time.Second), WithClaimLease(2500 * time.Millisecond),
		WithSweep(100*time.Millisecond, 300*time.Millisecond)}
}

// inboxEmpty: every inbox message was acknowledged (WorkQueue retention drops
// acked messages), so nothing more will happen.
func (e *env) inboxEmpty() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := e.pub.StreamStats(ctx, bus.StreamInbox)
	return err == nil && st.Msgs == 0
}

// records counts what E left on GitHub: comments on the work item, or issues
// in the kickoff repository.
func (e *env) records(ev *loopv1.Event) int {
	if ev.GetWorkItemCreate() != nil {
		return len(e.gh.Issues(kickRepo))
	}
	return len(e.gh.Comments(testRepo, 2))
}

// checkExactlyOnce waits until the inbox is drained, then checks one record
// on GitHub and one fan-out event stored and delivered.
func (e *env) checkExactlyOnce(t *testing.T, ev *loopv1.Event) {
	t.Helper()
	testkit.WaitWithin(t, 90*time.Second, "the fan-out event", func() bool { return len(e.fan.byID(ev.GetId())) >= 1 })
	testkit.WaitWithin(t, 90*time.Second, "the inbox to drain", e.inboxEmpty)
	if n := e.records(ev); n != 1 {
		t.Errorf("%d records on GitHub, want exactly 1", n)
	}
	if n := len(e.fan.byID(ev.GetId())); n != 1 {
		t.Errorf("%d fan-out events delivered, want exactly 1", n)
	}
	if n := e.eventsStored(); n != 1 {
		t.Errorf("LOOP_EVENTS holds %d events, want exactly 1", n)
	}
	if d := e.dlq(); len(d) != 0 {
		t.Errorf("dead letters: %+v", d)
	}
	if f := e.fan.byID(ev.GetId())[0].ev.GetLedger(); f.GetUrl() == "" {
		t.Errorf("fan-out carries no record: %v", f)
	}
}

// TestCrashAtEveryStep kills the writer (its NATS connection closed, the
// delivery abandoned mid-way, as a crash leaves it) right after each step of
// a delivery — claim, GitHub write, recorded, fan-out queued in the outbox,
// inbox acknowledged, fan-out published, fan-out out of the outbox — for a
// comment record and for a kickoff issue, then starts a fresh writer. Each
// time exactly one record is on the fake and exactly one fan-out event
// exists: after the acknowledgement nothing comes back to the inbox, and the
// fresh writer's sweeper publishes what the outbox holds.
func TestCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"comment", "issue"} {
		for _, at := range []step{stepClaimed, stepWritten, stepRecorded, stepQueued, stepAcked, stepPublished, stepFannedOut} {
			t.Run(fmt.Sprintf("%s/after-%s", kind, at), func(t *testing.T) {
				t.Parallel()
				e := newEnv(t, testTopology())
				var ev *loopv1.Event
				if kind == "comment" {
					ev = gateEv("slack:EvCrash-"+string(at), "github:"+testRepo+"#2", "LGTM")
				} else {
					ev = createEv("slack:EvCrashKick-"+string(at), "Start the thing")
				}
				killed := make(chan struct{})
				var once sync.Once
				var a *writer
				a = e.start("writer-a", append(crashOpts(), withHook(func(s step, id string) error {
					if s != at || id != ev.GetId() {
						return nil
					}
					var err error
					once.Do(func() {
						a.conn.Close()
						close(killed)
						err = errKilled
					})
					return err
				}))...)
				e.publish(ev)
				select {
				case <-killed:
				case <-time.After(60 * time.Second):
					t.Fatal("the writer never reached the step")
				}
				e.start("writer-b", crashOpts()...)
				e.checkExactlyOnce(t, ev)
			})
		}
	}
}

// TestCrashWhileWriteInFlight: the comment is committed on GitHub and the
// writer dies before the response reaches it (ghfake.AfterWrite closes its
// connection while the request is still open). The next writer reads back.
func TestCrashWhileWriteInFlight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	ev := gateEv("slack:EvInFlight", "github:"+testRepo+"#2", "LGTM")
	var once sync.Once
	killed := make(chan struct{})
	// The "dead" writer must not act on the response it gets afterwards:
	// the hook stops it at the next step, as a dead process would.
	a := e.start("writer-a", append(crashOpts(), withHook(func(step, string) error {
		select {
		case <-killed:
			return errKilled
		default:
			return nil
		}
	}))...)
	remove := e.gh.AfterWrite(func(ghfake.Write) {
		once.Do(func() { a.conn.Close(); close(killed) })
	})
	defer remove()
	e.publish(ev)
	<-killed
	e.start("writer-b", crashOpts()...)
	e.checkExactlyOnce(t, ev)
}

// TestAmbiguousWriteIsReadBack: GitHub commits the write but the response is
// lost (connection dropped): the writer must not write again blindly. For a
// comment it reads the work item's comments back; for a kickoff it reads the
// repository's issues above its high-water mark.
func TestAmbiguousWriteIsReadBack(t *testing.T) {
	t.Parallel()
	for _, kind := range []string{"comment", "issue"} {
		t.Run(kind, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, testTopology())
			e.start("writer-a", crashOpts()...)
			if kind == "issue" {
				// One kickoff first, so the read-back starts above a
				// high-water mark rather than at issue 1.
				first := createEv("slack:EvFirstKick", "first")
				e.publish(first)
				testkit.WaitWithin(t, 60*time.Second, "the first kickoff", func() bool { return len(e.fan.byID(first.GetId())) == 1 })
				e.gh.AddIssue(kickRepo, "someone", "a human's issue", "no envelope here")
			}
			var ev *loopv1.Event
			if kind == "comment" {
				ev = gateEv("slack:EvDropped", "github:"+testRepo+"#2", "LGTM")
			} else {
				ev = createEv("slack:EvDroppedKick", "second")
			}
			e.gh.DropResponseAfterWrite(1)
			e.publish(ev)
			testkit.WaitWithin(t, 60*time.Second, "the fan-out", func() bool { return len(e.fan.byID(ev.GetId())) == 1 })
			testkit.WaitWithin(t, 60*time.Second, "the inbox to drain", e.inboxEmpty)
			if c := e.gh.Counts(); c.Dropped != 1 {
				t.Fatalf("the fake dropped %d responses, want 1", c.Dropped)
			}
			want := 1
			if kind == "issue" {
				want = 3 // the first kickoff, the human's, the dropped one
			}
			if n := e.records(ev); n != want {
				t.Errorf("%d records, want %d: the dropped write was repeated", n, want)
			}
			if len(e.fan.byID(ev.GetId())) != 1 {
				t.Error("fan-out not exactly once")
			}
		})
	}
}

// TestLeaseKeepsSecondWriterOut: writer A claims, loses NATS, but its comment
// is still in flight to GitHub (held 4s by the fake) when the event comes
// back to writer B. B must leave the claim alone until A's lease has run out,
// then read back and find A's comment: one comment. The control run, where B
// uses a lease shorter than the write, shows the hazard the lease closes: B
// reads back too early, finds nothing, and writes a second comment.
func TestLeaseKeepsSecondWriterOut(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lease time.Duration
		want  int
	}{{"lease", 6 * time.Second, 1}, {"no-lease-control", time.Millisecond, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, testTopology())
			ev := gateEv("slack:EvLease", "github:"+testRepo+"#2", "LGTM")
			e.gh.Inject(ghfake.Rule{Method: "POST", Path: "/repos/*/*/issues/*/comments", Times: 1, Delay: 4 * time.Second})
			var a *writer
			var once sync.Once
			aClaimed, aWrote := make(chan struct{}), make(chan struct{})
			a = e.start("writer-a", WithHTTPTimeout(5*time.Second), WithClaimLease(6*time.Second), withHook(func(s step, _ string) error {
				if s == stepClaimed {
					once.Do(func() {
						a.conn.Close() // NATS gone; the GitHub write goes ahead
						close(aClaimed)
					})
				}
				if s == stepWritten {
					close(aWrote) // A's comment is committed; A is dead from here
					return errKilled
				}
				return nil
			}))
			e.publish(ev)
			select {
			case <-aClaimed:
			case <-time.After(60 * time.Second):
				t.Fatal("writer A never claimed")
			}
			e.start("writer-b", WithHTTPTimeout(5*time.Second), WithClaimLease(tc.lease))
			testkit.WaitWithin(t, 90*time.Second, "the fan-out", func() bool { return len(e.fan.byID(ev.GetId())) == 1 })
			testkit.WaitWithin(t, 60*time.Second, "the inbox to drain", e.inboxEmpty)
			select {
			case <-aWrote:
			case <-time.After(60 * time.Second):
				t.Fatal("writer A's delayed write never completed")
			}
			if n := len(e.gh.Comments(testRepo, 2)); n != tc.want {
				t.Errorf("%d comments, want %d", n, tc.want)
			}
		})
	}
}

// TestReadBackIgnoresACopiedEnvelope: an agent, posting with the ledger's
// token, pre-empts a record: it pastes a copy of E's envelope (as the writer
// sealed it for another issue) onto the work item before E is written. When
// the writer's first write fails ambiguously and it reads the work item back,
// the copy is not E's record — it is bound to the other issue — so the writer
// writes E's record and the fan-out names that one.
func TestReadBackIgnoresACopiedEnvelope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	ev := gateEv("slack:EvPreempted", "github:"+testRepo+"#2", "LGTM")
	l := envelope.Ledger{ID: ev.GetId(), Type: ev.GetType(), Source: "slack",
		Actor: envelope.LedgerActor{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"}}
	copied, err := envelope.SealLedger(testKey, l, nil, envelope.Binding{Repo: testRepo, Number: 7},
		func(env string) string { return "LGTM\n\n" + env + "\n" })
	if err != nil {
		t.Fatal(err)
	}
	decoy := e.gh.AddComment(testRepo, 2, botLogin, copied)
	e.gh.Inject(ghfake.Rule{Method: "POST", Path: "/repos/*/*/issues/*/comments", Times: 1, Status: http.StatusBadGateway})
	e.start("writer", crashOpts()...)
	e.publish(ev)
	testkit.WaitWithin(t, 60*time.Second, "the fan-out", func() bool { return len(e.fan.byID(ev.GetId())) == 1 })
	if c := e.gh.Counts(); c.Injected != 1 {
		t.Fatalf("the fake failed %d writes, want 1: the read-back was never exercised", c.Injected)
	}
	cs := e.gh.Comments(testRepo, 2)
	if len(cs) != 2 {
		t.Fatalf("%d comments on #2, want the decoy and E's record", len(cs))
	}
	if got := e.fan.byID(ev.GetId())[0].ev.GetLedger().GetCommentId(); got == decoy.ID || got != cs[1].ID {
		t.Errorf("fan-out names comment %d; the decoy is %d, E's record %d", got, decoy.ID, cs[1].ID)
	}
}
