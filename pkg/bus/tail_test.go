package bus_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

func TestTailLog(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	c := srv.Connect(t, "log")
	ctx := context.Background()
	logRec := func(svc string, i int) {
		t.Helper()
		if err := c.PublishCore(bus.Message{Subject: catalog.LogSubject(svc, "bus.recorded"), Data: []byte(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 5 {
		logRec("ledger-writer", i)
		logRec("dispatcher", 100+i)
	}
	testkit.WaitWithin(t, 5*time.Second, "log stored", func() bool {
		st, err := c.StreamStats(ctx, bus.StreamLog)
		return err == nil && st.Msgs == 10
	})

	tail := func(opts bus.TailOptions, want int) ([]string, func(int)) {
		var mu sync.Mutex
		var got []string
		tctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- c.TailLog(tctx, opts, func(r bus.LogRecord) error {
				mu.Lock()
				defer mu.Unlock()
				got = append(got, string(r.Data))
				return nil
			})
		}()
		t.Cleanup(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("tail: %v", err)
			}
		})
		snapshot := func() []string {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), got...)
		}
		testkit.WaitWithin(t, 5*time.Second, "tail records", func() bool { return len(snapshot()) >= want })
		return snapshot(), func(n int) {
			testkit.WaitWithin(t, 5*time.Second, "followed records", func() bool { return len(snapshot()) >= n })
			got := snapshot()
			if len(got) != n {
				t.Fatalf("followed %v", got)
			}
		}
	}
	last3, _ := tail(bus.TailOptions{Last: 3}, 3)
	if fmt.Sprint(last3) != "[103 4 104]" {
		t.Fatalf("last 3 of the log = %v", last3)
	}
	ledger2, follow := tail(bus.TailOptions{Subject: "loop.log.ledger-writer.>", Last: 2}, 2)
	if fmt.Sprint(ledger2) != "[3 4]" {
		t.Fatalf("last 2 of ledger-writer = %v", ledger2)
	}
	logRec("ledger-writer", 5)
	logRec("dispatcher", 105)
	follow(3)

	// An error from fn ends the tail with it.
	boom := errors.New("stop")
	err := c.TailLog(ctx, bus.TailOptions{Last: 1}, func(bus.LogRecord) error { return boom })
	if !errors.Is(err, boom) {
		t.Fatalf("TailLog = %v, want the callback's error", err)
	}
}
