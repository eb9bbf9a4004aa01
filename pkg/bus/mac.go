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
)

// Readers' authenticators (docs/decisions/110-readers-authenticators.md).
// An Ed25519 check costs this pipeline's CPU more than the rest of an
// event's verification path together, and every event is checked by the
// ledger-writer and then, fanned out, by the renderer and the dispatcher. So
// besides its signature, a message carries one HMAC-SHA256 per identity that
// consumes its stream, keyed by a secret only the publisher and that reader
// can derive: X25519 between the two identities' NKeys (an Ed25519 key is
// also an X25519 key, RFC 7748 §4.1), through HKDF bound to both public keys
// and the direction. A consumer checks its own authenticator, which proves
// what the signature proves to it — no server-side path, and no third
// identity, can make one — for an HMAC's cost; the signature stays for what
// others check (a replay, an audit), and for the consumer when its
// authenticator is missing or stale.

// HeaderMAC holds the readers' authenticators, one value per reader:
// "<identity>=<base64 HMAC>".
const HeaderMAC = "Loop-Mac"

// macContext binds a pair key to its use and its direction.
const macContext = "the-loop event authenticator v1\n"

// readersOf are the identities that consume subject's stream: those a
// publication there carries an authenticator for.
func readersOf(subject string) []string {
	var stream string
	switch {
	case strings.HasPrefix(subject, "loop.in."):
		stream = StreamInbox
	case strings.HasPrefix(subject, "loop.ev."):
		stream = StreamEvents
	default:
		return nil
	}
	var out []string
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

// authenticate adds to h an authenticator over signed for each reader of
// subject that keys knows.
func (s *Signer) authenticate(h Header, subject string, signed []byte, keys *Signers) {
	h.Del(HeaderMAC)
	if keys == nil {
		return
	}
	for _, reader := range readersOf(subject) {
		pub, raw, ok := keys.raw(reader)
		if !ok {
			continue
		}
		k, err := s.pairKey(s.public, pub, raw)
		if err != nil {
			// The reader falls back on the signature.
			continue
		}
		h.Add(HeaderMAC, reader+"="+base64.RawStdEncoding.EncodeToString(mac(k, signed)))
	}
}

// macFor is reader's authenticator in h, if any.
func macFor(h Header, reader string) string {
	for _, v := range h[HeaderMAC] {
		if id, tag, ok := strings.Cut(v, "="); ok && id == reader {
			return tag
		}
	}
	return ""
}

// authentic reports whether h carries s's valid authenticator over
// signed from the identity whose public key is signerPub.
func (s *Signer) authentic(h Header, signerPub string, signerRaw ed25519.PublicKey, signed []byte) bool {
	tag := macFor(h, s.identity)
	if tag == "" {
		return false
	}
	got, err := base64.RawStdEncoding.DecodeString(tag)
	if err != nil {
		return false
	}
	k, err := s.pairKey(signerPub, s.public, signerRaw)
	if err != nil {
		return false
	}
	return hmac.Equal(got, mac(k, signed))
}

// Check is a consumer's check of a message it reads as reader: subject is
// the stored (partitioned) subject, h its headers, msgID its Nats-Msg-Id.
// The message must carry reader's valid authenticator from the identity it
// names as its signer — or, failing that, that identity's valid signature
// (Verify) — and may must allow that identity the subject's type. It returns
// the signer, or a *ForgedError.
func (s *Signers) Check(reader *Signer, subject string, h Header, data []byte, msgID string, may Policy) (string, error) {
	signer := h.Get(HeaderSigner)
	if reader != nil && signer != "" && macFor(h, reader.identity) != "" {
		if pub, raw, ok := s.raw(signer); ok {
			unp := unpartitioned(subject)
			if reader.authentic(h, pub, raw, signedBytes(unp, eventID(h, msgID), h.Get(headerType), data)) {
				return signer, allowed(unp, signer, may)
			}
		}
	}
	return s.Verify(subject, h, data, msgID, may)
}

// CheckDelivery is Check of a delivery.
func (s *Signers) CheckDelivery(reader *Signer, d *Delivery, may Policy) (string, error) {
	return s.Check(reader, d.Subject, d.Header, d.Data, d.MsgID, may)
}
