package ingressgithub

import (
	"bytes"
	"errors"
	"mime"
	"net/http"
	"strings"

	"github.com/google/go-github/v62/github"
)

// Validator checks a webhook request and returns its JSON payload. It is the
// seam between the HTTP handler and go-github's verification (style §3.8):
// tests of routing can use a validator without HMAC, and the handler never
// touches the secret.
type Validator interface {
	// Validate checks r's signature over body (the raw bytes, before any
	// parsing) and returns the JSON payload: body itself, or the payload
	// form field of an application/x-www-form-urlencoded delivery.
	Validate(r *http.Request, body []byte) ([]byte, error)
}

// Validation errors; the handler maps them to status codes.
var (
	// ErrSignature: X-Hub-Signature-256 is missing, not sha256=…, or does
	// not match (401).
	ErrSignature = errors.New("invalid signature")
	// ErrContentType: neither application/json nor form-encoded (415).
	ErrContentType = errors.New("unsupported content type")
	// ErrForm: a form-encoded body that does not parse (400).
	ErrForm = errors.New("malformed form body")
)

// NewHMACValidator verifies X-Hub-Signature-256 with secret, fail-closed:
// the SHA-1 X-Hub-Signature GitHub also sends is never accepted instead.
func NewHMACValidator(secret []byte) Validator { return hmacValidator{secret: secret} }

type hmacValidator struct{ secret []byte }

func (v hmacValidator) Validate(r *http.Request, body []byte) ([]byte, error) {
	if len(v.secret) == 0 {
		return nil, ErrSignature
	}
	sig := r.Header.Get(github.SHA256SignatureHeader)
	if !strings.HasPrefix(sig, "sha256=") {
		return nil, ErrSignature
	}
	// go-github's error text quotes the header; the handler never shows it.
	if err := github.ValidateSignature(sig, body, v.secret); err != nil {
		return nil, ErrSignature
	}
	return extractPayload(r, body)
}

// UnverifiedValidator accepts every request without a signature check: the
// operator's explicit insecure mode. The handler says so on every request.
func UnverifiedValidator() Validator { return unverified{} }

type unverified struct{}

func (unverified) Validate(r *http.Request, body []byte) ([]byte, error) {
	return extractPayload(r, body)
}

// extractPayload is go-github's ValidatePayloadFromBody without the
// signature step (done above on the raw body).
func extractPayload(r *http.Request, body []byte) ([]byte, error) {
	ct := r.Header.Get("Content-Type")
	mt := "application/json"
	if ct != "" {
		var err error
		if mt, _, err = mime.ParseMediaType(ct); err != nil {
			return nil, ErrContentType
		}
	}
	if mt != "application/json" && mt != "application/x-www-form-urlencoded" {
		return nil, ErrContentType
	}
	payload, err := github.ValidatePayloadFromBody(mt, bytes.NewReader(body), "", nil)
	if err != nil {
		return nil, ErrForm
	}
	return payload, nil
}
