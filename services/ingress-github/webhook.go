package ingressgithub

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/webhook"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// WebhookPath is the fixed path of the webhook (README.md#configuration).
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

// Refusal reasons of the webhook: the label of
// loop_ingress_github_rejected_total and of the webhook.rejected records.
const (
	refusedOverCapacity = "over-capacity"
	refusedSignature    = "invalid-signature"
	refusedTooLarge     = "payload-too-large"
	refusedSlow         = "slow-body"
	refusedUnreadable   = "unreadable-body"
	refusedContentType  = "unsupported-content-type"
	refusedPayload      = "invalid-payload"
	refusedEvent        = "missing-event"
	refusedDelivery     = "missing-delivery"
	refusedBusDown      = "bus-unavailable"
	refusedBusFull      = "bus-full"
)

// Retry-After of a 503: a slot or room for a body frees in seconds; the
// bus takes longer to come back.
const (
	retryAfterOverloaded = "5"
	retryAfterBusDown    = "30"
)

// serveWebhook: a free slot → the signature header and the announced size,
// before a byte of the body is read → the body streamed through the HMAC
// into held memory, room taken as its bytes arrive, at a pace → signature →
// content type, headers, JSON → ping → bus reachable → route and dedup →
// publish and PubAcks → 202. Nothing is published for a request refused at
// any step before routing, an unsigned body is never parsed, and 202 is sent
// only once every event is acknowledged by the bus; a drop is a 200 naming
// its reason.
func (s *Service) serveWebhook(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	start, result := time.Now(), "refused"
	defer func() {
		if result != "" {
			s.m.intake.WithLabelValues(result).Observe(time.Since(start).Seconds())
		}
	}()
	event, delivery := github.WebHookType(r), github.DeliveryID(r)
	if s.insecure {
		w.Header().Set("X-Loop-Warning", insecureWarning)
		s.deps.Log.Warn(insecureWarning, "delivery_id", safeHeader(delivery))
		s.m.unsigned.Inc()
	}
	if !s.slots.Enter() {
		w.Header().Set("Retry-After", retryAfterOverloaded)
		s.refuse(ctx, w, http.StatusServiceUnavailable, refusedOverCapacity, "over capacity: retry later")
		return
	}
	defer s.slots.Leave()
	s.m.inflight.Inc()
	defer s.m.inflight.Dec()

	payload, p, ok := s.admit(ctx, w, r, event, delivery)
	if !ok {
		return
	}
	if event == "ping" {
		result = "" // not a delivery
		s.m.received.WithLabelValues("ping", viaWebhook).Inc()
		s.deps.Log.Info("webhook ping answered", "delivery_id", delivery, "gh_event", event)
		reply(w, http.StatusOK, "pong", nil)
		return
	}
	result = s.deliver(ctx, w, route.Delivery{Event: event, DeliveryID: delivery, Payload: payload, Received: s.now()}, p)
}

// admit reads and checks a request up to its JSON: signature, size, body,
// content type, the event and delivery headers. It answers a request it
// refuses (!ok).
func (s *Service) admit(ctx context.Context, w http.ResponseWriter, r *http.Request, event, delivery string) (payload []byte, p route.Payload, ok bool) {
	body, ok := s.readSigned(ctx, w, r)
	if !ok {
		return nil, p, false
	}
	payload, err := payloadOf(r, body)
	switch {
	case errors.Is(err, ErrContentType):
		s.refuse(ctx, w, http.StatusUnsupportedMediaType, refusedContentType, "unsupported content type")
		return nil, p, false
	case err != nil:
		s.refuse(ctx, w, http.StatusBadRequest, refusedPayload, "invalid payload")
		return nil, p, false
	}
	if !validToken(event) {
		s.refuse(ctx, w, http.StatusBadRequest, refusedEvent, "missing or malformed X-GitHub-Event")
		return nil, p, false
	}
	if !validDeliveryID(delivery) {
		s.refuse(ctx, w, http.StatusBadRequest, refusedDelivery, "missing or malformed X-GitHub-Delivery")
		return nil, p, false
	}
	if p, err = route.Decode(payload); err != nil {
		s.refuse(ctx, w, http.StatusBadRequest, refusedPayload, "invalid payload: not a JSON object")
		return nil, p, false
	}
	return payload, p, true
}

// readSigned checks the signature header and the announced size before a
// byte of the body is read, then streams the body through the HMAC into
// held memory (webhook.Budget): a request holds room only for the bytes it
// has sent, and only as long as they pay for at the pace, so requests that
// have not proven their signature cannot keep the room from signed ones.
// It answers a request it refuses (!ok).
func (s *Service) readSigned(ctx context.Context, w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	v := s.validator
	if v == nil {
		v = NewHMACValidator(nil) // no secret: nothing verifies (fail-closed)
	}
	check, err := v.Begin(r)
	if err != nil {
		s.refuse(ctx, w, http.StatusUnauthorized, refusedSignature, "invalid signature")
		return nil, false
	}
	body, err = s.bodies.Read(w, r, s.opts.MaxBodyBytes, s.opts.BodyPace, check)
	var tooBig *http.MaxBytesError
	switch {
	case err == nil:
		return body, true
	case errors.As(err, &tooBig):
		s.refuse(ctx, w, http.StatusRequestEntityTooLarge, refusedTooLarge, "payload too large")
	case errors.Is(err, ErrSignature):
		s.refuse(ctx, w, http.StatusUnauthorized, refusedSignature, "invalid signature")
	case errors.Is(err, webhook.ErrBusy):
		w.Header().Set("Retry-After", retryAfterOverloaded)
		s.refuse(ctx, w, http.StatusServiceUnavailable, refusedOverCapacity, "over capacity: retry later")
	case errors.Is(err, webhook.ErrSlow):
		s.refuse(ctx, w, http.StatusRequestTimeout, refusedSlow, "body too slow")
	default:
		s.refuse(ctx, w, http.StatusBadRequest, refusedUnreadable, "unreadable body")
	}
	return nil, false
}

// deliver publishes a signed, well-formed delivery and answers it: 202 once
// every event is acknowledged by the bus, 200 naming the reason of a drop,
// 503 when the bus cannot take it. It returns the intake result.
func (s *Service) deliver(ctx context.Context, w http.ResponseWriter, d route.Delivery, p route.Payload) (result string) {
	// From here the delivery is GitHub's (signed, well-formed): a refusal
	// names it, so the operator can redeliver it once the bus is back.
	unavailable := func(reason string) string {
		s.m.rejected.WithLabelValues(reason).Inc()
		s.deps.Events.Emit(ctx, "routing.dropped", slog.String("reason", reason), slog.Int("status", http.StatusServiceUnavailable),
			slog.String("gh_event", d.Event), slog.String("delivery_id", d.DeliveryID), slog.String("via", viaWebhook))
		w.Header().Set("Retry-After", retryAfterBusDown)
		reply(w, http.StatusServiceUnavailable, "bus unavailable", nil)
		return "unavailable"
	}
	if !s.deps.Conn.Connected() {
		return unavailable(refusedBusDown)
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.PublishTimeout)
	defer cancel()
	out, err := s.intake.handle(pctx, d, p, viaWebhook, true)
	if err != nil {
		s.deps.Log.Warn("delivery not accepted: bus unavailable", "delivery_id", d.DeliveryID, "gh_event", d.Event, "err", err)
		if errors.Is(err, bus.ErrStreamFull) {
			return unavailable(refusedBusFull)
		}
		return unavailable(refusedBusDown)
	}
	if !out.Accepted {
		extra := map[string]any{"reason": out.Reason}
		if len(out.IDs) > 0 {
			extra["events"] = out.IDs // already on the bus
		}
		reply(w, http.StatusOK, "dropped", extra)
		return "dropped"
	}
	reply(w, http.StatusAccepted, "accepted", map[string]any{"events": out.IDs})
	return "accepted"
}

// refuse answers a request refused before it could be judged as GitHub's
// (unsigned, malformed, too large, too slow, over capacity): counted,
// summed into webhook.rejected records, never one log record per request.
func (s *Service) refuse(ctx context.Context, w http.ResponseWriter, code int, reason, msg string) {
	s.m.rejected.WithLabelValues(reason).Inc()
	s.refusals.Add(ctx, reason, code)
	reply(w, code, msg, nil)
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
