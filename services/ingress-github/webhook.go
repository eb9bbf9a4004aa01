package ingressgithub

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/go-github/v62/github"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// WebhookPath is the fixed path of the webhook (DESIGN §8).
const WebhookPath = "/gh-webhook"

// MaxWebhookBytes is GitHub's cap on a webhook payload: larger deliveries
// are never sent, so a larger body is not GitHub's.
const MaxWebhookBytes = 25 << 20

// insecureWarning is sent on every response in insecure mode.
const insecureWarning = "webhook signatures are NOT verified (insecure mode): anyone who can reach this endpoint can inject GitHub events"

// Handler is the webhook's HTTP handler: POST /gh-webhook. Other paths are
// 404, other methods 405.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+WebhookPath, s.serveWebhook)
	mux.HandleFunc(WebhookPath, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Allow", http.MethodPost)
		reply(w, http.StatusMethodNotAllowed, "method not allowed", nil)
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		reply(w, http.StatusNotFound, "not found", nil)
	})
	return mux
}

func reply(w http.ResponseWriter, code int, status string, extra map[string]any) {
	body := map[string]any{"status": status}
	for k, v := range extra {
		body[k] = v
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(body)
}

// serveWebhook: limit → signature on the raw bytes → headers → JSON → ping →
// bus reachable → dedup and route → publish and PubAck → 202. Nothing is
// published for a request refused at any step before routing, and 202 is
// sent only once every event is acknowledged by the bus; a drop is a 200
// naming its reason.
func (s *Service) serveWebhook(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	event, delivery := github.WebHookType(r), github.DeliveryID(r)
	log := s.deps.Log.With("delivery_id", safeHeader(delivery), "gh_event", safeHeader(event))
	reject := func(code int, reason, msg string) {
		s.m.rejected.WithLabelValues(reason).Inc()
		s.deps.Events.Emit(ctx, "routing.dropped", slog.String("reason", reason), slog.Int("status", code),
			slog.String("gh_event", safeHeader(event)), slog.String("delivery_id", safeHeader(delivery)), slog.String("via", viaWebhook))
		reply(w, code, msg, nil)
	}
	if s.insecure {
		w.Header().Set("X-Loop-Warning", insecureWarning)
		log.Warn(insecureWarning)
		s.m.unsigned.Inc()
	}

	body, err := readBody(w, r, s.opts.MaxBodyBytes)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			reject(http.StatusRequestEntityTooLarge, "payload-too-large", "payload too large")
			return
		}
		reject(http.StatusBadRequest, "unreadable-body", "unreadable body")
		return
	}
	v := s.validator
	if v == nil {
		v = NewHMACValidator(nil) // no secret: nothing verifies (fail-closed)
	}
	payload, err := v.Validate(r, body)
	switch {
	case errors.Is(err, ErrSignature):
		reject(http.StatusUnauthorized, "invalid-signature", "invalid signature")
		return
	case errors.Is(err, ErrContentType):
		reject(http.StatusUnsupportedMediaType, "unsupported-content-type", "unsupported content type")
		return
	case err != nil:
		reject(http.StatusBadRequest, "invalid-payload", "invalid payload")
		return
	}
	if !validToken(event) {
		reject(http.StatusBadRequest, "missing-event", "missing or malformed X-GitHub-Event")
		return
	}
	if !validDeliveryID(delivery) {
		reject(http.StatusBadRequest, "missing-delivery", "missing or malformed X-GitHub-Delivery")
		return
	}
	p, err := route.Decode(payload)
	if err != nil {
		reject(http.StatusBadRequest, "invalid-payload", "invalid payload: not a JSON object")
		return
	}
	if event == "ping" {
		s.m.received.WithLabelValues("ping", viaWebhook).Inc()
		log.Info("webhook ping answered")
		reply(w, http.StatusOK, "pong", nil)
		return
	}
	if !s.deps.Conn.Connected() {
		w.Header().Set("Retry-After", "30")
		reject(http.StatusServiceUnavailable, "bus-unavailable", "bus unavailable")
		return
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
	defer cancel()
	out, err := s.intake.handle(pctx, route.Delivery{Event: event, DeliveryID: delivery, Payload: payload, Received: s.now()}, p, viaWebhook, true)
	if err != nil {
		log.Warn("delivery not accepted: bus unavailable", "err", err)
		w.Header().Set("Retry-After", "30")
		reason := "bus-unavailable"
		if errors.Is(err, bus.ErrStreamFull) {
			reason = "bus-full"
		}
		reject(http.StatusServiceUnavailable, reason, "bus unavailable")
		return
	}
	if !out.Accepted {
		extra := map[string]any{"reason": out.Reason}
		if len(out.IDs) > 0 {
			extra["events"] = out.IDs // already on the bus
		}
		reply(w, http.StatusOK, "dropped", extra)
		return
	}
	reply(w, http.StatusAccepted, "accepted", map[string]any{"events": out.IDs})
}

func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	rd := http.MaxBytesReader(w, r.Body, limit)
	defer rd.Close()
	return io.ReadAll(rd)
}

// validToken: an event name is [a-z0-9_]+ (it becomes a metric label and
// a log field).
func validToken(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// validDeliveryID: GitHub sends a GUID; anything printable without spaces,
// quotes, '/' or '#' and at most 100 bytes can become an event id.
func validDeliveryID(s string) bool {
	if s == "" || len(s) > 100 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || strings.IndexByte(`"\/#`, c) >= 0 {
			return false
		}
	}
	return true
}

// safeHeader bounds what a log line repeats of a header.
func safeHeader(s string) string {
	if len(s) > 100 {
		s = s[:100]
	}
	return strings.ToValidUTF8(s, "?")
}
