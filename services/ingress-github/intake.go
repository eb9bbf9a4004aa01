package ingressgithub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/tracing"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// Ways a delivery arrives; the "via" of logs and metrics.
const (
	viaWebhook = "webhook"
	viaPoll    = "poll"
)

// deliveryKey is the seen-KV key of a webhook delivery. Event ids are keys
// too (they are "gh:…", so the two never collide).
func deliveryKey(id string) string { return "github-delivery:" + id }

// outcome is what intake did with one delivery.
type outcome struct {
	Accepted bool
	Reason   string   // drop reason when !Accepted
	IDs      []string // ids of the events published (or already on the bus)
}

// intake is the one path from a routed delivery to the bus, shared by the
// webhook and the poller: dedup, route, publish each event and wait for its
// PubAck, then remember the ids in the seen KV.
type intake struct {
	s *Service

	mu   sync.Mutex
	seen *bus.KV
}

func (in *intake) seenKV(ctx context.Context) (*bus.KV, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.seen != nil {
		return in.seen, nil
	}
	kv, err := in.s.deps.Conn.KV(ctx, bus.BucketSeen)
	if err != nil {
		return nil, err
	}
	in.seen = kv
	return kv, nil
}

// isSeen reports whether key is in the seen KV.
func (in *intake) isSeen(ctx context.Context, key string) (bool, error) {
	kv, err := in.seenKV(ctx)
	if err != nil {
		return false, err
	}
	if _, err := kv.Get(ctx, key); err != nil {
		if errors.Is(err, bus.ErrNotFound) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// handle routes d and publishes what it yields. An error means nothing is
// known to be lost but the delivery must be retried (the bus is down or
// full): nothing was marked seen, and a retry republishes under the same
// ids, which the bus drops if they had been stored.
func (in *intake) handle(ctx context.Context, d route.Delivery, p route.Payload, via string, checkDelivery bool) (_ outcome, err error) {
	// The trace of what this delivery becomes starts here.
	ctx, span := tracing.Start(ctx, "ingress-github "+d.Event, trace.SpanKindServer,
		attribute.String("loop.via", via), attribute.String("github.delivery_id", d.DeliveryID))
	defer func() { tracing.End(span, err) }()
	s := in.s
	log := s.deps.Log.With("delivery_id", d.DeliveryID, "gh_event", d.Event, "via", via)
	s.m.received.WithLabelValues(eventLabel(d.Event), via).Inc()
	base := []slog.Attr{
		slog.String("gh_event", d.Event), slog.String("action", p.Action()),
		slog.String("delivery_id", d.DeliveryID), slog.String("via", via),
	}
	drop := func(reason string, extra ...slog.Attr) outcome {
		s.m.dropped.WithLabelValues(reason, via).Inc()
		s.deps.Events.Emit(ctx, "routing.dropped", append(append([]slog.Attr{slog.String("reason", reason)}, base...), extra...)...)
		return outcome{Reason: reason}
	}
	if checkDelivery {
		dup, err := in.isSeen(ctx, deliveryKey(d.DeliveryID))
		if err != nil {
			return outcome{}, fmt.Errorf("seen check: %w", err)
		}
		if dup {
			return drop(route.DropDuplicate), nil
		}
	}

	dec := route.Route(d, p, s.policy())
	who := []slog.Attr{slog.Any("work_items", dec.Refs)}
	if dec.Actor != "" {
		who = append(who, slog.String("actor", dec.Actor))
	}
	if dec.Sender != "" {
		who = append(who, slog.String("sender", dec.Sender))
	}
	for _, n := range dec.Notes {
		switch n {
		case route.NoteForgedEnvelope, route.NoteMalformedEnvelope:
			// The envelope is not one — another key, a copy from another
			// record, an edited text, an old version — and the comment is
			// judged by its poster (dec says how). Ids only, never text.
			s.deps.Events.Emit(ctx, "routing.forged_envelope", append(append([]slog.Attr{
				slog.String("detail", n), slog.String("event_id", dec.CommentEvent),
				slog.String("judged_as", judgedAs(dec))}, base...), who...)...)
		default:
			log.Warn("routing note", "note", n)
		}
	}
	if dec.Drop != "" {
		return drop(dec.Drop, who...), nil
	}

	var fresh []int
	for i, ev := range dec.Events {
		dup, err := in.isSeen(ctx, ev.GetId())
		if err != nil {
			return outcome{}, fmt.Errorf("seen check: %w", err)
		}
		if !dup {
			fresh = append(fresh, i)
		}
	}
	out := outcome{Accepted: true}
	for _, ev := range dec.Events {
		out.IDs = append(out.IDs, ev.GetId())
	}
	if len(fresh) == 0 {
		o := drop(route.DropDuplicateEvent, who...)
		o.IDs = out.IDs
		return o, nil
	}
	if slices.Contains(dec.Notes, route.NotePayloadTruncated) {
		// The payload does not fit one message: keep it whole in the object
		// store, named by its hash (a redelivery stores nothing new), and let
		// the events carry the reference beside their summary.
		ref, err := s.deps.Conn.PutObject(ctx, bus.ObjectPayloads, "github-"+route.PayloadDigest(d.Payload), d.Payload)
		if err != nil {
			return outcome{}, fmt.Errorf("store the oversized payload: %w", err)
		}
		for _, ev := range dec.Events {
			if a := ev.GetGithubActivity(); a != nil {
				a.PayloadRef = ref
			}
		}
	}
	for _, i := range fresh {
		ev := dec.Events[i]
		msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
		if err != nil {
			// A payload no event can carry (an invalid id or ref): nothing
			// a retry could fix.
			log.Error("event not encodable", "event_id", ev.GetId(), "err", err)
			return drop("unencodable", who...), nil
		}
		start := time.Now()
		ack, err := s.deps.Conn.Publish(ctx, bus.FromEnvelope(msg))
		if err != nil {
			return outcome{}, err
		}
		s.m.latency.Observe(time.Since(start).Seconds())
		if !ack.Duplicate {
			s.m.published.WithLabelValues(ev.GetType(), via).Inc()
		}
		s.deps.Events.Emit(ctx, "bus.published",
			slog.String("event_id", ev.GetId()), slog.String("event_type", ev.GetType()),
			slog.String("work_item", ev.GetSubject()), slog.String("delivery_id", d.DeliveryID),
			slog.Bool("duplicate", ack.Duplicate), slog.String("via", via))
	}
	// Remembered only now: a delivery that failed half-way is retried whole.
	kv, err := in.seenKV(ctx)
	if err == nil {
		mark, _ := json.Marshal(map[string]string{"via": via, "delivery_id": d.DeliveryID})
		for _, ev := range dec.Events {
			if _, err = kv.Put(ctx, ev.GetId(), mark); err != nil {
				break
			}
		}
		if err == nil && checkDelivery {
			_, err = kv.Put(ctx, deliveryKey(d.DeliveryID), mark)
		}
	}
	if err != nil {
		// The events are on the bus; a redelivery inside the duplicate
		// window is still dropped by Nats-Msg-Id.
		log.Warn("events published but not remembered in the seen bucket", "err", err)
	}
	routed := append(append(base, who...),
		slog.String("event_type", string(dec.Kind)), slog.Any("event_ids", out.IDs),
		slog.Bool("authorized", len(dec.Events) > 0 && route.Authorized(dec.Events[0])))
	if dec.Admitted != "" {
		routed = append(routed, slog.String("admitted", dec.Admitted))
	}
	s.deps.Events.Emit(ctx, "routing.routed", routed...)
	return out, nil
}

// judgedAs says what became of a comment whose envelope was refused: the
// event it was published as, or its drop reason.
func judgedAs(dec route.Decision) string {
	if dec.Drop != "" {
		return "dropped:" + dec.Drop
	}
	return string(dec.Kind)
}
