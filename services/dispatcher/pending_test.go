package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/sessions"
)

// A host that starts again settles the pastes it left unrecorded, from its
// panes: received → delivered, absent from a live pane → Pending cleared (a
// redelivery types it), no pane → the marker cleared (nothing can tell).
func TestSettlePendingAtStart(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const ref = "github:octo/repo#21"
	sess := e.start(ref, 7000)
	set := func(id, marker string) {
		t.Helper()
		if _, err := e.store.Mutate(ctx, ref, func(r *sessions.Record) error {
			r.Session.Pending, r.Session.PendingMarker = id, marker
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}

	received := comment(ref, 7001, alice, "pasted before the crash")
	marker := deliveryMarker(&input{deliveryID: received.GetId()})
	if err := e.svc.tmux.Deliver(ctx, sess.TmuxTarget, e.expected(received, false)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the paste on screen", func() bool {
		ok, err := e.svc.tmux.Shows(ctx, sess.TmuxTarget, marker)
		return err == nil && ok
	})
	set(received.GetId(), marker)
	e.svc.panes.settle(ctx, e.store)
	if got := e.record(ref).Session; got.Pending != "" || got.Delivered[len(got.Delivered)-1] != received.GetId() {
		t.Errorf("received paste: pending %q, delivered %v", got.Pending, got.Delivered)
	}

	notTyped := comment(ref, 7002, alice, "claimed only")
	set(notTyped.GetId(), deliveryMarker(&input{deliveryID: notTyped.GetId()}))
	e.svc.panes.settle(ctx, e.store)
	if got := e.record(ref).Session; got.Pending != "" || got.PendingMarker != "" {
		t.Errorf("a paste that never happened stays pending: %+v", got)
	}

	if err := e.svc.tmux.Kill(ctx, sess.TmuxTarget); err != nil {
		t.Fatal(err)
	}
	gone := comment(ref, 7003, alice, "the pane died")
	set(gone.GetId(), deliveryMarker(&input{deliveryID: gone.GetId()}))
	e.svc.panes.settle(ctx, e.store)
	if got := e.record(ref).Session; got.Pending != gone.GetId() || got.PendingMarker != "" {
		t.Errorf("a paste nothing can judge: pending %q marker %q, want pending kept, marker cleared", got.Pending, got.PendingMarker)
	}
}

// A paste left unrecorded on another host, whose lease is fresh, is waited
// for (a delayed retry): that host settles it when it starts again. Once it
// has — here, as never typed — the event is typed on this host, once; a
// paste whose host's lease expired is dropped as delivery-uncertain.
func TestPendingOnAnotherHost(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	const ref = "github:octo/repo#22"
	sess := e.start(ref, 8000)
	ev := comment(ref, 8001, alice, "typed on the old host?")
	const other = "old-host"
	if err := e.store.Heartbeat(ctx, other, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Mutate(ctx, ref, func(r *sessions.Record) error {
		r.Session.Host = other
		r.Session.Pending, r.Session.PendingMarker = ev.GetId(), deliveryMarker(&input{deliveryID: ev.GetId()})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	err := e.svc.handle(ctx, ev, &bus.Delivery{NumDelivered: 2, MaxDeliver: 10})
	if _, ok := bus.RetryDelay(err); !ok {
		t.Fatalf("handle = %v, want a delayed retry while the old host may settle the paste", err)
	}
	// The old host started again and found the paste never happened.
	if _, err := e.store.Mutate(ctx, ref, func(r *sessions.Record) error {
		r.Session.Pending, r.Session.PendingMarker = "", ""
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.handle(ctx, ev, &bus.Delivery{NumDelivered: 3, MaxDeliver: 10}); err != nil {
		t.Fatal(err)
	}
	want := e.expected(ev, false)
	testkit.WaitFor(t, "the event typed here", func() bool {
		for _, b := range e.bootsOf(sess.HarnessSessionID) {
			if b.Prompt == want {
				return true
			}
		}
		for _, in := range e.inputsOf(sess.HarnessSessionID) {
			if in == want {
				return true
			}
		}
		return false
	})

	// A host without a lease (gone for good) cannot settle anything.
	ev2 := comment(ref, 8002, alice, "typed on a dead host?")
	if _, err := e.store.Mutate(ctx, ref, func(r *sessions.Record) error {
		r.Session.Host = "gone-host"
		r.Session.Pending, r.Session.PendingMarker = ev2.GetId(), deliveryMarker(&input{deliveryID: ev2.GetId()})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.svc.handle(ctx, ev2, &bus.Delivery{NumDelivered: 2, MaxDeliver: 10}); err != nil {
		t.Fatal(err)
	}
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": ev2.GetId(), "reason": DropDeliveryUncertain})
}
