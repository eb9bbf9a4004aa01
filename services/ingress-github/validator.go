package ingressgithub

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/google/go-github/v62/github"
)

// Validator checks a webhook request's signature while its body streams in.
// It is the seam between the HTTP handler and the HMAC: tests
// of routing can use a validator without a secret, and the handler never
// touches the secret.
type Validator interface {
	// Begin judges r's headers before any byte of its body is read: it
	// fails with ErrSignature when the signature header is missing or
	// malformed. Otherwise it returns the check the raw body is streamed
	// through.
	Begin(r *http.Request) (BodyCheck, error)
}

// BodyCheck is one request's signature check: every byte of the raw body
// is written to it as it arrives (writes never fail), then Verify says
// whether the signature covers exactly those bytes.
type BodyCheck interface {
	io.Writer
	// Verify returns ErrSignature when the body does not match.
	Verify() error
}

// Validation errors; the handler maps them to status codes.
var (
	// ErrSignature: X-Hub-Signature-256 is missing, not sha256=<64 hex
	// digits>, or does not match (401).
	ErrSignature = errors.New("invalid signature")
	// ErrContentType: neither application/json nor form-encoded (415).
	ErrContentType = errors.New("unsupported content type")
	// ErrForm: a form-encoded body that does not parse (400).
	ErrForm = errors.New("malformed form body")
)

// NewHMACValidator verifies X-Hub-Signature-256 with secret, fail-closed:
// without a secret nothing verifies, and the SHA-1 X-Hub-Signature GitHub
// also sends is never accepted instead.
func NewHMACValidator(secret []byte) Validator { return hmacValidator{secret: secret} }

type hmacValidator struct{ secret []byte }

func (v hmacValidator) Begin(r *http.Request) (BodyCheck, error) {
	if len(v.secret) == 0 {
		return nil, ErrSignature
	}
	want, ok := parseSignature(r.Header.Get(github.SHA256SignatureHeader))
	if !ok {
		return nil, ErrSignature
	}
	return &hmacCheck{mac: hmac.New(sha256.New, v.secret), want: want}, nil
}

// parseSignature decodes "sha256=<64 hex digits>", GitHub's only form.
func parseSignature(h string) ([]byte, bool) {
	hexSum, ok := strings.CutPrefix(h, "sha256=")
	if !ok || len(hexSum) != 2*sha256.Size {
		return nil, false
	}
	sum, err := hex.DecodeString(hexSum)
	if err != nil {
		return nil, false
	}
	return sum, true
}

type hmacCheck struct {
	mac  hash.Hash
	want []byte
}

func (c *hmacCheck) Write(p []byte) (int, error) { return c.mac.Write(p) }

func (c *hmacCheck) Verify() error {
	if !hmac.Equal(c.mac.Sum(nil), c.want) {
		return ErrSignature
	}
	return nil
}

// UnverifiedValidator accepts every request without a signature check: the
// operator's explicit insecure mode. The handler says so on every request.
func UnverifiedValidator() Validator { return unverified{} }

type unverified struct{}

func (unverified) Begin(*http.Request) (BodyCheck, error) { return unverifiedCheck{}, nil }

type unverifiedCheck struct{}

func (unverifiedCheck) Write(p []byte) (int, error) { return len(p), nil }
func (unverifiedCheck) Verify() error               { return nil }

// payloadOf returns the JSON payload of a verified body: the body itself
// (not copied), or the payload form field of an
// application/x-www-form-urlencoded delivery, as go-github's
// ValidatePayloadFromBody reads them.
func payloadOf(r *http.Request, body []byte) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	mt := "application/json"
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return nil, ErrContentType
		}
	}
	switch mt {
	case "application/json":
		return body, nil
	case "application/x-www-form-urlencoded":
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, ErrForm
		}
		return []byte(form.Get("payload")), nil
	}
	return nil, ErrContentType
}
