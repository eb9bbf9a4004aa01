package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// identityKeys issues a seed and a signer per identity, and the signers set
// of their public keys.
func identityKeys(t *testing.T) (map[string]*bus.Signer, *bus.Signers) {
	t.Helper()
	signers := map[string]*bus.Signer{}
	pubs := map[string]string{}
	for _, id := range bus.Identities() {
		seed, pub, err := bus.NewIdentityKey()
		if err != nil {
			t.Fatal(err)
		}
		s, err := bus.NewSigner(id, seed)
		if err != nil {
			t.Fatal(err)
		}
		if s.PublicKey() != pub {
			t.Fatalf("%s: signer's public key %s, issued %s", id, s.PublicKey(), pub)
		}
		signers[id], pubs[id] = s, pub
	}
	set, err := bus.NewSigners(pubs)
	if err != nil {
		t.Fatal(err)
	}
	return signers, set
}

// stored is the subject the inbox stores a publication on in partition p.
func stored(subject string, p int) string {
	prefix, rest, _ := strings.Cut(subject, ".")
	pre2, rest, _ := strings.Cut(rest, ".")
	return prefix + "." + pre2 + "." + string(rune('0'+p)) + "." + rest
}

func gateMessage() bus.Message {
	return bus.Message{
		Subject: catalog.InboxSubject("github:octo/repo#7", catalog.GateFeedback),
		Header:  bus.Header{"ce-id": {"slack:EvGate1"}, "ce-type": {string(catalog.GateFeedback)}, "ce-source": {"slack"}},
		Data:    []byte(`{"gate":"approve"}`),
		MsgID:   "slack:EvGate1",
	}
}

// TestSignatureCoversWhatTheConsumerActsOn: a signature verifies for the
// message as signed, and for nothing else: another subject, event id, type
// or body, another signer's name on it, a signer the bucket does not know, a
// type the signer may not raise, or no signature at all are each refused
// with the reason the event log records.
func TestSignatureCoversWhatTheConsumerActsOn(t *testing.T) {
	t.Parallel()
	signers, set := identityKeys(t)
	sign := func(identity string, m bus.Message) bus.Message {
		t.Helper()
		if err := signers[identity].Sign(&m, nil); err != nil {
			t.Fatal(err)
		}
		return m
	}
	good := sign(bus.IdentityIngressSlack, gateMessage())
	if signer, err := set.Verify(stored(good.Subject, 3), good.Header, good.Data, good.MsgID, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
		t.Fatalf("the message as signed: %q %v", signer, err)
	}
	// A replay's new Nats-Msg-Id: the signature covers the event id.
	if _, err := set.Verify(stored(good.Subject, 3), good.Header, good.Data, "slack:EvGate1:replay:9", bus.InboxPolicy); err != nil {
		t.Fatalf("under a replay's msg id: %v", err)
	}
	otherKeys, _ := identityKeys(t)
	cases := []struct {
		name    string
		subject string
		mutate  func(h bus.Header) ([]byte, bus.Header)
		policy  bus.Policy
		reason  string
	}{
		{"another subject (work item)", catalog.InboxSubject("github:octo/repo#8", catalog.GateFeedback), nil, bus.InboxPolicy, bus.ForgedBadSignature},
		{"another subject (type)", catalog.InboxSubject("github:octo/repo#7", catalog.WorkItemReply), nil, bus.InboxPolicy, bus.ForgedBadSignature},
		{"another type header", "", func(h bus.Header) ([]byte, bus.Header) {
			h.Set("ce-type", string(catalog.WorkItemReply))
			return nil, h
		}, bus.InboxPolicy, bus.ForgedBadSignature},
		{"another body", "", func(h bus.Header) ([]byte, bus.Header) {
			return []byte(`{"gate":"reject"}`), h
		}, bus.InboxPolicy, bus.ForgedBadSignature},
		{"another event id", "", func(h bus.Header) ([]byte, bus.Header) {
			h.Set("ce-id", "slack:EvGate2")
			return nil, h
		}, bus.InboxPolicy, bus.ForgedBadSignature},
		{"another signer's name", "", func(h bus.Header) ([]byte, bus.Header) {
			h.Set(bus.HeaderSigner, bus.IdentityOperator)
			return nil, h
		}, bus.InboxPolicy, bus.ForgedBadSignature},
		{"a signer the bucket does not know", "", func(h bus.Header) ([]byte, bus.Header) {
			h.Set(bus.HeaderSigner, "mallory")
			return nil, h
		}, bus.InboxPolicy, bus.ForgedUnknownSigner},
		{"unsigned", "", func(h bus.Header) ([]byte, bus.Header) {
			delete(h, bus.HeaderSigner)
			delete(h, bus.HeaderSignature)
			return nil, h
		}, bus.InboxPolicy, bus.ForgedUnsigned},
		{"not base64", "", func(h bus.Header) ([]byte, bus.Header) {
			h.Set(bus.HeaderSignature, "!!")
			return nil, h
		}, bus.InboxPolicy, bus.ForgedBadSignature},
		{"on loop.ev, by anyone but the ledger-writer", "", nil, bus.EventsPolicy, bus.ForgedNotAllowed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h, data, subject := good.Header.Clone(), good.Data, good.Subject
			if c.subject != "" {
				subject = c.subject
			}
			if c.mutate != nil {
				var d []byte
				if d, h = c.mutate(h); d != nil {
					data = d
				}
			}
			_, err := set.Verify(stored(subject, 3), h, data, good.MsgID, c.policy)
			var fe *bus.ForgedError
			if !errors.As(err, &fe) || fe.Reason != c.reason || !bus.IsForged(err) {
				t.Fatalf("Verify = %v, want a forged event (%s)", err, c.reason)
			}
		})
	}

	t.Run("signed with a key that is not the signer's", func(t *testing.T) {
		m := gateMessage()
		if err := otherKeys[bus.IdentityIngressSlack].Sign(&m, nil); err != nil {
			t.Fatal(err)
		}
		_, err := set.Verify(stored(m.Subject, 0), m.Header, m.Data, m.MsgID, bus.InboxPolicy)
		var fe *bus.ForgedError
		if !errors.As(err, &fe) || fe.Reason != bus.ForgedBadSignature {
			t.Fatalf("Verify = %v, want bad-signature", err)
		}
	})
	t.Run("a type its signer may not raise", func(t *testing.T) {
		// The dispatcher's own key, over a gate answer: valid, and
		// still not the dispatcher's to raise.
		m := sign(bus.IdentityDispatcher, gateMessage())
		_, err := set.Verify(stored(m.Subject, 0), m.Header, m.Data, m.MsgID, bus.InboxPolicy)
		var fe *bus.ForgedError
		if !errors.As(err, &fe) || fe.Reason != bus.ForgedNotAllowed || fe.Signer != bus.IdentityDispatcher {
			t.Fatalf("Verify = %v, want not-allowed for the dispatcher", err)
		}
	})
	t.Run("the operator raises any type on loop.in", func(t *testing.T) {
		m := sign(bus.IdentityOperator, gateMessage())
		if _, err := set.Verify(stored(m.Subject, 1), m.Header, m.Data, m.MsgID, bus.InboxPolicy); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("the ledger-writer on loop.ev", func(t *testing.T) {
		m := gateMessage()
		m.Subject = catalog.EventsSubject("github:octo/repo#7", catalog.GateFeedback)
		m = sign(bus.IdentityLedgerWriter, m)
		if _, err := set.Verify(stored(m.Subject, 1), m.Header, m.Data, m.MsgID, bus.EventsPolicy); err != nil {
			t.Fatal(err)
		}
		m.Header.Set(bus.HeaderSigner, bus.IdentityOperator)
		m = sign(bus.IdentityOperator, m)
		if _, err := set.Verify(stored(m.Subject, 1), m.Header, m.Data, m.MsgID, bus.EventsPolicy); !bus.IsForged(err) {
			t.Fatalf("the operator's own on loop.ev: %v, want refused", err)
		}
	})
}

// TestPublishSignsAndProvisionWritesSigners: on a bus with identities every
// publication on loop.in carries its connection's identity and signature,
// which verify against the signers bucket the operator's provisioning wrote;
// a service may read the bucket and not write it.
func TestPublishSignsAndProvisionWritesSigners(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	srv.Provision(t, bustest.FastTopology(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lw := srv.ConnectAs(t, bus.IdentityLedgerWriter, "lw")
	if !lw.Signing() || lw.Identity() != bus.IdentityLedgerWriter {
		t.Fatalf("ledger-writer connection: signing %v as %q", lw.Signing(), lw.Identity())
	}
	set, err := lw.WatchSigners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.PublicKeys(); len(got) != len(bus.Identities()) || got[bus.IdentityIngressSlack] != srv.Signers(t)[bus.IdentityIngressSlack] {
		t.Fatalf("signers %v", got)
	}
	kv, err := lw.KV(ctx, bus.BucketSigners)
	if err != nil {
		t.Fatal(err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	defer pcancel()
	if _, err := kv.Put(pctx, bus.IdentityIngressSlack, []byte(srv.Signers(t)[bus.IdentityDispatcher])); err == nil {
		t.Fatal("a service wrote the signers bucket")
	}

	slack := srv.ConnectAs(t, bus.IdentityIngressSlack, "slack")
	var got delivered
	runRunner(t, lw, fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, 2), got.handler())
	m := gateMessage()
	if _, err := slack.Publish(ctx, m); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 10*time.Second, "the gate answer delivered", func() bool { return len(got.get()) == 1 })
	d := got.get()[0]
	// Signed, or authenticated if the publisher had loaded the signers
	// (in the background) by then.
	if d.Header.Get(bus.HeaderSigner) != bus.IdentityIngressSlack || (d.Header.Get(bus.HeaderSignature) == "") == (d.Header.Get(bus.HeaderMAC) == "") {
		t.Fatalf("delivered headers %v", d.Header)
	}
	if signer, err := lw.CheckDelivery(set, d, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
		t.Fatalf("check the delivery: %q %v", signer, err)
	}
	// Once the publisher's connection has loaded the signers, its
	// publications carry authenticators — the ledger-writer's and the
	// operator's — and no signature: the ledger-writer's connection accepts
	// them, ingress-slack's (no reader of the inbox) does not.
	n := 0
	var mac *bus.Delivery
	testkit.WaitWithin(t, 10*time.Second, "a publication with the ledger-writer's authenticator", func() bool {
		for _, d := range got.get() {
			if d.Header.Get(bus.HeaderMAC) != "" {
				mac = d
				return true
			}
		}
		n++
		m := gateMessage()
		m.MsgID = fmt.Sprintf("slack:EvGateMac%d", n)
		m.Header.Set("ce-id", m.MsgID)
		if _, err := slack.Publish(ctx, m); err != nil {
			t.Fatal(err)
		}
		return false
	})
	if sig, macs := mac.Header.Get(bus.HeaderSignature), mac.Header[bus.HeaderMAC]; sig != "" || len(macs) != 2 {
		t.Fatalf("an authenticated publication: signature %q, authenticators %q", sig, macs)
	}
	if signer, err := lw.CheckDelivery(set, mac, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
		t.Fatalf("the ledger-writer's check of its authenticator: %q %v", signer, err)
	}
	if _, err := slack.CheckDelivery(set, mac, bus.InboxPolicy); !bus.IsForged(err) {
		t.Fatalf("ingress-slack's check of the ledger-writer's authenticator: %v, want refused", err)
	}

	// The operator provisions again with ingress-slack's key replaced and
	// the observer taken out: the watching set follows.
	_, newPub, err := bus.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	pubs := srv.Signers(t)
	pubs[bus.IdentityIngressSlack] = newPub
	delete(pubs, bus.IdentityObserver)
	topo := bustest.FastTopology(2)
	topo.Signers = pubs
	srv.Provision(t, topo)
	testkit.WaitWithin(t, 10*time.Second, "the watched signers updated", func() bool {
		got := set.PublicKeys()
		_, observer := got[bus.IdentityObserver]
		return got[bus.IdentityIngressSlack] == newPub && !observer
	})
	if _, err := lw.CheckDelivery(set, d, bus.InboxPolicy); !bus.IsForged(err) {
		t.Fatalf("a signature by the replaced key: %v, want refused", err)
	}
}

// TestServerSidePathIsRefusedBySignature: a stream's RePublish rule — set up
// with the operator's power, no publisher involved — stores on a work item's
// gate.feedback what the dispatcher signed for its own decision-pending: the
// inbox holds it as if published there, and its signature refuses it. The
// dispatcher's stolen seed signing the gate answer itself is refused too: the
// dispatcher may not raise it.
func TestServerSidePathIsRefusedBySignature(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	srv.Provision(t, bustest.FastTopology(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lw := srv.ConnectAs(t, bus.IdentityLedgerWriter, "lw")
	set, err := lw.WatchSigners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got delivered
	runRunner(t, lw, fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, 2), got.handler())

	ref := "github:octo/repo#7"
	path := srv.ServerSidePath(t, "ATTACK", "attack.*", catalog.InboxPrefix+".{{wildcard(1)}}."+string(catalog.GateFeedback))
	from := "attack." + catalog.SubjectKey(ref)

	stolen, err := bus.NewSigner(bus.IdentityDispatcher, srv.Seed(bus.IdentityDispatcher))
	if err != nil {
		t.Fatal(err)
	}
	// What the dispatcher signs for its own subject, moved by the path.
	own := gateMessage()
	own.Subject = catalog.InboxSubject(ref, catalog.DecisionPending)
	own.Header.Set("ce-type", string(catalog.DecisionPending))
	if err := stolen.Sign(&own, nil); err != nil {
		t.Fatal(err)
	}
	own.Header.Set("ce-type", string(catalog.GateFeedback))
	path(from, own.Header, own.Data)
	// The stolen seed signing the gate answer as it will be stored.
	forged := gateMessage()
	forged.Header.Set("ce-id", "slack:EvGate2")
	if err := stolen.Sign(&forged, nil); err != nil {
		t.Fatal(err)
	}
	path(from, forged.Header, forged.Data)

	testkit.WaitWithin(t, 10*time.Second, "both on the inbox", func() bool { return len(got.get()) == 2 })
	want := []string{bus.ForgedBadSignature, bus.ForgedNotAllowed}
	for i, d := range got.get() {
		if d.Type != catalog.GateFeedback {
			t.Fatalf("stored on %s", d.Subject)
		}
		_, err := lw.CheckDelivery(set, d, bus.InboxPolicy)
		var fe *bus.ForgedError
		if !errors.As(err, &fe) || fe.Reason != want[i] {
			t.Fatalf("message %d: %v, want %s", i, err, want[i])
		}
		t.Logf("stored on %s by a server-side path, refused: %v", d.Subject, err)
	}
}

// TestPlantedDeadLetterIsNotReplayed: a dead letter a consumer wrote of a
// signed message is replayed as the original, signature and all, never
// signed again; one planted on loop.dlq by an identity that may publish there
// (the dispatcher's seed, claiming a gate answer of loop.in), or whose
// original is unsigned, is refused naming why.
func TestPlantedDeadLetterIsNotReplayed(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	srv.Provision(t, bustest.FastTopology(2))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	op := srv.Connect(t, "operator")

	// A genuine dead letter: the ledger-writer's runner refuses a signed
	// gate answer for good.
	lw := srv.ConnectAs(t, bus.IdentityLedgerWriter, "lw")
	refuse := make(chan bool, 1)
	refuse <- true
	var got delivered
	runRunner(t, lw, fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, 2), bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		select {
		case <-refuse:
			return bus.Permanent(errors.New("404 not found"))
		default:
		}
		return got.handler().Handle(ctx, d)
	}))
	slack := srv.ConnectAs(t, bus.IdentityIngressSlack, "slack")
	if _, err := slack.Publish(ctx, gateMessage()); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 10*time.Second, "the dead letter", func() bool {
		entries, err := op.ListDLQ(ctx, 0)
		return err == nil && len(entries) == 1
	})
	entries, _ := op.ListDLQ(ctx, 0)
	genuine := entries[0]

	// Planted: copies on loop.dlq that name the inbox's ledger-writer
	// consumer and a gate answer. The dispatcher's grant lets it publish
	// there (dead letters of its own consumers), and its stolen seed signs
	// as the dispatcher; the ledger-writer's stolen seed signs a copy of
	// an original nobody signed; the operator's plain connection signs
	// nothing.
	disp := srv.ConnectAs(t, bus.IdentityDispatcher, "dispatcher")
	storedSubject := "loop.in.1." + catalog.SubjectKey("github:octo/repo#7") + ".gate.feedback"
	plant := func(id string, signer *bus.Signer, signOriginal bool) bus.Message {
		t.Helper()
		m := gateMessage()
		m.Header.Set("ce-id", id)
		if signOriginal {
			if err := signer.Sign(&m, nil); err != nil {
				t.Fatal(err)
			}
		}
		m.Header.Set(bus.HeaderDLQSubject, storedSubject)
		m.Header.Set(bus.HeaderDLQConsumer, "ledger-writer-p01")
		m.Header.Set(bus.HeaderDLQStream, bus.StreamInbox)
		m.Header.Set(bus.HeaderDLQMsgID, id)
		m.Subject = catalog.DLQPrefix + ".ledger-writer-p01." + storedSubject
		m.MsgID = "planted:" + id
		if signer != nil {
			if err := signer.SignDeadLetter(m.Subject, m.Header, m.Data); err != nil {
				t.Fatal(err)
			}
		}
		return m
	}
	dispSigner, err := bus.NewSigner(bus.IdentityDispatcher, srv.Seed(bus.IdentityDispatcher))
	if err != nil {
		t.Fatal(err)
	}
	lwSigner, err := bus.NewSigner(bus.IdentityLedgerWriter, srv.Seed(bus.IdentityLedgerWriter))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := disp.Publish(ctx, plant("slack:EvPlanted1", dispSigner, true)); err != nil {
		t.Fatalf("the dispatcher's publish on loop.dlq: %v", err)
	}
	if _, err := disp.Publish(ctx, plant("slack:EvPlanted2", lwSigner, false)); err != nil {
		t.Fatalf("the dispatcher's publish on loop.dlq: %v", err)
	}
	raw := plant("slack:EvPlanted3", nil, false)
	srv.PublishRaw(t, raw.Subject, raw.Header, raw.Data)
	testkit.WaitWithin(t, 10*time.Second, "the planted letters", func() bool {
		entries, err := op.ListDLQ(ctx, 0)
		return err == nil && len(entries) == 4
	})
	entries, _ = op.ListDLQ(ctx, 0)
	whys := []string{"which is not the consumer of LOOP_INBOX", "the original's signature: forged event (unsigned)", "the dead-letterer's signature: forged event (unsigned)"}
	for i, e := range entries[1:] {
		_, err := op.ReplayDLQ(ctx, e.Seq)
		if !errors.Is(err, bus.ErrReplayRefused) || !strings.Contains(err.Error(), whys[i]) {
			t.Fatalf("replay of planted dead letter %d: %v, want refused: %s", e.Seq, err, whys[i])
		}
		t.Logf("planted dead letter %d (%s) refused: %v", e.Seq, e.CEID, err)
	}
	if left, _ := op.ListDLQ(ctx, 0); len(left) != 4 {
		t.Fatalf("a refused replay removed a dead letter: %d left", len(left))
	}

	res, err := op.ReplayDLQ(ctx, genuine.Seq)
	if err != nil {
		t.Fatalf("replay of the genuine dead letter: %v", err)
	}
	testkit.WaitWithin(t, 10*time.Second, "the replayed original", func() bool { return len(got.get()) == 1 })
	d := got.get()[0]
	if d.MsgID != res.MsgID || d.Header.Get(bus.HeaderSigner) != bus.IdentityIngressSlack || d.Header.Get(bus.HeaderDLQSigner) != "" {
		t.Fatalf("replayed delivery: msg id %s, headers %v", d.MsgID, d.Header)
	}
	set, err := lw.LoadSigners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if signer, err := lw.CheckDelivery(set, d, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
		t.Fatalf("the replayed original's authenticator: %q %v", signer, err)
	}
	// The operator's word beside it, which alone passes the ledger-writer's
	// check (a reader whose key changed since has only that), for the
	// original's signer.
	vouched := &bus.Delivery{Subject: d.Subject, Header: d.Header.Clone(), Data: d.Data, MsgID: d.MsgID}
	delete(vouched.Header, bus.HeaderMAC)
	delete(vouched.Header, bus.HeaderSignature)
	if signer, err := lw.CheckDelivery(set, vouched, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
		t.Fatalf("the replay's vouching (%q): %q %v", vouched.Header[bus.HeaderVouch], signer, err)
	}
}

// BenchmarkSignature is one event's signing and checking, as the publisher
// and a reader do it (a 1 KiB body): the Ed25519 signature (a publisher
// without the signers yet) and its check, and the readers' authenticators (a
// publisher's) and one reader's check of its own.
func BenchmarkSignature(b *testing.B) {
	keys := map[string]*bus.Signer{}
	pubs := map[string]string{}
	for _, id := range []string{bus.IdentityIngressSlack, bus.IdentityLedgerWriter, bus.IdentityOperator} {
		seed, pub, err := bus.NewIdentityKey()
		if err != nil {
			b.Fatal(err)
		}
		if keys[id], err = bus.NewSigner(id, seed); err != nil {
			b.Fatal(err)
		}
		pubs[id] = pub
	}
	s, reader := keys[bus.IdentityIngressSlack], keys[bus.IdentityLedgerWriter]
	set, err := bus.NewSigners(pubs)
	if err != nil {
		b.Fatal(err)
	}
	m := gateMessage()
	m.Data = make([]byte, 1024)
	signed, authenticated := m, m
	if err := s.Sign(&signed, nil); err != nil {
		b.Fatal(err)
	}
	if err := s.Sign(&authenticated, set); err != nil {
		b.Fatal(err)
	}
	subject := stored(m.Subject, 3)
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"sign", func() error { c := m; return s.Sign(&c, nil) }},
		{"verify", func() error {
			_, err := set.Verify(subject, signed.Header, signed.Data, signed.MsgID, bus.InboxPolicy)
			return err
		}},
		{"authenticate", func() error { c := m; return s.Sign(&c, set) }},
		{"check", func() error {
			_, err := set.Check(reader, subject, authenticated.Header, authenticated.Data, authenticated.MsgID, bus.InboxPolicy)
			return err
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
