package slackrenderer

import (
	"context"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
)

// TestUnsignedEventsAreRefused: on a bus with identities the renderer posts
// only what the ledger-writer signed on loop.ev. An event stored there
// unsigned (a plain publish with the operator's power) or signed by another
// identity (the operator's own connection) is logged as bus.forged_event,
// dead-lettered and never posted.
func TestUnsignedEventsAreRefused(t *testing.T) {
	e := newEnvOn(t, bustest.Options{InProcessOnly: true, Auth: true}, partitions)
	e.setSlack(func(s *config.SlackChannel) { s.Subscribe = []catalog.Type{catalog.SessionAwaitingInput} })
	e.start(startOpts{identity: bus.IdentitySlackRenderer})
	msg := func(id string) bus.Message {
		m, err := envelope.ToMessage(ask(id, workItem, "which way?"), envelope.Events, "")
		if err != nil {
			t.Fatal(err)
		}
		return bus.FromEnvelope(m)
	}
	unsigned := msg("loop:unsigned")
	e.srv.PublishRaw(t, unsigned.Subject, unsigned.Header, unsigned.Data)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.pub.Publish(ctx, msg("loop:operator-signed")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, waitLong, "two bus.forged_event records", func() bool {
		return len(e.recs.Find("bus.forged_event", nil)) == 2
	})
	for _, r := range e.recs.Find("bus.forged_event", nil) {
		t.Logf("refused %v: %v (%v)", r.Fields["event_id"], r.Fields["reason"], r.Fields["detail"])
	}
	if got := e.recs.Find("bus.forged_event", map[string]any{"event_id": "loop:unsigned", "reason": bus.ForgedUnsigned}); len(got) != 1 {
		t.Errorf("the unsigned event: %v", e.recs.Find("bus.forged_event", nil))
	}
	if got := e.recs.Find("bus.forged_event", map[string]any{"event_id": "loop:operator-signed", "reason": bus.ForgedNotAllowed}); len(got) != 1 {
		t.Errorf("the operator's event: %v", e.recs.Find("bus.forged_event", nil))
	}

	// The ledger-writer's own fan-out is posted.
	lw := e.srv.ConnectAs(t, bus.IdentityLedgerWriter, "ledger-writer")
	if _, err := lw.Publish(ctx, msg("loop:recorded")); err != nil {
		t.Fatal(err)
	}
	e.fake.Wait(t, waitLong, "the recorded event posted", func() bool { return len(e.fake.Messages(testChannel)) == 1 })
	if id := eventIDOf(e.fake.Messages(testChannel)[0]); id != "loop:recorded" {
		t.Fatalf("posted %s", id)
	}
	dlq, err := e.pub.ListDLQ(ctx, 0)
	if err != nil || len(dlq) != 2 {
		t.Fatalf("dead letters: %d %v", len(dlq), err)
	}
}
