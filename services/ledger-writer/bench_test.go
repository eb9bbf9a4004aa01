package ledgerwriter

import (
	"fmt"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/rawbench"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
)

// BenchmarkLedger measures one event's round trip through the ledger, one in
// flight: "writer" publishes a gate answer to the inbox and waits until the
// ledger-writer has claimed it, written its comment to a zero-latency GitHub
// fake (limits and pacing off), recorded it and fanned it out; "raw" is the
// bare JetStream publish → consume → double-ack of a message of the same size
// on the same server. scripts/bench.sh reports writer as a ratio to raw.
func BenchmarkLedger(b *testing.B) {
	srv := bustest.StartServer(b, bustest.Options{InProcessOnly: true})
	topo := bus.DefaultTopology()
	srv.Provision(b, topo)
	run := 0
	nonce := func() string { run++; return fmt.Sprint(run) }

	b.Run("writer", func(b *testing.B) {
		gh := ghfake.New(b, ghfake.WithPrimaryLimit(0), ghfake.WithSecondaryLimits(0, 0))
		gh.AddRepo(testRepo)
		gh.AddToken(testToken, botLogin)
		gh.AddIssue(testRepo, "octocat", "bench", "")
		e := &env{t: b, srv: srv, gh: gh, cfg: testConfig(b), logs: &testkit.Logs{}, parts: topo.Partitions}
		e.pub = srv.Connect(b, "bench-publisher")
		done := make(chan struct{}, 1)
		e.start("bench-writer", WithPacing(0, 0), withHook(func(s step, _ string) error {
			if s == stepPublished {
				done <- struct{}{}
			}
			return nil
		}))
		prefix := "slack:EvBench-" + nonce() + "-"
		// Warm up: the runner binds its partitions, the HTTP client its
		// connection.
		e.publish(gateEv(prefix+"warm", "github:"+testRepo+"#1", "LGTM"))
		<-done
		b.ResetTimer()
		for i := 0; b.Loop(); i++ {
			e.publish(gateEv(fmt.Sprint(prefix, i), "github:"+testRepo+"#1", "LGTM"))
			<-done
		}
	})

	b.Run("raw", func(b *testing.B) {
		// The same bytes the writer's benchmark puts on the inbox.
		rawbench.RoundTripAt(b, srv.URL(), "RAW", []string{"raw.in.>"},
			"raw.in.key.gate.feedback", make([]byte, 420))
	})
}
