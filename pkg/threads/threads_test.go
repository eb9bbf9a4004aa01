package threads

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
)

func newStore(t *testing.T) (*Store, *bus.KV) {
	t.Helper()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	conn := srv.Connect(t, "threads-test")
	kv, err := conn.KV(context.Background(), bus.BucketThreads)
	if err != nil {
		t.Fatal(err)
	}
	return New(kv), kv
}

func TestBindLookup(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	if _, ok, err := s.Lookup(ctx, "C1", "1.1"); ok || err != nil {
		t.Fatalf("unbound thread: %v %v", ok, err)
	}
	if err := s.Bind(ctx, "C1", "1.1", "github:octo/repo#1"); err != nil {
		t.Fatal(err)
	}
	if err := s.Bind(ctx, "C1", "2.2", "github:octo/repo#1"); err != nil {
		t.Fatal(err)
	}
	if ref, ok, err := s.Lookup(ctx, "C1", "1.1"); !ok || err != nil || ref != "github:octo/repo#1" {
		t.Errorf("Lookup = %q %v %v", ref, ok, err)
	}
	if ts, ok, _ := s.ThreadFor(ctx, "C1", "github:octo/repo#1"); !ok || ts != "2.2" {
		t.Errorf("ThreadFor = %q %v, want the newest thread 2.2", ts, ok)
	}
	if _, ok, _ := s.ThreadFor(ctx, "C2", "github:octo/repo#1"); ok {
		t.Error("a binding leaked into another channel")
	}
	if err := s.Bind(ctx, "", "1", "x"); err == nil {
		t.Error("Bind accepted an empty channel")
	}
}

func TestCapForgetsOldest(t *testing.T) {
	ctx := context.Background()
	s, _ := newStore(t)
	s.cap = 5
	for i := range 7 {
		if err := s.Bind(ctx, "C1", fmt.Sprintf("%d.0", i), fmt.Sprintf("github:octo/repo#%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 7 {
		_, ok, err := s.Lookup(ctx, "C1", fmt.Sprintf("%d.0", i))
		if err != nil {
			t.Fatal(err)
		}
		if want := i >= 2; ok != want {
			t.Errorf("thread %d bound = %v, want %v", i, ok, want)
		}
		if _, ok, _ := s.ThreadFor(ctx, "C1", fmt.Sprintf("github:octo/repo#%d", i)); ok != (i >= 2) {
			t.Errorf("ref %d still points at a forgotten thread", i)
		}
	}
	// Rebinding an old thread moves it to newest, so it survives the next eviction.
	if err := s.Bind(ctx, "C1", "2.0", "github:octo/repo#2"); err != nil {
		t.Fatal(err)
	}
	if err := s.Bind(ctx, "C1", "7.0", "github:octo/repo#7"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Lookup(ctx, "C1", "2.0"); !ok {
		t.Error("a rebound thread was evicted")
	}
	if _, ok, _ := s.Lookup(ctx, "C1", "3.0"); ok {
		t.Error("the oldest thread was not evicted")
	}
}

func TestConcurrentBindersKeepEveryBinding(t *testing.T) {
	ctx := context.Background()
	s, kv := newStore(t)
	other := New(kv)
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		st := s
		if i%2 == 1 {
			st = other
		}
		wg.Go(func() { errs <- st.Bind(ctx, "C1", fmt.Sprintf("%d.0", i), fmt.Sprintf("github:o/r#%d", i)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	e, err := kv.Get(ctx, indexKey("C1"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if _, ok, _ := s.Lookup(ctx, "C1", fmt.Sprintf("%d.0", i)); !ok {
			t.Errorf("binding %d lost", i)
		}
	}
	if n := len(e.Value); n == 0 {
		t.Error("empty index")
	}
}
