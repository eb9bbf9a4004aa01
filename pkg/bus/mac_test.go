package bus_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// TestReadersAuthenticators: a publication carries one authenticator per
// identity that consumes its stream, and a reader accepts a message on its
// own authenticator alone (here with the signature spoiled, so that nothing
// else can be what passes it). It refuses another reader's authenticator,
// any change to what the message says, and a type its signer may not raise;
// a stale authenticator falls back on the signature.
func TestReadersAuthenticators(t *testing.T) {
	t.Parallel()
	signers, set := identityKeys(t)
	spoil := func(h bus.Header) bus.Header {
		h = h.Clone()
		h.Set(bus.HeaderSignature, "AAAA")
		return h
	}
	check := func(reader string, subject string, h bus.Header, data []byte, msgID string, may bus.Policy) (string, error) {
		return set.Check(signers[reader], subject, h, data, msgID, may)
	}
	forged := func(t *testing.T, err error, reason string) {
		t.Helper()
		var fe *bus.ForgedError
		if !errors.As(err, &fe) || fe.Reason != reason {
			t.Fatalf("Check = %v, want a forged event (%s)", err, reason)
		}
	}

	in := gateMessage()
	if err := signers[bus.IdentityIngressSlack].Sign(&in, set); err != nil {
		t.Fatal(err)
	}
	if got := in.Header[bus.HeaderMAC]; len(got) != 1 || !strings.HasPrefix(got[0], bus.IdentityLedgerWriter+"=") {
		t.Fatalf("loop.in authenticators %q, want the ledger-writer's alone", got)
	}
	subject := stored(in.Subject, 2)
	if signer, err := check(bus.IdentityLedgerWriter, subject, spoil(in.Header), in.Data, in.MsgID, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
		t.Fatalf("the ledger-writer's own authenticator: %q %v", signer, err)
	}
	if _, err := set.Verify(subject, spoil(in.Header), in.Data, in.MsgID, bus.InboxPolicy); !bus.IsForged(err) {
		t.Fatalf("the spoiled signature verified: %v", err)
	}

	ev := gateMessage()
	ev.Subject = catalog.EventsSubject("github:octo/repo#7", catalog.GateFeedback)
	if err := signers[bus.IdentityLedgerWriter].Sign(&ev, set); err != nil {
		t.Fatal(err)
	}
	evSubject := stored(ev.Subject, 1)
	if got := ev.Header[bus.HeaderMAC]; len(got) != 2 {
		t.Fatalf("loop.ev authenticators %q, want the renderer's and the dispatcher's", got)
	}
	for _, reader := range []string{bus.IdentitySlackRenderer, bus.IdentityDispatcher} {
		if _, err := check(reader, evSubject, spoil(ev.Header), ev.Data, ev.MsgID, bus.EventsPolicy); err != nil {
			t.Fatalf("%s on its own authenticator: %v", reader, err)
		}
	}

	t.Run("another reader's authenticator", func(t *testing.T) {
		// The renderer's authenticator, presented as the dispatcher's: a
		// renderer's key reaches no other reader.
		h := spoil(ev.Header)
		var renderer string
		for _, v := range h[bus.HeaderMAC] {
			if strings.HasPrefix(v, bus.IdentitySlackRenderer+"=") {
				renderer = v
			}
		}
		h[bus.HeaderMAC] = []string{bus.IdentityDispatcher + strings.TrimPrefix(renderer, bus.IdentitySlackRenderer)}
		_, err := check(bus.IdentityDispatcher, evSubject, h, ev.Data, ev.MsgID, bus.EventsPolicy)
		forged(t, err, bus.ForgedBadSignature)
	})
	t.Run("what the message says, changed", func(t *testing.T) {
		for name, c := range map[string]struct {
			subject string
			header  func(bus.Header)
			data    []byte
		}{
			"subject": {subject: stored(catalog.InboxSubject("github:octo/repo#8", catalog.GateFeedback), 2)},
			"type":    {header: func(h bus.Header) { h.Set("ce-type", string(catalog.WorkItemReply)) }},
			"id":      {header: func(h bus.Header) { h.Set("ce-id", "slack:EvGate9") }},
			"body":    {data: []byte(`{"gate":"reject"}`)},
			"signer":  {header: func(h bus.Header) { h.Set(bus.HeaderSigner, bus.IdentityOperator) }},
		} {
			h, s, data := spoil(in.Header), subject, in.Data
			if c.subject != "" {
				s = c.subject
			}
			if c.header != nil {
				c.header(h)
			}
			if c.data != nil {
				data = c.data
			}
			if _, err := check(bus.IdentityLedgerWriter, s, h, data, in.MsgID, bus.InboxPolicy); !bus.IsForged(err) {
				t.Errorf("%s changed: %v, want refused", name, err)
			}
		}
	})
	t.Run("a type its signer may not raise", func(t *testing.T) {
		// The dispatcher's own key makes a valid authenticator for the
		// ledger-writer over a gate answer: still not the dispatcher's.
		m := gateMessage()
		if err := signers[bus.IdentityDispatcher].Sign(&m, set); err != nil {
			t.Fatal(err)
		}
		signer, err := check(bus.IdentityLedgerWriter, stored(m.Subject, 0), spoil(m.Header), m.Data, m.MsgID, bus.InboxPolicy)
		forged(t, err, bus.ForgedNotAllowed)
		if signer != bus.IdentityDispatcher {
			t.Fatalf("signer %q", signer)
		}
	})
	t.Run("a stale authenticator falls back on the signature", func(t *testing.T) {
		// The ledger-writer's key was replaced since the publisher
		// derived its authenticator: the signature still holds.
		rotated, _ := identityKeys(t)
		pubs := set.PublicKeys()
		pubs[bus.IdentityLedgerWriter] = rotated[bus.IdentityLedgerWriter].PublicKey()
		now, err := bus.NewSigners(pubs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := now.Check(rotated[bus.IdentityLedgerWriter], subject, in.Header, in.Data, in.MsgID, bus.InboxPolicy); err != nil {
			t.Fatalf("a stale authenticator with a good signature: %v", err)
		}
		_, err = now.Check(rotated[bus.IdentityLedgerWriter], subject, spoil(in.Header), in.Data, in.MsgID, bus.InboxPolicy)
		forged(t, err, bus.ForgedBadSignature)
	})
}
