package bus_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
)

func TestKVClaim(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	c := srv.Connect(t, "kv")
	ctx := context.Background()
	kv, err := c.KV(ctx, bus.BucketLedger)
	if err != nil {
		t.Fatal(err)
	}
	const id = "gh:72d3162e-cc78-11e3-81ab-4c9367dc0958" // ':' is not a NATS key byte
	if _, err := kv.Get(ctx, id); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
	rev, err := kv.Create(ctx, id, []byte("pending"))
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if _, err := kv.Create(ctx, id, []byte("pending")); !errors.Is(err, bus.ErrKeyExists) {
		t.Fatalf("second claim: %v, want ErrKeyExists", err)
	}
	if _, err := kv.Update(ctx, id, []byte("recorded"), rev+7); !errors.Is(err, bus.ErrWrongRevision) {
		t.Fatalf("update with a stale revision: %v, want ErrWrongRevision", err)
	}
	rev2, err := kv.Update(ctx, id, []byte("recorded:comment/1"), rev)
	if err != nil || rev2 <= rev {
		t.Fatalf("update: rev %d, %v", rev2, err)
	}
	if _, err := kv.Update(ctx, id, []byte("again"), rev); !errors.Is(err, bus.ErrWrongRevision) {
		t.Fatalf("update with the old revision: %v, want ErrWrongRevision", err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil || string(e.Value) != "recorded:comment/1" || e.Revision != rev2 || e.Key != id {
		t.Fatalf("Get = %+v, %v", e, err)
	}
	if _, err := kv.Update(ctx, "gh:missing", []byte("x"), 1); !errors.Is(err, bus.ErrWrongRevision) {
		t.Fatalf("update of a missing key: %v, want ErrWrongRevision", err)
	}
	if _, err := kv.Put(ctx, "slack:C1/1700000000.000100", []byte("ts")); err != nil {
		t.Fatal(err)
	}
	keys, err := kv.Keys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	if want := []string{id, "slack:C1/1700000000.000100"}; !slices.Equal(keys, want) {
		t.Fatalf("Keys = %q, want %q", keys, want)
	}
	if err := kv.Delete(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, id); !errors.Is(err, bus.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if _, err := kv.Create(ctx, id, []byte("pending again")); err != nil {
		t.Fatalf("claim after delete: %v", err)
	}
	if _, err := kv.Create(ctx, "", nil); err == nil {
		t.Fatal("empty key accepted")
	}
	// Keys that differ only in escaped bytes stay distinct.
	for _, k := range []string{"a.b", "a=2Eb", "a:b", "a_b"} {
		if _, err := kv.Create(ctx, k, []byte(k)); err != nil {
			t.Fatalf("create %q: %v", k, err)
		}
	}
	for _, k := range []string{"a.b", "a=2Eb", "a:b", "a_b"} {
		if e, err := kv.Get(ctx, k); err != nil || string(e.Value) != k {
			t.Fatalf("get %q = %q, %v", k, e.Value, err)
		}
	}
}

func TestKVConcurrentClaimHasOneWinner(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	ctx := context.Background()
	var wins, exists atomic.Int32
	var wg sync.WaitGroup
	for i := range 8 {
		c := srv.Connect(t, "kv-"+string(rune('a'+i)))
		kv, err := c.KV(ctx, bus.BucketLedger)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			_, err := kv.Create(ctx, "gh:race", []byte{byte(i)})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, bus.ErrKeyExists):
				exists.Add(1)
			default:
				t.Errorf("claim: %v", err)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || exists.Load() != 7 {
		t.Fatalf("%d claims won, %d saw ErrKeyExists; want 1 and 7", wins.Load(), exists.Load())
	}
}
