package ingressslack

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/slack-go/slack/slackevents"

	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/webhook"
)

// The fixed HTTP surface of read mode events (README.md#configuration).
const (
	PathEvents       = "/slack/events"
	PathInteractions = "/slack/interactions"
)

// runEvents serves the Events API until ctx ends.
func (s *Service) runEvents(ctx context.Context) error {
	ln, err := httpserver.Listen("LOOP_SLACK_EVENTS_ADDR", s.cfg.EventsAddr)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	select {
	case <-s.listening:
	default:
		close(s.listening)
	}
	s.mu.Unlock()
	s.learnOwnID(ctx, s.api())
	s.setStatus("")
	sctx, stop := context.WithCancel(ctx)
	flushed := make(chan struct{})
	go func() { defer close(flushed); s.refusals.Run(sctx) }()
	err = httpserver.Serve(ctx, ln, s.Handler(), s.deps.Log)
	stop()
	<-flushed
	return err
}

// Handler serves POST /slack/events and POST /slack/interactions. Every
// request is verified first (fail-closed, see intake); a verified one is
// answered 200 only once its message is settled (published with a PubAck, or
// dropped with a recorded reason), and 503 when the bus or KV failed, so
// Slack retries; the retry carries the same message and publishes once.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathEvents, s.intake(s.serveEvents))
	mux.HandleFunc("POST "+PathInteractions, s.intake(s.serveInteractions))
	return mux
}

// Refusal reasons of the two endpoints: the label of
// loop_ingress_slack_rejected_total and of the webhook.rejected records.
const (
	refusedNoSecret    = "no-signing-secret"
	refusedHeaders     = "bad-signature-headers"
	refusedStale       = "stale-timestamp"
	refusedSignature   = "bad-signature"
	refusedTooLarge    = "too-large"
	refusedSlow        = "slow-body"
	refusedUnreadable  = "unreadable"
	refusedOverloaded  = "over-capacity"
	refusedMalformed   = "malformed"
	retryAfterOverload = "5" // seconds: a slot or room frees in seconds
)

// signatureWindow is how far X-Slack-Request-Timestamp may be from now.
const signatureWindow = 5 * time.Minute

// intake wraps serve, which gets only bodies Slack signed, in the bounds of
// SECURITY.md boundary 9: the signing secret is set and the signature
// headers are well-formed and fresh (401 otherwise), a slot is free (503
// with Retry-After otherwise), the announced size is within
// MaxBodyBytes (413) — all before a byte of the body is read. The body then
// streams through the HMAC into the body budget, taking room as its bytes
// arrive and only as long as they arrive at the pace (408 otherwise), and
// serve gets it only once the MAC matches. What a request costs thus never
// depends on what it claims about itself, and the slot is held until the
// answer, so the cap bounds the pipeline's work too.
func (s *Service) intake(serve func(http.ResponseWriter, *http.Request, []byte)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		secret := s.cfg.SigningSecret
		if !secret.IsSet() {
			s.reject(w, r, http.StatusUnauthorized, refusedNoSecret)
			return
		}
		check, reason := beginSignature(r.Header, secret.Reveal(), s.opts.Now())
		if reason != "" {
			s.reject(w, r, http.StatusUnauthorized, reason)
			return
		}
		if !s.slots.Enter() {
			w.Header().Set("Retry-After", retryAfterOverload)
			s.reject(w, r, http.StatusServiceUnavailable, refusedOverloaded)
			return
		}
		defer s.slots.Leave()
		s.m.inflight.Inc()
		defer s.m.inflight.Dec()
		body, err := s.bodies.Read(w, r, s.opts.MaxBodyBytes, s.opts.BodyPace, check)
		var tooBig *http.MaxBytesError
		switch {
		case err == nil:
			serve(w, r, body)
		case errors.Is(err, errSignature):
			s.reject(w, r, http.StatusUnauthorized, refusedSignature)
		case errors.As(err, &tooBig):
			s.reject(w, r, http.StatusRequestEntityTooLarge, refusedTooLarge)
		case errors.Is(err, webhook.ErrBusy):
			w.Header().Set("Retry-After", retryAfterOverload)
			s.reject(w, r, http.StatusServiceUnavailable, refusedOverloaded)
		case errors.Is(err, webhook.ErrSlow):
			s.reject(w, r, http.StatusRequestTimeout, refusedSlow)
		default:
			s.reject(w, r, http.StatusBadRequest, refusedUnreadable)
		}
	}
}

// errSignature: the body is not the one Slack signed.
var errSignature = errors.New("ingress-slack: signature does not match")

// signatureCheck checks Slack's signature v0: X-Slack-Signature is "v0=" and
// the hex HMAC-SHA256, under the signing secret, of
// "v0:<X-Slack-Request-Timestamp>:<body>". The body is written to it as it
// streams in.
type signatureCheck struct {
	mac  hash.Hash
	want []byte
}

// beginSignature judges a request's signature headers before a byte of its
// body is read: the signature must be "v0=" and 64 hex digits, the
// timestamp whole seconds no more than signatureWindow from now. It returns
// the check the body streams through, or the reason of the refusal.
func beginSignature(h http.Header, secret string, now time.Time) (*signatureCheck, string) {
	hexSum, ok := strings.CutPrefix(h.Get("X-Slack-Signature"), "v0=")
	ts := h.Get("X-Slack-Request-Timestamp")
	if !ok || len(hexSum) != 2*sha256.Size || ts == "" {
		return nil, refusedHeaders
	}
	want, err := hex.DecodeString(hexSum)
	if err != nil {
		return nil, refusedHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return nil, refusedHeaders
	}
	if d := now.Sub(time.Unix(sec, 0)); d > signatureWindow || d < -signatureWindow {
		return nil, refusedStale
	}
	mac := hmac.New(sha256.New, []byte(secret))
	_, _ = io.WriteString(mac, "v0:"+ts+":")
	return &signatureCheck{mac: mac, want: want}, ""
}

func (c *signatureCheck) Write(p []byte) (int, error) { return c.mac.Write(p) }

// Verify compares in constant time.
func (c *signatureCheck) Verify() error {
	if !hmac.Equal(c.mac.Sum(nil), c.want) {
		return errSignature
	}
	return nil
}

// reject answers a request refused before the pipeline, with a body naming
// no detail an attacker could tune against: counted by reason and summed
// into webhook.rejected records, never one log record per request.
func (s *Service) reject(w http.ResponseWriter, r *http.Request, status int, reason string) {
	s.m.rejected.WithLabelValues(reason).Inc()
	s.refusals.Add(r.Context(), reason, status)
	http.Error(w, http.StatusText(status), status)
}

func (s *Service) serveEvents(w http.ResponseWriter, r *http.Request, body []byte) {
	in, challenge, err := decodeEvents(body, viaEvents)
	if err != nil {
		s.reject(w, r, http.StatusBadRequest, refusedMalformed)
		return
	}
	if challenge != "" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(slackevents.ChallengeResponse{Challenge: challenge})
		return
	}
	s.settle(w, r, in)
}

func (s *Service) serveInteractions(w http.ResponseWriter, r *http.Request, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("payload") == "" {
		s.reject(w, r, http.StatusBadRequest, refusedMalformed)
		return
	}
	in, err := decodeInteraction([]byte(form.Get("payload")), viaEvents)
	if err != nil {
		s.reject(w, r, http.StatusBadRequest, refusedMalformed)
		return
	}
	s.settle(w, r, in)
}

// settle runs in through the pipeline within ProcessTimeout and answers.
func (s *Service) settle(w http.ResponseWriter, r *http.Request, in *inbound) {
	ctx, cancel := context.WithTimeout(r.Context(), s.opts.ProcessTimeout)
	defer cancel()
	if _, err := s.process(ctx, in); err != nil {
		s.m.retried.WithLabelValues(in.via).Inc()
		s.deps.Log.Warn("ingress-slack: message not settled; Slack will retry", "event_id", in.id, "err", err)
		http.Error(w, http.StatusText(http.StatusServiceUnavailable), http.StatusServiceUnavailable)
		return
	}
	s.markRead(ctx, in)
	w.WriteHeader(http.StatusOK)
}
