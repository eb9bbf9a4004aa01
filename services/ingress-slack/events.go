package ingressslack

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/the-loop/bus/pkg/httpserver"
)

// The fixed HTTP surface of read mode events (README.md#configuration).
const (
	PathEvents       = "/slack/events"
	PathInteractions = "/slack/interactions"
)

// runEvents serves the Events API until ctx ends.
func (s *Service) runEvents(ctx context.Context) error {
	ln, err := httpserver.Listen(s.cfg.EventsAddr)
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
	return httpserver.Serve(ctx, ln, s.Handler(), s.deps.Log)
}

// Handler serves POST /slack/events and POST /slack/interactions. Every
// request is verified first (fail-closed); a verified one is answered 200
// only once its message is settled (published with a PubAck, or dropped with
// a recorded reason), and 503 when the bus or KV failed, so Slack retries;
// the retry carries the same message and publishes once.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+PathEvents, s.serveEvents)
	mux.HandleFunc("POST "+PathInteractions, s.serveInteractions)
	return mux
}

// verified reads the body and checks Slack's signature v0 over it: the
// X-Slack-Signature HMAC-SHA256 of "v0:<timestamp>:<body>" under the signing
// secret, with X-Slack-Request-Timestamp no more than 5 minutes from now
// (slack.NewSecretsVerifier). Anything else is 401 and goes no further.
func (s *Service) verified(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	secret := s.cfg.SigningSecret
	if !secret.IsSet() {
		s.reject(w, http.StatusUnauthorized, "no-signing-secret")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.reject(w, http.StatusRequestEntityTooLarge, "too-large")
		} else {
			s.reject(w, http.StatusBadRequest, "unreadable")
		}
		return nil, false
	}
	sv, err := slack.NewSecretsVerifier(r.Header, secret.Reveal())
	if err != nil {
		reason := "bad-signature-headers"
		if errors.Is(err, slack.ErrExpiredTimestamp) {
			reason = "stale-timestamp"
		}
		s.reject(w, http.StatusUnauthorized, reason)
		return nil, false
	}
	if _, err := sv.Write(body); err != nil {
		s.reject(w, http.StatusUnauthorized, "bad-signature")
		return nil, false
	}
	if err := sv.Ensure(); err != nil {
		s.reject(w, http.StatusUnauthorized, "bad-signature")
		return nil, false
	}
	return body, true
}

// reject answers a request refused before the pipeline; the body names no
// detail an attacker could tune against.
func (s *Service) reject(w http.ResponseWriter, status int, reason string) {
	s.m.rejected.WithLabelValues(reason).Inc()
	s.deps.Log.Warn("ingress-slack: request refused", "reason", reason, "status", status)
	http.Error(w, http.StatusText(status), status)
}

func (s *Service) serveEvents(w http.ResponseWriter, r *http.Request) {
	body, ok := s.verified(w, r)
	if !ok {
		return
	}
	in, challenge, err := decodeEvents(body, viaEvents)
	if err != nil {
		s.reject(w, http.StatusBadRequest, "malformed")
		return
	}
	if challenge != "" {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(slackevents.ChallengeResponse{Challenge: challenge})
		return
	}
	s.settle(w, r, in)
}

func (s *Service) serveInteractions(w http.ResponseWriter, r *http.Request) {
	body, ok := s.verified(w, r)
	if !ok {
		return
	}
	form, err := url.ParseQuery(string(body))
	if err != nil || form.Get("payload") == "" {
		s.reject(w, http.StatusBadRequest, "malformed")
		return
	}
	in, err := decodeInteraction([]byte(form.Get("payload")), viaEvents)
	if err != nil {
		s.reject(w, http.StatusBadRequest, "malformed")
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
