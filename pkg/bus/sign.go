package bus

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/nats-io/nkeys"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
)

// Signed events (docs/decisions/099-signed-events.md). NATS permissions say
// who may publish on a subject, but not who wrote what the stream stores: a
// server-side path (a stream's RePublish, a subject transform, a mirror, a
// replay) stores messages nobody published there. So every message a
// service publishes on loop.in and loop.ev carries its identity's Ed25519
// signature (the NKey it connects with) over what the consumer acts on: the
// subject, the event id, the type and the body's digest. The consumers check
// it against the public keys the operator wrote in BucketSigners, and check
// that the signer may raise the type.

// Signature headers. Not under Nats- (the server's) nor Loop-Dlq- (which a
// replay strips): they travel with the event, through the DLQ and back.
const (
	// HeaderSigner names the identity that signed the message.
	HeaderSigner = "Loop-Signer"
	// HeaderSignature is its Ed25519 signature, standard base64.
	HeaderSignature = "Loop-Signature"
	// HeaderDLQSigner and HeaderDLQSignature are the dead-letterer's: over
	// the DLQ subject and the original message's digest (deadLetterDigest).
	HeaderDLQSigner    = "Loop-Dlq-Signer"
	HeaderDLQSignature = "Loop-Dlq-Signature"
)

// BucketSigners maps each bus identity to its public NKey. Only the operator
// writes it, when it provisions (Topology.Signers); every service reads it.
const BucketSigners = "signers"

// signingContext separates our signatures from anything else the same key
// signs (the server's connect nonce).
const (
	signingContext    = "the-loop signed event v1\n"
	dlqSigningContext = "the-loop dead letter v1\n"
)

// Refusal reasons of a signature check (ForgedError.Reason), as the event
// log records them.
const (
	ForgedUnsigned      = "unsigned"
	ForgedUnknownSigner = "unknown-signer"
	ForgedBadSignature  = "bad-signature"
	ForgedNotAllowed    = "not-allowed"
)

// ForgedError is a message whose signature does not make it its signer's:
// missing, by an identity the signers bucket does not know, not valid over
// what the message says, or by an identity that may not raise its type.
type ForgedError struct {
	Reason string // one of the Forged* reasons
	Signer string // the identity the message names, if any
	Detail string
}

func (e *ForgedError) Error() string {
	s := "forged event (" + e.Reason + ")"
	if e.Signer != "" {
		s += ", signer " + e.Signer
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// IsForged reports whether err is (or wraps) a *ForgedError.
func IsForged(err error) bool {
	var fe *ForgedError
	return errors.As(err, &fe)
}

// Signer signs as one bus identity with its NKey.
type Signer struct {
	identity string
	public   string
	// priv is the NKey's Ed25519 key, derived once: nkeys derives it
	// again from the seed for every signature, which costs as much as the
	// signature itself.
	priv ed25519.PrivateKey
	// x is the same key for X25519, and pairs the authenticator keys it
	// derived with each peer (mac.go).
	x     *ecdh.PrivateKey
	mu    sync.Mutex
	pairs map[string][]byte
}

// NewSigner returns the signer of identity from its NKey user seed.
func NewSigner(identity string, seed []byte) (*Signer, error) {
	kp, err := userSeed(seed)
	if err != nil {
		return nil, fmt.Errorf("bus: signer %s: %w", identity, err)
	}
	return newSigner(identity, kp)
}

func newSigner(identity string, kp nkeys.KeyPair) (*Signer, error) {
	seed, err := kp.Seed()
	if err != nil {
		return nil, fmt.Errorf("bus: signer %s: not a seed", identity)
	}
	_, raw, err := nkeys.DecodeSeed(seed)
	if err != nil || len(raw) != ed25519.SeedSize {
		return nil, fmt.Errorf("bus: signer %s: not a valid seed", identity)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("bus: signer %s: %w", identity, err)
	}
	x, err := x25519Private(raw)
	if err != nil {
		return nil, fmt.Errorf("bus: signer %s: %w", identity, err)
	}
	return &Signer{identity: identity, public: pub, priv: ed25519.NewKeyFromSeed(raw), x: x, pairs: map[string][]byte{}}, nil
}

// Identity is the identity the signer signs as.
func (s *Signer) Identity() string { return s.identity }

// PublicKey is the signer's public NKey.
func (s *Signer) PublicKey() string { return s.public }

// sign is the Ed25519 signature of b, as the NKey signs (nkeys.KeyPair.Sign).
func (s *Signer) sign(b []byte) []byte { return ed25519.Sign(s.priv, b) }

// eventID is the event id a signature covers: the event's own id (ce-id),
// which a replay keeps while it gives the message a new Nats-Msg-Id; a
// message without one is signed over its Nats-Msg-Id.
func eventID(h Header, msgID string) string {
	if id := h.Get(envelope.HeaderID); id != "" {
		return id
	}
	return msgID
}

// signedBytes is what a signature covers: the un-partitioned subject, the
// event id, the type header and the body's SHA-256, each on its own line
// (none of them holds a newline: subjects and header values cannot).
func signedBytes(subject, id, typ string, data []byte) []byte {
	sum := sha256.Sum256(data)
	var b strings.Builder
	b.Grow(len(signingContext) + len(subject) + len(id) + len(typ) + 3 + 2*len(sum))
	b.WriteString(signingContext)
	b.WriteString(subject)
	b.WriteByte('\n')
	b.WriteString(id)
	b.WriteByte('\n')
	b.WriteString(typ)
	b.WriteByte('\n')
	b.WriteString(hex.EncodeToString(sum[:]))
	return []byte(b.String())
}

// headerType is the event type's header, which a signature covers.
const headerType = envelope.HeaderType

// Sign sets m's signer and its authenticators for each identity that reads
// it (mac.go), from keys (the signers set): m.Subject must be the
// un-partitioned subject it is published to. When keys does not know every
// reader (a nil keys knows none), m is signed with Ed25519 instead, which
// every reader checks. m.Header is replaced by a copy.
func (s *Signer) Sign(m *Message, keys *Signers) error {
	signed := signedBytes(m.Subject, eventID(m.Header, m.MsgID), m.Header.Get(headerType), m.Data)
	h := m.Header.Clone()
	if h == nil {
		h = Header{}
	}
	h.Set(HeaderSigner, s.identity)
	h.Del(HeaderSignature)
	h.Del(HeaderVouch)
	if !s.authenticate(h, HeaderMAC, m.Subject, signed, keys) {
		h.Del(HeaderMAC)
		h.Set(HeaderSignature, base64.StdEncoding.EncodeToString(s.sign(signed)))
	}
	m.Header = h
	return nil
}

// Policy says whether identity may raise type t on a stream: nil, or why not.
type Policy func(identity string, t catalog.Type) error

// InboxPolicy is loop.in's: a service raises only its InboxTypes; the
// operator any type (a session control, a replay is the original's own).
func InboxPolicy(identity string, t catalog.Type) error {
	if identity == IdentityOperator || slices.Contains(InboxTypes[identity], t) {
		return nil
	}
	return fmt.Errorf("%s may not raise %s", identity, t)
}

// EventsPolicy is loop.ev's: only the ledger-writer publishes recorded
// events.
func EventsPolicy(identity string, t catalog.Type) error {
	if identity == IdentityLedgerWriter {
		return nil
	}
	return fmt.Errorf("%s may not publish %s on %s (only %s does)", identity, t, catalog.EventsPrefix, IdentityLedgerWriter)
}

// PolicyFor is the policy of a partitioned stream's messages.
func PolicyFor(stream string) (Policy, error) {
	switch stream {
	case StreamInbox:
		return InboxPolicy, nil
	case StreamEvents:
		return EventsPolicy, nil
	}
	return nil, fmt.Errorf("bus: %q is not a partitioned stream", stream)
}

// Signers is the public key of every identity, as BucketSigners holds it:
// what a signature is checked against. Safe for concurrent use.
type Signers struct {
	mu   sync.RWMutex
	keys map[string]nkeys.KeyPair
	pubs map[string]string
	raws map[string]ed25519.PublicKey
}

// NewSigners returns the signers of pubs (identity → public NKey). A key
// that is not a user's public NKey is an error.
func NewSigners(pubs map[string]string) (*Signers, error) {
	s := &Signers{keys: map[string]nkeys.KeyPair{}, pubs: map[string]string{}, raws: map[string]ed25519.PublicKey{}}
	for id, pub := range pubs {
		if err := s.set(id, pub); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *Signers) set(identity, pub string) error {
	if !nkeys.IsValidPublicUserKey(pub) {
		return fmt.Errorf("bus: signer %s: not a public user NKey", identity)
	}
	kp, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return fmt.Errorf("bus: signer %s: %w", identity, err)
	}
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(pub))
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return fmt.Errorf("bus: signer %s: not a public user NKey", identity)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[identity], s.pubs[identity], s.raws[identity] = kp, pub, ed25519.PublicKey(raw)
	return nil
}

func (s *Signers) remove(identity string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.keys, identity)
	delete(s.pubs, identity)
	delete(s.raws, identity)
}

// Len is how many identities the set knows.
func (s *Signers) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.keys)
}

// PublicKeys returns a copy of the set, identity → public NKey.
func (s *Signers) PublicKeys() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]string, len(s.pubs))
	for k, v := range s.pubs {
		out[k] = v
	}
	return out
}

func (s *Signers) key(identity string) (nkeys.KeyPair, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	kp, ok := s.keys[identity]
	return kp, ok
}

// raw is identity's public NKey and its Ed25519 key.
func (s *Signers) raw(identity string) (string, ed25519.PublicKey, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	raw, ok := s.raws[identity]
	return s.pubs[identity], raw, ok
}

// checkSig verifies a base64 signature by identity over signed.
func (s *Signers) checkSig(identity, sig string, signed []byte) error {
	if identity == "" || sig == "" {
		return &ForgedError{Reason: ForgedUnsigned, Signer: identity, Detail: "no " + HeaderSigner + " and " + HeaderSignature}
	}
	kp, ok := s.key(identity)
	if !ok {
		return &ForgedError{Reason: ForgedUnknownSigner, Signer: identity, Detail: "not in the " + BucketSigners + " bucket"}
	}
	raw, err := base64.StdEncoding.DecodeString(sig)
	if err != nil || kp.Verify(signed, raw) != nil {
		return &ForgedError{Reason: ForgedBadSignature, Signer: identity, Detail: "the signature does not verify over this subject, event id, type and body"}
	}
	return nil
}

// Verify checks a message as its consumer receives it: subject is the stored
// (partitioned) subject, whose un-partitioned form was signed, h its headers, msgID its
// Nats-Msg-Id. The signature must be valid by the identity it names, over
// what the message says, and may must allow that identity the subject's
// type. It returns the signer, or a *ForgedError.
func (s *Signers) Verify(subject string, h Header, data []byte, msgID string, may Policy) (string, error) {
	subject = unpartitioned(subject)
	signer := h.Get(HeaderSigner)
	if err := s.checkSig(signer, h.Get(HeaderSignature), signedBytes(subject, eventID(h, msgID), h.Get(headerType), data)); err != nil {
		return signer, err
	}
	return signer, allowed(subject, signer, may)
}

// allowed: may allows signer the type of the un-partitioned subject.
func allowed(subject, signer string, may Policy) error {
	_, _, _, typ, ok := catalog.ParseSubject(subject, false)
	if !ok {
		return &ForgedError{Reason: ForgedNotAllowed, Signer: signer, Detail: "subject " + subject + " names no type"}
	}
	if err := may(signer, typ); err != nil {
		return &ForgedError{Reason: ForgedNotAllowed, Signer: signer, Detail: err.Error()}
	}
	return nil
}

// deadLetterDigest is the digest of a dead letter's original message as its
// DLQ copy holds it: the stored subject, its msg id, event id, type and
// signature headers, and its body's digest. The dead-letterer signs it with
// the DLQ subject, so that nothing a replay reads can be changed.
func deadLetterDigest(h Header, data []byte) string {
	body := sha256.Sum256(data)
	sum := sha256.New()
	for _, v := range []string{
		h.Get(HeaderDLQSubject), h.Get(HeaderDLQStream), h.Get(HeaderDLQConsumer), h.Get(HeaderDLQMsgID),
		h.Get(envelope.HeaderID), h.Get(envelope.HeaderType), h.Get(HeaderSigner), h.Get(HeaderSignature),
		strings.Join(h[HeaderMAC], " "), hex.EncodeToString(body[:]),
	} {
		sum.Write([]byte(v))
		sum.Write([]byte{'\n'})
	}
	return hex.EncodeToString(sum.Sum(nil))
}

func dlqSignedBytes(dlqSubject, digest string) []byte {
	return []byte(dlqSigningContext + dlqSubject + "\n" + digest)
}

// SignDeadLetter sets h's dead-letterer signature for a dead letter on
// dlqSubject whose headers (the original's and the Loop-Dlq-* ones) are h
// and body data: what a consumer's runner does to every copy it writes.
func (s *Signer) SignDeadLetter(dlqSubject string, h Header, data []byte) error {
	sig := s.sign(dlqSignedBytes(dlqSubject, deadLetterDigest(h, data)))
	h.Set(HeaderDLQSigner, s.identity)
	h.Set(HeaderDLQSignature, base64.StdEncoding.EncodeToString(sig))
	return nil
}

// ErrReplayRefused: ReplayDLQ found the dead letter not to be one a consumer
// wrote of a message its publisher signed.
var ErrReplayRefused = errors.New("bus: dead letter refused")

// verifyDeadLetter checks a dead letter before replayer replays it: the copy
// is signed by the consumer identity of the original's stream, over its DLQ
// subject and the original as it holds it, and the original carries its
// publisher's valid authenticator for replayer (the operator), or its valid
// signature, for its subject. It returns the original's signer.
func (s *Signers) verifyDeadLetter(replayer *Signer, dlqSubj string, h Header, data []byte) (string, error) {
	stored := h.Get(HeaderDLQSubject)
	consumer := h.Get(HeaderDLQConsumer)
	if stored == "" || consumer == "" || dlqSubj != dlqSubject(consumer, stored) {
		return "", fmt.Errorf("%w: its subject %s is not loop.dlq.<consumer>.<stored subject> of its own headers", ErrReplayRefused, dlqSubj)
	}
	dl := h.Get(HeaderDLQSigner)
	if err := s.checkSig(dl, h.Get(HeaderDLQSignature), dlqSignedBytes(dlqSubj, deadLetterDigest(h, data))); err != nil {
		return "", fmt.Errorf("%w: the dead-letterer's signature: %w", ErrReplayRefused, err)
	}
	prefix, _, _, _, ok := catalog.ParseSubject(stored, true)
	var stream string
	switch {
	case ok && prefix == catalog.InboxPrefix:
		stream = StreamInbox
	case ok && prefix == catalog.EventsPrefix:
		stream = StreamEvents
	default:
		return "", fmt.Errorf("%w: %s is not a subject of the inbox or the events", ErrReplayRefused, stored)
	}
	if consumes[dl] != stream || !strings.HasPrefix(consumer, dl+"-") {
		return "", fmt.Errorf("%w: dead-lettered by %s, which is not the consumer of %s (%s)", ErrReplayRefused, dl, stream, consumer)
	}
	may, _ := PolicyFor(stream)
	signer, err := s.Check(replayer, stored, h, data, h.Get(HeaderDLQMsgID), may)
	if err != nil {
		return signer, fmt.Errorf("%w: the original's signature: %w", ErrReplayRefused, err)
	}
	return signer, nil
}
