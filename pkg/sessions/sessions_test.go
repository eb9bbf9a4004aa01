package sessions

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/bustest"
)

// TestMutateIsCompareAndSet: concurrent writers each see the other's step;
// none is lost.
func TestMutateIsCompareAndSet(t *testing.T) {
	if testing.Short() {
		t.Skip("needs JetStream")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	ctx := context.Background()
	const ref = "github:octo/repo#1"
	var wg sync.WaitGroup
	for w := range 4 {
		conn := srv.Connect(t, fmt.Sprintf("writer-%d", w))
		store, err := Open(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range 10 {
				if _, err := store.Mutate(ctx, ref, func(r *Record) error {
					if r.Session == nil {
						r.Session = &Session{Status: Active}
					}
					r.Session.Delivered = append(r.Session.Delivered, fmt.Sprintf("w%d-%d", w, i))
					return nil
				}); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	store, _ := Open(ctx, srv.Connect(t, "reader"))
	r, rev, err := store.Get(ctx, ref)
	if err != nil || rev == 0 {
		t.Fatal(rev, err)
	}
	if n := len(r.Session.Delivered); n != 40 {
		t.Errorf("%d steps survived, want 40", n)
	}
	recs, err := store.List(ctx)
	if err != nil || len(recs) != 1 {
		t.Errorf("List = %d records, %v", len(recs), err)
	}
	if _, err := store.Mutate(ctx, ref, func(*Record) error { return ErrNoChange }); err != nil {
		t.Error(err)
	}
	if _, rev2, _ := store.Get(ctx, ref); rev2 != rev {
		t.Error("ErrNoChange wrote")
	}
}

func TestRememberCaps(t *testing.T) {
	s := &Session{Pending: "x"}
	for i := range RecentCap + 5 {
		s.Remember(fmt.Sprint(i), s.LastEventAt)
	}
	if len(s.Delivered) != RecentCap || s.Delivered[0] != "5" || s.Pending != "" {
		t.Errorf("Delivered = %d from %q, pending %q", len(s.Delivered), s.Delivered[0], s.Pending)
	}
}
