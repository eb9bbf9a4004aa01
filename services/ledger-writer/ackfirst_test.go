package ledgerwriter

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// busObserver records, in the order the server relays them, the inbox
// acknowledgements (by the inbox stream sequence they settle) and the
// fan-out publishes (by event id) on one plain NATS connection: the writer
// sends both on its own connection, and NATS keeps one sender's messages in
// order for a subscriber.
type busObserver struct {
	mu  sync.Mutex
	log []string // "ack <seq>" or "pub <id>"
}

func observe(t *testing.T, e *env) *busObserver {
	t.Helper()
	o := &busObserver{}
	ch := e.srv.Watch(t, "test-observer", "$JS.ACK."+bus.StreamInbox+".>", "loop.ev.>")
	go func() {
		for m := range ch {
			o.mu.Lock()
			switch {
			case strings.HasPrefix(m.Subject, "$JS.ACK."):
				if seq, ok := ackedSeq(m.Subject, bus.StreamInbox); ok && strings.HasPrefix(string(m.Data), "+ACK") {
					o.log = append(o.log, "ack "+strconv.FormatUint(seq, 10))
				}
			default:
				o.log = append(o.log, "pub "+m.Header.Get("Nats-Msg-Id"))
			}
			o.mu.Unlock()
		}
	}()
	return o
}

// ackedSeq parses the stream sequence out of an acknowledgement subject,
// $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ts>.<pending>.
func ackedSeq(subject, stream string) (uint64, bool) {
	tok := strings.Split(subject, ".")
	if len(tok) < 9 || tok[2] != stream {
		return 0, false
	}
	seq, err := strconv.ParseUint(tok[5], 10, 64)
	return seq, err == nil
}

func (o *busObserver) index(entry string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, e := range o.log {
		if e == entry {
			return i
		}
	}
	return -1
}

// publishSeq is publish returning the inbox sequence the event got.
func (e *env) publishSeq(ev *loopv1.Event) uint64 {
	e.t.Helper()
	m, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ack, err := e.pub.Publish(ctx, bus.FromEnvelope(m))
	if err != nil {
		e.t.Fatal(err)
	}
	return ack.Seq
}

// TestAcksBeforeFanOut watches the bus while the writer handles recorded
// events (a gate answer, a reply, a kickoff) and pass-through ones (a
// notification): for each, the acknowledgement of its inbox message crosses
// the bus before its fan-out is published on loop.ev.
func TestAcksBeforeFanOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	o := observe(t, e)
	e.start("writer")
	evs := []*loopv1.Event{
		gateEv("slack:EvAckGate", "github:"+testRepo+"#2", "LGTM"),
		replyEv("slack:EvAckReply", "github:"+testRepo+"#3", "a reply"),
		createEv("slack:EvAckKick", "Start the thing"),
		notifyEv("loop:EvAckNotify", "github:"+testRepo+"#1"),
	}
	seqs := map[string]uint64{}
	for _, ev := range evs {
		seqs[ev.GetId()] = e.publishSeq(ev)
	}
	for _, ev := range evs {
		id := ev.GetId()
		testkit.WaitWithin(t, 60*time.Second, "the fan-out of "+id, func() bool { return len(e.fan.byID(id)) == 1 })
		ackEntry, pubEntry := "ack "+strconv.FormatUint(seqs[id], 10), "pub "+id
		testkit.WaitWithin(t, 10*time.Second, "the observer to see "+id, func() bool { return o.index(ackEntry) >= 0 && o.index(pubEntry) >= 0 })
		ack, pub := o.index(ackEntry), o.index(pubEntry)
		if pub < ack {
			t.Errorf("%s: fan-out published (#%d on the bus) before the inbox acknowledgement (#%d)", id, pub, ack)
		}
	}
	if t.Failed() {
		t.Logf("bus traffic in order: %v", o.log)
	}
}

// TestOutboxAfterAcknowledgedCrash: the writer acknowledges E1 and dies
// before publishing its fan-out. Either the partition's next delivery
// flushes the outbox before it handles its own event (sweep off: a grace of
// an hour), so E1 still fans out before E2 of the same work item; or, with no
// next event, a sweeper publishes it. Each time every fan-out is stored
// once, and the recovery is counted by how it happened.
func TestOutboxAfterAcknowledgedCrash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		via  string
		opts []Option
		next bool
	}{
		{via: "flush", opts: []Option{WithSweep(50*time.Millisecond, time.Hour)}, next: true},
		{via: "sweep", opts: []Option{WithSweep(50*time.Millisecond, 200*time.Millisecond)}},
	} {
		t.Run(tc.via, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, testTopology())
			first := gateEv("slack:EvOutbox-1", "github:"+testRepo+"#2", "LGTM")
			killed := make(chan struct{})
			var once sync.Once
			var a *writer
			a = e.start("writer-a", append(crashOpts(), withHook(func(s step, id string) error {
				if s != stepAcked || id != first.GetId() {
					return nil
				}
				var err error
				once.Do(func() { a.conn.Close(); close(killed); err = errKilled })
				return err
			}))...)
			e.publish(first)
			select {
			case <-killed:
			case <-time.After(60 * time.Second):
				t.Fatal("the writer never acknowledged")
			}
			testkit.WaitWithin(t, 30*time.Second, "the inbox to drain", e.inboxEmpty)
			b := e.start("writer-b", append(crashOpts(), tc.opts...)...)
			want := []string{first.GetId()}
			if tc.next {
				second := replyEv("slack:EvOutbox-2", "github:"+testRepo+"#2", "after the crash")
				e.publish(second)
				want = append(want, second.GetId())
			}
			e.fannedOutInOrder(t, want)
			if n := e.eventsStored(); n != uint64(len(want)) {
				t.Errorf("LOOP_EVENTS holds %d, want %d", n, len(want))
			}
			if n := len(e.gh.Comments(testRepo, 2)); n != len(want) {
				t.Errorf("%d records on #2, want %d", n, len(want))
			}
			if n := counter(t, b, "loop_ledger_writer_outbox_recovered_total"); n != 1 {
				t.Errorf("outbox recoveries = %v, want 1 (by %s)", n, tc.via)
			}
			if r := e.logs.WithMessage("ledger-writer: published a fan-out a stopped delivery left in the outbox"); len(r) != 1 || r[0]["via"] != tc.via {
				t.Errorf("recovery log = %+v, want one by %s", r, tc.via)
			}
		})
	}
}

// TestLargeFanOutPassesTheOutbox: a fan-out near the bus's 1 MiB message
// limit (a 760 KiB notification; the original's payload cap is 600 KiB before
// the object store takes over) fits the outbox, which keeps the message's
// bytes as they are rather than re-encoding them.
func TestLargeFanOutPassesTheOutbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer")
	ev := notifyEv("loop:EvLarge", "github:"+testRepo+"#1")
	ev.GetNotification().Text = strings.Repeat("design waits for approval. ", 760<<10/27)
	e.publish(ev)
	testkit.WaitWithin(t, 60*time.Second, "the large fan-out", func() bool { return len(e.fan.byID(ev.GetId())) == 1 })
	testkit.WaitWithin(t, 30*time.Second, "the inbox to drain", e.inboxEmpty)
	if got := len(e.fan.byID(ev.GetId())[0].ev.GetNotification().GetText()); got != len(ev.GetNotification().Text) {
		t.Errorf("fan-out text is %d bytes, want %d", got, len(ev.GetNotification().Text))
	}
}
