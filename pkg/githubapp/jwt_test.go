package githubapp

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"strings"
	"testing"
	"time"
)

// TestJWTIsRS256WithGitHubsClaims: the app's JWT verifies with the app's
// public key, and its claims are the ones GitHub checks: issuer the app
// id, issued a minute back, valid ten minutes from then.
func TestJWTIsRS256WithGitHubsClaims(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	tok, err := signJWT(key, 90210, now)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		t.Fatalf("%d parts, want 3", len(parts))
	}
	enc := base64.RawURLEncoding
	var header struct{ Alg, Typ string }
	var claims struct {
		Iat, Exp int64
		Iss      string
	}
	for i, v := range []any{&header, &claims} {
		raw, err := enc.DecodeString(parts[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(raw, v); err != nil {
			t.Fatal(err)
		}
	}
	if header.Alg != "RS256" || header.Typ != "JWT" {
		t.Errorf("header %+v", header)
	}
	if claims.Iss != "90210" || claims.Iat != now.Unix()-60 || claims.Exp-claims.Iat != 600 {
		t.Errorf("claims %+v at %d", claims, now.Unix())
	}
	sig, err := enc.DecodeString(parts[2])
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if err := rsa.VerifyPKCS1v15(&key.PublicKey, crypto.SHA256, sum[:], sig); err != nil {
		t.Errorf("signature: %v", err)
	}
}

// TestKeysInPKCS1AndPKCS8 are read; anything else is refused without
// quoting it.
func TestKeysInPKCS1AndPKCS8(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string][]byte{
		"pkcs1": pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"pkcs8": pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}),
	} {
		got, err := parseKey(p)
		if err != nil || !got.Equal(key) {
			t.Errorf("%s: %v", name, err)
		}
	}
	const secretish = "MIIEsecretsecretsecret"
	for _, bad := range []string{secretish, "-----BEGIN RSA PRIVATE KEY-----\n" + secretish + "\n-----END RSA PRIVATE KEY-----\n"} {
		_, err := parseKey([]byte(bad))
		if err == nil {
			t.Errorf("%q accepted", bad)
		} else if strings.Contains(err.Error(), "secret") {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
}
