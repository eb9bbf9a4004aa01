package ledgerwriter

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/service"
)

// TestForgedInboxEventsAreRefused: on a bus with identities a gate answer
// that a server-side path stored on loop.in — a stream's RePublish rule set
// up with the operator's power, no publisher involved — is refused by its
// signature, whatever it carries: the dispatcher's signature over its own
// subject, the dispatcher's stolen seed signing the gate answer itself (the
// dispatcher may not raise one), or none. Each is logged as bus.forged_event,
// dead-lettered with the reason, and nothing is written to GitHub or fanned
// out. A gate answer ingress-slack published is recorded as ever.
func TestForgedInboxEventsAreRefused(t *testing.T) {
	t.Parallel()
	e := newEnvOn(t, bustest.Options{InProcessOnly: true, Auth: true}, testTopology())
	e.startWith("writer", func(d *service.Deps, _ *Config) {
		d.Conn = e.srv.ConnectAs(t, bus.IdentityLedgerWriter, "writer")
	})
	ref := "github:" + testRepo + "#3"
	path := e.srv.ServerSidePath(t, "ATTACK", "attack.*", catalog.InboxPrefix+".{{wildcard(1)}}."+string(catalog.GateFeedback))
	from := "attack." + catalog.SubjectKey(ref)
	stolen, err := bus.NewSigner(bus.IdentityDispatcher, e.srv.Seed(bus.IdentityDispatcher))
	if err != nil {
		t.Fatal(err)
	}
	// The signers set is readable by every service: the thief adds the
	// ledger-writer's authenticator too.
	keys, err := bus.NewSigners(e.srv.Signers(t))
	if err != nil {
		t.Fatal(err)
	}
	gate := func(id string) bus.Message {
		m, err := envelope.ToMessage(gateEv(id, ref, "approved"), envelope.Inbox, "")
		if err != nil {
			t.Fatal(err)
		}
		return bus.FromEnvelope(m)
	}

	// The dispatcher's signature over its own subject, moved by the path.
	moved := gate("slack:EvForged1")
	moved.Subject = catalog.InboxSubject(ref, catalog.DecisionPending)
	if err := stolen.Sign(&moved, keys); err != nil {
		t.Fatal(err)
	}
	path(from, moved.Header, moved.Data)
	// The stolen seed signing the gate answer as it is stored.
	signed := gate("slack:EvForged2")
	if err := stolen.Sign(&signed, keys); err != nil {
		t.Fatal(err)
	}
	path(from, signed.Header, signed.Data)
	// No signature at all.
	bare := gate("slack:EvForged3")
	path(from, bare.Header, bare.Data)

	testkit.WaitWithin(t, 15*time.Second, "three bus.forged_event records", func() bool {
		return len(e.logs.Events("bus.forged_event")) == 3
	})
	want := map[string]string{"slack:EvForged1": bus.ForgedBadSignature, "slack:EvForged2": bus.ForgedNotAllowed, "slack:EvForged3": bus.ForgedUnsigned}
	for _, r := range e.logs.Events("bus.forged_event") {
		id, _ := r["event_id"].(string)
		if r["reason"] != want[id] || r["event_type"] != string(catalog.GateFeedback) {
			t.Errorf("bus.forged_event %v, want reason %s", r, want[id])
		}
		t.Logf("refused %s (signer %q): %v — %v", id, r["signer"], r["reason"], r["detail"])
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var dlq []bus.DLQEntry
	testkit.WaitWithin(t, 10*time.Second, "three dead letters", func() bool {
		dlq, err = e.pub.ListDLQ(ctx, 0)
		return err == nil && len(dlq) == 3
	})
	for _, d := range dlq {
		if !strings.Contains(d.Reason, "forged event") {
			t.Errorf("dead letter %s: reason %q", d.CEID, d.Reason)
		}
	}
	if n := len(e.gh.Comments(testRepo, 3)); n != 0 {
		t.Fatalf("%d comments on the work item: a forged gate answer was recorded", n)
	}

	// The genuine answer, from the identity that raises it.
	slack := e.srv.ConnectAs(t, bus.IdentityIngressSlack, "ingress-slack")
	if _, err := slack.Publish(ctx, gate("slack:EvGenuine")); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 15*time.Second, "the genuine gate answer recorded", func() bool {
		return len(e.gh.Comments(testRepo, 3)) == 1
	})
	for _, r := range e.fan.all() {
		if strings.HasPrefix(r.ev.GetId(), "slack:EvForged") {
			t.Errorf("a forged event was fanned out: %s", r.ev.GetId())
		}
	}
}
