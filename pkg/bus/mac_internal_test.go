package bus

import (
	"bytes"
	"crypto/ed25519"
	"testing"

	"github.com/nats-io/nkeys"
)

func testSigner(t *testing.T, identity string) (*Signer, ed25519.PublicKey) {
	t.Helper()
	seed, pub, err := NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(identity, seed)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := nkeys.Decode(nkeys.PrefixByteUser, []byte(pub))
	if err != nil {
		t.Fatal(err)
	}
	return s, raw
}

// TestPairKeysFromNKeys: an NKey's X25519 public key is the Montgomery form
// of its Ed25519 one, so two identities derive the same key for each
// direction from their own seed and the other's public NKey; the two
// directions' keys differ, and so do another pair's.
func TestPairKeysFromNKeys(t *testing.T) {
	a, aRaw := testSigner(t, IdentityIngressSlack)
	b, bRaw := testSigner(t, IdentityLedgerWriter)
	c, _ := testSigner(t, IdentityDispatcher)

	ax, err := x25519Public(aRaw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ax.Bytes(), a.x.PublicKey().Bytes()) {
		t.Fatal("the X25519 key of the seed is not the Montgomery form of the NKey")
	}
	ab, err := a.pairKey(a.public, b.public, bRaw)
	if err != nil {
		t.Fatal(err)
	}
	ab2, err := b.pairKey(a.public, b.public, aRaw)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(ab, ab2) || len(ab) != 32 {
		t.Fatalf("a→b as a derives it %x, as b does %x", ab, ab2)
	}
	ba, err := a.pairKey(b.public, a.public, bRaw)
	if err != nil {
		t.Fatal(err)
	}
	cb, err := c.pairKey(c.public, b.public, bRaw)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(ab, ba) || bytes.Equal(ab, cb) {
		t.Fatal("a pair key is the same for another direction or another pair")
	}
	// A public key of small order (the identity point) would make the
	// exchange's result one anyone knows: the exchange refuses it.
	identity := make(ed25519.PublicKey, 32)
	identity[0] = 1
	if _, err := a.pairKey(a.public, "identity-point", identity); err == nil {
		t.Fatal("a key exchange with a small-order point succeeded")
	}
}
