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
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The app's JWT as GitHub asks for it: RS256, issued a minute in the past
// (clocks apart), valid ten minutes at most, issuer the app id
// (docs/decisions/104-one-workspace-lean-product-module.md says why it is
// made here rather than by a library).
const (
	jwtBackdate = 60 * time.Second
	jwtLifetime = 10 * time.Minute
)

// parseKey reads an RSA private key from PEM, PKCS #1 ("RSA PRIVATE KEY",
// what GitHub hands out) or PKCS #8 ("PRIVATE KEY"). Its errors never
// quote the key.
func parseKey(pemBytes []byte) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS1PrivateKey(block.Bytes); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		return nil, errors.New("neither a PKCS #1 nor a PKCS #8 private key")
	}
	rk, ok := k.(*rsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("a %T, not an RSA key", k)
	}
	return rk, nil
}

// signJWT is the app's JWT at now.
func signJWT(key *rsa.PrivateKey, appID int64, now time.Time) (string, error) {
	iat := now.Add(-jwtBackdate).Unix()
	claims, err := json.Marshal(struct {
		IssuedAt  int64  `json:"iat"`
		ExpiresAt int64  `json:"exp"`
		Issuer    string `json:"iss"`
	}{iat, iat + int64(jwtLifetime/time.Second), strconv.FormatInt(appID, 10)})
	if err != nil {
		return "", err
	}
	enc := base64.RawURLEncoding
	signed := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`)) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signed))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("githubapp: sign the app's JWT: %w", err)
	}
	return signed + "." + enc.EncodeToString(sig), nil
}

// jwtTransport authenticates each request as the app itself, with a JWT
// made for it: the app's own calls are few (GET /app, an installation's
// look-up, minting a token), so no JWT is kept.
type jwtTransport struct {
	key   *rsa.PrivateKey
	appID int64
	base  http.RoundTripper
	now   func() time.Time
}

func (t *jwtTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	tok, err := signJWT(t.key, t.appID, t.now())
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "Bearer "+tok)
	return t.base.RoundTrip(r)
}
