package bus_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// TestReadersAuthenticators: a publication carries, instead of a signature,
// one authenticator per identity that reads it (its stream's consumers and
// the operator), and each reader accepts it on its own. A reader refuses
// another reader's authenticator, any change to what the message says, a
// type its signer may not raise, and an authenticator made with a key it no
// longer has — unless the operator vouches for the message, as a replay
// does, and no one else can vouch. A publisher without every reader's key
// signs instead.
func TestReadersAuthenticators(t *testing.T) {
	t.Parallel()
	signers, set := identityKeys(t)
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
	readers := func(h bus.Header, key string) []string {
		var ids []string
		for _, v := range h[key] {
			id, _, _ := strings.Cut(v, "=")
			ids = append(ids, id)
		}
		slices.Sort(ids)
		return ids
	}

	in := gateMessage()
	if err := signers[bus.IdentityIngressSlack].Sign(&in, set); err != nil {
		t.Fatal(err)
	}
	if got, want := readers(in.Header, bus.HeaderMAC), []string{bus.IdentityLedgerWriter, bus.IdentityOperator}; !slices.Equal(got, want) || in.Header.Get(bus.HeaderSignature) != "" {
		t.Fatalf("loop.in: authenticators for %v and signature %q, want %v and none", got, in.Header.Get(bus.HeaderSignature), want)
	}
	subject := stored(in.Subject, 2)
	for _, reader := range []string{bus.IdentityLedgerWriter, bus.IdentityOperator} {
		if signer, err := check(reader, subject, in.Header, in.Data, in.MsgID, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
			t.Fatalf("%s on its own authenticator: %q %v", reader, signer, err)
		}
	}
	_, err := check(bus.IdentityDispatcher, subject, in.Header, in.Data, in.MsgID, bus.InboxPolicy)
	forged(t, err, bus.ForgedUnsigned)

	ev := gateMessage()
	ev.Subject = catalog.EventsSubject("github:octo/repo#7", catalog.GateFeedback)
	if err := signers[bus.IdentityLedgerWriter].Sign(&ev, set); err != nil {
		t.Fatal(err)
	}
	evSubject := stored(ev.Subject, 1)
	if got, want := readers(ev.Header, bus.HeaderMAC), []string{bus.IdentityDispatcher, bus.IdentityOperator, bus.IdentitySlackRenderer}; !slices.Equal(got, want) {
		t.Fatalf("loop.ev authenticators for %v, want %v", got, want)
	}
	for _, reader := range []string{bus.IdentitySlackRenderer, bus.IdentityDispatcher} {
		if _, err := check(reader, evSubject, ev.Header, ev.Data, ev.MsgID, bus.EventsPolicy); err != nil {
			t.Fatalf("%s on its own authenticator: %v", reader, err)
		}
	}

	t.Run("another reader's authenticator", func(t *testing.T) {
		// The renderer's authenticator, presented as the dispatcher's: a
		// renderer's key reaches no other reader.
		h := ev.Header.Clone()
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
			reason  string
		}{
			"subject": {subject: stored(catalog.InboxSubject("github:octo/repo#8", catalog.GateFeedback), 2), reason: bus.ForgedBadSignature},
			"type":    {header: func(h bus.Header) { h.Set("ce-type", string(catalog.WorkItemReply)) }, reason: bus.ForgedBadSignature},
			"id":      {header: func(h bus.Header) { h.Set("ce-id", "slack:EvGate9") }, reason: bus.ForgedBadSignature},
			"body":    {data: []byte(`{"gate":"reject"}`), reason: bus.ForgedBadSignature},
			"signer":  {header: func(h bus.Header) { h.Set(bus.HeaderSigner, bus.IdentityOperator) }, reason: bus.ForgedBadSignature},
			"unknown": {header: func(h bus.Header) { h.Set(bus.HeaderSigner, "mallory") }, reason: bus.ForgedUnknownSigner},
			"bare":    {header: func(h bus.Header) { delete(h, bus.HeaderMAC) }, reason: bus.ForgedUnsigned},
			"garbage": {header: func(h bus.Header) { h.Set(bus.HeaderMAC, bus.IdentityLedgerWriter+"=!!") }, reason: bus.ForgedBadSignature},
		} {
			h, s, data := in.Header.Clone(), subject, in.Data
			if c.subject != "" {
				s = c.subject
			}
			if c.header != nil {
				c.header(h)
			}
			if c.data != nil {
				data = c.data
			}
			_, err := check(bus.IdentityLedgerWriter, s, h, data, in.MsgID, bus.InboxPolicy)
			var fe *bus.ForgedError
			if !errors.As(err, &fe) || fe.Reason != c.reason {
				t.Errorf("%s changed: %v, want refused (%s)", name, err, c.reason)
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
		signer, err := check(bus.IdentityLedgerWriter, stored(m.Subject, 0), m.Header, m.Data, m.MsgID, bus.InboxPolicy)
		forged(t, err, bus.ForgedNotAllowed)
		if signer != bus.IdentityDispatcher {
			t.Fatalf("signer %q", signer)
		}
	})
	t.Run("a reader's key replaced, and the operator's word", func(t *testing.T) {
		// The ledger-writer's key was replaced since the message was
		// authenticated: it cannot check what was made for the old one.
		rotated, _ := identityKeys(t)
		lw := rotated[bus.IdentityLedgerWriter]
		pubs := set.PublicKeys()
		pubs[bus.IdentityLedgerWriter] = lw.PublicKey()
		now, err := bus.NewSigners(pubs)
		if err != nil {
			t.Fatal(err)
		}
		_, err = now.Check(lw, subject, in.Header, in.Data, in.MsgID, bus.InboxPolicy)
		forged(t, err, bus.ForgedBadSignature)
		// What a replay adds: the operator's authenticators over the same
		// message, beside the original's signer.
		vouched := func(by string) bus.Header {
			m := in
			if err := signers[by].Sign(&m, now); err != nil {
				t.Fatal(err)
			}
			h := in.Header.Clone()
			h[bus.HeaderVouch] = m.Header[bus.HeaderMAC]
			return h
		}
		if signer, err := now.Check(lw, subject, vouched(bus.IdentityOperator), in.Data, in.MsgID, bus.InboxPolicy); err != nil || signer != bus.IdentityIngressSlack {
			t.Fatalf("the operator's word for the original: %q %v", signer, err)
		}
		_, err = now.Check(lw, subject, vouched(bus.IdentityDispatcher), in.Data, in.MsgID, bus.InboxPolicy)
		forged(t, err, bus.ForgedBadSignature)
	})
	t.Run("a publisher without every reader's key signs", func(t *testing.T) {
		pubs := set.PublicKeys()
		delete(pubs, bus.IdentityOperator)
		partial, err := bus.NewSigners(pubs)
		if err != nil {
			t.Fatal(err)
		}
		m := gateMessage()
		if err := signers[bus.IdentityIngressSlack].Sign(&m, partial); err != nil {
			t.Fatal(err)
		}
		if m.Header.Get(bus.HeaderSignature) == "" || len(m.Header[bus.HeaderMAC]) != 0 {
			t.Fatalf("headers %v, want a signature and no authenticator", m.Header)
		}
		if _, err := check(bus.IdentityLedgerWriter, stored(m.Subject, 0), m.Header, m.Data, m.MsgID, bus.InboxPolicy); err != nil {
			t.Fatalf("the signature: %v", err)
		}
	})
}
