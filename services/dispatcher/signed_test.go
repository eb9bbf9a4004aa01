package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestUnsignedEventsAreRefused: on a bus with identities the dispatcher acts
// only on what the ledger-writer signed on loop.ev. A person's control
// command stored there unsigned (a plain publish with the operator's power),
// or signed by another identity (the operator's own connection), is logged as
// bus.forged_event and dead-lettered; it pauses nothing. The same command
// from the ledger-writer is applied.
func TestUnsignedEventsAreRefused(t *testing.T) {
	e := newEnvOn(t, bustest.Options{InProcessOnly: true, Auth: true}, bus.IdentityDispatcher, nil)
	msg := func(ev *loopv1.Event) bus.Message {
		m, err := envelope.ToMessage(ev, envelope.Events, "")
		if err != nil {
			t.Fatal(err)
		}
		return bus.FromEnvelope(m)
	}
	const forgedRef, genuineRef = "github:octo/repo#1", "github:octo/repo#2"
	unsigned := msg(comment(forgedRef, 1001, alice, "the-loop pause"))
	e.srv.PublishRaw(t, unsigned.Subject, unsigned.Header, unsigned.Data)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.pub.Publish(ctx, msg(comment(forgedRef, 1002, alice, "the-loop pause"))); err != nil {
		t.Fatal(err)
	}
	e.waitRecord("bus.forged_event", map[string]any{"event_id": "gh:issue-comment:1001", "reason": bus.ForgedUnsigned})
	r := e.waitRecord("bus.forged_event", map[string]any{"event_id": "gh:issue-comment:1002", "reason": bus.ForgedNotAllowed, "signer": bus.IdentityOperator})
	t.Logf("refused: %v", r.Fields["detail"])

	lw := e.srv.ConnectAs(t, bus.IdentityLedgerWriter, "ledger-writer")
	if _, err := lw.Publish(ctx, msg(comment(genuineRef, 1003, alice, "the-loop pause"))); err != nil {
		t.Fatal(err)
	}
	e.waitRecord("control.command", map[string]any{"work_item": genuineRef, "command": "pause"})
	if got := e.recs.Find("control.command", map[string]any{"work_item": forgedRef}); len(got) != 0 {
		t.Fatalf("a forged control command was applied: %v", got)
	}
	dlq, err := e.pub.ListDLQ(ctx, 0)
	if err != nil || len(dlq) != 2 {
		t.Fatalf("dead letters: %d %v", len(dlq), err)
	}
}
