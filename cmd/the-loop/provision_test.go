package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
)

// TestServeWaitsForThePartitionCount: streams provisioned with another
// partition count than the service runs with keep it waiting, saying which
// count the streams have and which it runs with; provisioning with its count
// (the operator's `provision`) lets it start.
func TestServeWaitsForThePartitionCount(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	env := config.Env{
		"LOOP_NATS_URL":     srv.URL(),
		"LOOP_ADMIN_ADDR":   "127.0.0.1:0",
		"LOOP_ENVELOPE_KEY": strings.Repeat("k", 32),
		"LOOP_GITHUB_TOKEN": "ghp_not_a_real_token_0123456789",
		"LOOP_PARTITIONS":   "4",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "ledger-writer"}, env, &out, &errb) }()
	testkit.WaitWithin(t, 20*time.Second, "the service to name both partition counts", func() bool {
		s := errb.String()
		return strings.Contains(s, "another partition count") && strings.Contains(s, "LOOP_INBOX has 2 partitions") &&
			strings.Contains(s, "runs with 4 (LOOP_PARTITIONS)")
	})
	if adminRE.MatchString(out.String()) {
		t.Fatalf("serving with the wrong partition count:\n%s", out.String())
	}
	if code, pout, perr := runVerb(t, config.Env{"LOOP_NATS_URL": srv.URL(), "LOOP_PARTITIONS": "4"}, "provision"); code != 0 || !strings.Contains(pout, "4 partitions") {
		t.Fatalf("provision with 4 partitions: exit %d\n%s\n%s", code, pout, perr)
	}
	waitReady(t, adminURL(t, &out))
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop")
	}
}
