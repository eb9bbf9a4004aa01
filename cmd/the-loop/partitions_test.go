package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// TestPartitionsVerb: two ledger-writer replicas share four partitions, and
// `the-loop partitions` shows each with its half, the services without
// replicas, and what is pending.
func TestPartitionsVerb(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(4))
	var runners []*bus.Runner
	for _, name := range []string{"writer-a", "writer-b"} {
		conn := srv.Connect(t, name)
		r, err := conn.NewRunner(bus.ConsumerSpec{Service: bus.ServiceLedgerWriter, Stream: bus.StreamInbox, Partitions: 4, Member: name, Concurrency: 3},
			bus.HandlerFunc(func(context.Context, *bus.Delivery) error { return nil }))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
		runners = append(runners, r)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !(runners[0].Settled() && runners[1].Settled() && len(runners[0].Owned()) == 2 && len(runners[1].Owned()) == 2) {
		if time.Now().After(deadline) {
			t.Fatal("the two replicas did not settle on two partitions each")
		}
		time.Sleep(10 * time.Millisecond)
	}
	env := config.Env{"LOOP_NATS_URL": srv.URL(), "LOOP_PARTITIONS": "4"}
	var out, stderr string
	var code int
	for time.Now().Before(deadline) {
		code, out, stderr = runVerb(t, env, "partitions")
		if code == 0 && strings.Count(out, " 2/4 ") == 2 {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, want := range []string{
		"ledger-writer on LOOP_INBOX: 4 partitions, 0 message(s) pending, 2 replica(s)",
		"writer-a", "writer-b", runners[0].Member(), runners[1].Member(),
		"dispatcher on LOOP_EVENTS: 4 partitions, 0 message(s) pending, 0 replica(s)",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("partitions: exit %d, output lacks %q:\n%s%s", code, want, out, stderr)
		}
	}
	if strings.Count(out, " 2/4 ") != 2 {
		t.Fatalf("partitions: want each replica with 2/4:\n%s", out)
	}
}

func TestRanges(t *testing.T) {
	for _, c := range []struct {
		in   []int
		want string
	}{{nil, "-"}, {[]int{3}, "3"}, {[]int{0, 1, 2, 3, 7, 9, 10}, "0-3 7 9-10"}} {
		if got := ranges(c.in); got != c.want {
			t.Errorf("ranges(%v) = %q, want %q", c.in, got, c.want)
		}
	}
}
