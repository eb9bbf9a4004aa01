package graphstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/graph"
)

// TestStore: Mutate creates with the ref written into the state and
// compare-and-sets; another work item's state under a shared key is never
// read, nor overwritten, as this one.
func TestStore(t *testing.T) {
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	conn := srv.Connect(t, "graphstate-test")
	ctx := context.Background()
	s, err := Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := graph.NewRegistry().Get(graph.AdhocGraph)
	const ref = "github:octo/repo#5"
	if st, rev, err := s.Get(ctx, ref); st != nil || rev != 0 || err != nil {
		t.Fatalf("empty Get = %v %d %v", st, rev, err)
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := s.Mutate(ctx, ref, func(cur *graph.State) (*graph.State, error) {
		next, _, err := graph.New(g, "ignored", at)
		return next, err
	})
	if err != nil || st.Ref != ref || st.Current != "work" {
		t.Fatalf("create = %+v, %v", st, err)
	}
	if got, rev, err := s.Get(ctx, ref); err != nil || rev == 0 || got.Ref != ref || got.Current != "work" {
		t.Fatalf("Get after create = %+v %d %v", got, rev, err)
	}
	const other = "github:Octo/Repo#5"
	if Key(other) != Key(ref) {
		t.Fatalf("keys %q and %q differ; pick refs that collide", Key(other), Key(ref))
	}
	if _, _, err := s.Get(ctx, other); !errors.Is(err, ErrOtherRef) {
		t.Errorf("Get of a colliding ref = %v", err)
	}
	if _, err := s.Mutate(ctx, other, func(*graph.State) (*graph.State, error) {
		t.Error("Mutate offered another work item's state")
		return nil, ErrNoChange
	}); !errors.Is(err, ErrOtherRef) {
		t.Errorf("Mutate of a colliding ref = %v", err)
	}
}
