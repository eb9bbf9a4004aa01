package bus

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"fmt"
	"strings"

	"filippo.io/edwards25519"

	"github.com/the-loop/bus/pkg/catalog"
)

// Readers' authenticators (docs/decisions/110-readers-authenticators.md).
// An Ed25519 signature and its check cost this pipeline's CPU more than the
// rest of what the loop adds to an event, and every event is signed twice
// (the ingress, the ledger-writer's fan-out) and checked three times. So a
// publication carries instead one HMAC-SHA256 per identity that reads it —
// each consumer of its stream, and the operator, who replays dead letters —
// keyed by a secret only the publisher and that reader can derive: X25519
// between the two identities' NKeys (an Ed25519 key is also an X25519 key,
// RFC 7748 §4.1), through HKDF bound to both public keys and the direction.
// It authenticates the publisher to the reader as NaCl's box does its
// sender: no server-side path, and no third identity, can make one. A
// publisher that does not hold every reader's key yet (it has not loaded
// the signers) signs the message with Ed25519 instead, which every reader
// checks.

// HeaderMAC holds the publisher's authenticators, one value per reader:
// "<identity>=<base64 HMAC>". HeaderVouch holds the operator's, added by a
// replay after it checked the original (ReplayDLQ): a reader whose key
// changed since the original was published accepts the operator's word.
const (
	HeaderMAC   = "Loop-Mac"
	HeaderVouch = "Loop-Vouch"
)

// macContext binds a pair key to its use and its direction.
const macContext = "the-loop event authenticator v1\n"

// readersOf are the identities that read subject: the consumers of its
// stream and the operator, who checks what it replays.
func readersOf(subject string) []string {
	var stream string
	switch {
	case strings.HasPrefix(subject, catalog.InboxPrefix+"."):
		stream = StreamInbox
	case strings.HasPrefix(subject, catalog.EventsPrefix+"."):
		stream = StreamEvents
	default:
		return nil
	}
	out := []string{IdentityOperator}
	for _, id := range Identities() {
		if consumes[id] == stream {
			out = append(out, id)
		}
	}
	return out
}

// x25519Private is the X25519 key of an Ed25519 seed: the scalar Ed25519
// derives from it (the first half of its SHA-512, RFC 8032 §5.1.5), which
// X25519 clamps as Ed25519 does, so its public key is the Montgomery form of
// the Ed25519 one.
func x25519Private(seed []byte) (*ecdh.PrivateKey, error) {
	h := sha512.Sum512(seed)
	return ecdh.X25519().NewPrivateKey(h[:32])
}

// x25519Public is the Montgomery form of an Ed25519 public key.
func x25519Public(pub ed25519.PublicKey) (*ecdh.PublicKey, error) {
	p, err := new(edwards25519.Point).SetBytes(pub)
	if err != nil {
		return nil, fmt.Errorf("not an Ed25519 public key: %w", err)
	}
	return ecdh.X25519().NewPublicKey(p.BytesMontgomery())
}

// pairKey is the key of authenticators from the identity whose public NKey
// is from to the one whose public NKey is to, as s derives it: s is one of
// the two, peer the other's Ed25519 key. Derived once per pair and cached:
// an X25519 exchange costs as much as a signature.
func (s *Signer) pairKey(from, to string, peer ed25519.PublicKey) ([]byte, error) {
	cacheKey := from + "\n" + to
	s.mu.Lock()
	k, ok := s.pairs[cacheKey]
	s.mu.Unlock()
	if ok {
		return k, nil
	}
	px, err := x25519Public(peer)
	if err != nil {
		return nil, err
	}
	shared, err := s.x.ECDH(px)
	if err != nil {
		return nil, fmt.Errorf("bus: key exchange with %s: %w", peerOf(s.public, from, to), err)
	}
	k, err = hkdf.Key(sha256.New, shared, nil, macContext+from+"\n"+to, sha256.Size)
	if err != nil {
		return nil, fmt.Errorf("bus: pair key: %w", err)
	}
	s.mu.Lock()
	s.pairs[cacheKey] = k
	s.mu.Unlock()
	return k, nil
}

func peerOf(self, from, to string) string {
	if from == self {
		return to
	}
	return from
}

// macSize is an authenticator's length: HMAC-SHA256 truncated to 128 bits
// (RFC 2104 §5 allows half the hash and no less than 80 bits), which keeps
// forgery at one chance in 2^128 and the header that carries it short —
// every byte of it is stored, synced and delivered with each event.
const macSize = 16

func mac(key, signed []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(signed)
	return m.Sum(nil)[:macSize]
}

// authenticate sets in h, under key, an authenticator over signed for each
// reader of subject, from s. It reports whether keys knew every reader.
func (s *Signer) authenticate(h Header, key, subject string, signed []byte, keys *Signers) bool {
	h.Del(key)
	if keys == nil {
		return false
	}
	all := true
	for _, reader := range readersOf(subject) {
		if key == HeaderVouch && reader == IdentityOperator {
			continue
		}
		pub, raw, ok := keys.raw(reader)
		if !ok {
			all = false
			continue
		}
		k, err := s.pairKey(s.public, pub, raw)
		if err != nil {
			all = false
			continue
		}
		h.Add(key, reader+"="+base64.RawStdEncoding.EncodeToString(mac(k, signed)))
	}
	return all
}

// tagFor is reader's authenticator among values, if any.
func tagFor(values []string, reader string) string {
	for _, v := range values {
		if id, tag, ok := strings.Cut(v, "="); ok && id == reader {
			return tag
		}
	}
	return ""
}

// authentic reports whether values hold s's valid authenticator over signed
// from the identity whose public key is fromPub.
func (s *Signer) authentic(values []string, fromPub string, fromRaw ed25519.PublicKey, signed []byte) bool {
	tag := tagFor(values, s.identity)
	if tag == "" {
		return false
	}
	got, err := base64.RawStdEncoding.DecodeString(tag)
	if err != nil {
		return false
	}
	k, err := s.pairKey(fromPub, s.public, fromRaw)
	if err != nil {
		return false
	}
	return hmac.Equal(got, mac(k, signed))
}

// Check is a reader's check of a message: subject is the stored
// (partitioned) subject, h its headers, msgID its Nats-Msg-Id. The message
// must carry reader's valid authenticator from the identity it names as its
// signer, or the operator's for it (a replay's), or that identity's valid
// Ed25519 signature (Verify); and may must allow that identity the subject's
// type. It returns the signer, or a *ForgedError.
func (s *Signers) Check(reader *Signer, subject string, h Header, data []byte, msgID string, may Policy) (string, error) {
	signer := h.Get(HeaderSigner)
	if reader == nil || signer == "" || h.Get(HeaderSignature) != "" {
		return s.Verify(subject, h, data, msgID, may)
	}
	pub, raw, ok := s.raw(signer)
	if !ok {
		return signer, &ForgedError{Reason: ForgedUnknownSigner, Signer: signer, Detail: "not in the " + BucketSigners + " bucket"}
	}
	unp := unpartitioned(subject)
	signed := signedBytes(unp, eventID(h, msgID), h.Get(headerType), data)
	if reader.authentic(h[HeaderMAC], pub, raw, signed) {
		return signer, allowed(unp, signer, may)
	}
	if opPub, opRaw, ok := s.raw(IdentityOperator); ok && reader.authentic(h[HeaderVouch], opPub, opRaw, signed) {
		return signer, allowed(unp, signer, may)
	}
	if tagFor(h[HeaderMAC], reader.identity) == "" && tagFor(h[HeaderVouch], reader.identity) == "" {
		return signer, &ForgedError{Reason: ForgedUnsigned, Signer: signer, Detail: "no authenticator for " + reader.identity + " and no " + HeaderSignature}
	}
	return signer, &ForgedError{Reason: ForgedBadSignature, Signer: signer, Detail: "its authenticator for " + reader.identity + " does not verify over this subject, event id, type and body"}
}

// CheckDelivery is Check of a delivery.
func (s *Signers) CheckDelivery(reader *Signer, d *Delivery, may Policy) (string, error) {
	return s.Check(reader, d.Subject, d.Header, d.Data, d.MsgID, may)
}

// vouch sets m's operator authenticators (HeaderVouch) for its readers: what
// a replay adds to the original it checked (ReplayDLQ).
func (s *Signer) vouch(m *Message, keys *Signers) {
	signed := signedBytes(m.Subject, eventID(m.Header, m.MsgID), m.Header.Get(headerType), m.Data)
	s.authenticate(m.Header, HeaderVouch, m.Subject, signed, keys)
}
