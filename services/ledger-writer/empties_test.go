package ledgerwriter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
)

// outboxes reads every partition's outbox: key → what it holds (the fan-out's
// event id, "" when empty).
func (e *env) outboxes() map[string]string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := e.pub.KV(ctx, bus.BucketLedger)
	if err != nil {
		e.t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		if !strings.HasPrefix(k, "outbox/") {
			continue
		}
		ent, err := kv.Get(ctx, k)
		if err != nil {
			e.t.Fatal(err)
		}
		out[k] = ""
		if len(ent.Value) > 0 {
			f, err := decodePending(ent.Value)
			if err != nil {
				e.t.Fatalf("%s: %v", k, err)
			}
			out[k] = f.ID
		}
	}
	return out
}

// ledgerWrites is how many writes the ledger bucket has taken.
func (e *env) ledgerWrites() uint64 { return e.streamStats("KV_" + bus.BucketLedger).LastSeq }

// TestOutboxEmptiedLazily: fan-outs of one partition in a row each overwrite
// the last in the outbox — one ledger write per event, not two — with
// nothing published twice or counted as recovered; the last stays until the
// writer stops, which empties it.
func TestOutboxEmptiedLazily(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	w := e.start("writer", WithEmptyAfter(time.Hour))
	before := e.ledgerWrites()
	const n = 20
	var want []string
	for i := range n {
		ev := notifyEv(fmt.Sprintf("loop:EvLazy-%02d", i), "github:"+testRepo+"#1")
		e.publish(ev)
		want = append(want, ev.GetId())
	}
	e.fannedOutInOrder(t, want)
	if d := e.ledgerWrites() - before; d != n {
		t.Errorf("%d ledger writes for %d fan-outs, want %d (one each)", d, n, n)
	}
	boxes := e.outboxes()
	if len(boxes) != 1 {
		t.Fatalf("outboxes %v, want the one partition's", boxes)
	}
	for k, id := range boxes {
		if id != want[n-1] {
			t.Errorf("%s holds %q, want the last fan-out %s, published and not yet emptied", k, id, want[n-1])
		}
	}
	if c := counter(t, w, "loop_ledger_writer_outbox_recovered_total"); c != 0 {
		t.Errorf("outbox recoveries = %v, want 0: nothing was left behind", c)
	}
	w.stop()
	for k, id := range e.outboxes() {
		if id != "" {
			t.Errorf("after the writer stopped, %s still holds %s", k, id)
		}
	}
	if d := e.ledgerWrites() - before; d != n+1 {
		t.Errorf("%d ledger writes after the stop, want %d (the empty)", d, n+1)
	}
	if s := e.eventsStored(); s != n {
		t.Errorf("LOOP_EVENTS holds %d, want %d", s, n)
	}
}

// TestQuietOutboxEmptied: a partition that stays quiet has its outbox
// emptied after emptyAfter by the writer that published it; another
// replica's sweeper, which may see the fan-out first, publishes it again
// under the same Nats-Msg-Id, and LOOP_EVENTS still stores it once.
func TestQuietOutboxEmptied(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer", WithEmptyAfter(2*time.Second))
	ev := notifyEv("loop:EvQuiet", "github:"+testRepo+"#3")
	e.publish(ev)
	testkit.WaitWithin(t, 60*time.Second, "the fan-out", func() bool { return len(e.fan.byID(ev.GetId())) == 1 })
	// A second replica that owns no partition yet sweeps at once.
	e.start("sweeper", WithSweep(50*time.Millisecond, 0), WithEmptyAfter(time.Hour))
	testkit.WaitWithin(t, 30*time.Second, "the outbox to be emptied", func() bool {
		for _, id := range e.outboxes() {
			if id != "" {
				return false
			}
		}
		return true
	})
	if s := e.eventsStored(); s != 1 {
		t.Errorf("LOOP_EVENTS holds %d, want 1", s)
	}
	if n := len(e.fan.byID(ev.GetId())); n != 1 {
		t.Errorf("fanned out %d times, want once", n)
	}
}
