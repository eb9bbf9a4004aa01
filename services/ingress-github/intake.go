package ingressgithub

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/links"
	"github.com/the-loop/bus/pkg/tracing"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
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
// webhook and the poller: route, dedup, publish the events together and
// await their PubAcks together, then hand their marks to the seen writer.
// The PubAcks are the one durable write a delivery waits for (decisions 050,
// 052).
type intake struct {
	s     *Service
	marks *marks

	mu    sync.Mutex
	seen  *bus.KV
	links *links.Store
}

// linked returns the work items sessions linked to pull request pr. A
// links bucket that cannot be read routes the delivery by GitHub's own
// links alone, and says so: the delivery is not lost for it.
func (in *intake) linked(ctx context.Context, pr string) []string {
	in.mu.Lock()
	ls := in.links
	in.mu.Unlock()
	if ls == nil {
		var err error
		if ls, err = links.Open(ctx, in.s.deps.Conn); err != nil {
			in.s.deps.Log.Warn("links unreadable; a linked pull request's events reach only the work items GitHub names", "pull_request", pr, "err", err)
			return nil
		}
		in.mu.Lock()
		in.links = ls
		in.mu.Unlock()
	}
	items, err := ls.WorkItems(ctx, pr)
	if err != nil {
		in.s.deps.Log.Warn("links unreadable; a linked pull request's events reach only the work items GitHub names", "pull_request", pr, "err", err)
	}
	return items
}

func newIntake(s *Service) *intake {
	in := &intake{s: s}
	in.marks = newMarks(in.seenKV, s.deps.Log, s.m)
	return in
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

// seenKeys reports, for each key, whether it is remembered: waiting in the
// writer, or in the seen bucket (the rest read together).
func (in *intake) seenKeys(ctx context.Context, keys []string) ([]bool, error) {
	out := make([]bool, len(keys))
	var ask []string
	var at []int
	for i, k := range keys {
		if in.marks.has(k) {
			out[i] = true
			continue
		}
		ask = append(ask, k)
		at = append(at, i)
	}
	if len(ask) == 0 {
		return out, nil
	}
	kv, err := in.seenKV(ctx)
	if err != nil {
		return nil, err
	}
	got, err := kv.Has(ctx, ask...)
	if err != nil {
		return nil, err
	}
	for j, i := range at {
		out[i] = got[j]
	}
	return out, nil
}

// isSeen reports whether key is remembered.
func (in *intake) isSeen(ctx context.Context, key string) (bool, error) {
	got, err := in.seenKeys(ctx, []string{key})
	if err != nil {
		return false, err
	}
	return got[0], nil
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
	in.s.m.received.WithLabelValues(eventLabel(d.Event), via).Inc()
	h := &handling{s: in.s, d: d, via: via, base: []slog.Attr{
		slog.String("gh_event", d.Event), slog.String("action", p.Action()),
		slog.String("delivery_id", d.DeliveryID), slog.String("via", via),
	}}

	dec, seen, dup, err := in.decide(ctx, d, p, checkDelivery)
	if err != nil {
		return outcome{}, err
	}
	if dup {
		return h.drop(ctx, route.DropDuplicate), nil
	}
	h.who = whoAttrs(dec)
	h.notes(ctx, dec)
	if dec.Drop != "" {
		return h.drop(ctx, dec.Drop), nil
	}

	out := outcome{Accepted: true}
	var fresh []*loopv1.Event
	for i, ev := range dec.Events {
		out.IDs = append(out.IDs, ev.GetId())
		if !seen[i] {
			fresh = append(fresh, ev)
		}
	}
	if len(fresh) == 0 {
		o := h.drop(ctx, route.DropDuplicateEvent)
		o.IDs = out.IDs
		return o, nil
	}
	if slices.Contains(dec.Notes, route.NotePayloadTruncated) {
		if err := h.keepPayload(ctx, dec.Events); err != nil {
			return outcome{}, err
		}
	}
	msgs, ok := h.messages(fresh)
	if !ok {
		return h.drop(ctx, "unencodable"), nil
	}
	if err := h.publish(ctx, fresh, msgs); err != nil {
		return outcome{}, err
	}
	// Remembered only now, and off the request path: a delivery that
	// failed half-way is retried whole.
	if marks := markEntries(d, dec.Events, via, checkDelivery); in.marks.add(ctx, marks) != nil {
		// The writer is a full queue behind and the request's time is up:
		// its events are on the bus, and a redelivery inside the duplicate
		// window is still dropped by Nats-Msg-Id.
		in.s.m.marks.WithLabelValues("lost").Add(float64(len(marks)))
		in.s.deps.Log.Warn("events published but not remembered in the seen bucket", "delivery_id", d.DeliveryID)
	}
	h.routed(ctx, dec, out.IDs)
	return out, nil
}

// decide routes d and reads which of its events are already seen (seen[i]
// for dec.Events[i]); dup says the delivery itself was (a redelivery).
// The delivery's mark is read while the delivery is routed (pure, no I/O);
// the marks of events a redelivery could not be told by otherwise are read
// together once their ids are known.
func (in *intake) decide(ctx context.Context, d route.Delivery, p route.Payload, checkDelivery bool) (dec route.Decision, seen []bool, dup bool, err error) {
	type seenResult struct {
		seen bool
		err  error
	}
	var delivery chan seenResult
	if checkDelivery {
		delivery = make(chan seenResult, 1)
		go func() {
			seen, err := in.isSeen(ctx, deliveryKey(d.DeliveryID))
			delivery <- seenResult{seen, err}
		}()
	}
	pol := in.s.policy()
	if pr := route.PullRequestRef(d.Event, p); pr != "" {
		pol.Linked = in.linked(ctx, pr)
	}
	dec = route.Route(d, p, pol)
	var keys []string
	var at []int
	if dec.Drop == "" {
		for i, ev := range dec.Events {
			if !checkDelivery || !ownID(d.DeliveryID, ev.GetId()) {
				keys = append(keys, ev.GetId())
				at = append(at, i)
			}
		}
	}
	got, err := in.seenKeys(ctx, keys)
	if delivery != nil {
		r := <-delivery
		if r.err != nil {
			return dec, nil, false, fmt.Errorf("seen check: %w", r.err)
		}
		if r.seen {
			return dec, nil, true, nil
		}
	}
	if err != nil {
		return dec, nil, false, fmt.Errorf("seen check: %w", err)
	}
	seen = make([]bool, len(dec.Events))
	for j, i := range at {
		seen[i] = got[j]
	}
	return dec, seen, false, nil
}

// handling is one delivery on its way to the bus: what its records share.
type handling struct {
	s   *Service
	d   route.Delivery
	via string
	// base names the delivery in every record; who, once routed, the work
	// items and people it concerns.
	base, who []slog.Attr
}

// drop counts and records a delivery that publishes nothing.
func (h *handling) drop(ctx context.Context, reason string) outcome {
	h.s.m.dropped.WithLabelValues(reason, h.via).Inc()
	h.s.deps.Events.Emit(ctx, "routing.dropped", append(append([]slog.Attr{slog.String("reason", reason)}, h.base...), h.who...)...)
	return outcome{Reason: reason}
}

func whoAttrs(dec route.Decision) []slog.Attr {
	who := []slog.Attr{slog.Any("work_items", dec.Refs)}
	if dec.Actor != "" {
		who = append(who, slog.String("actor", dec.Actor))
	}
	if dec.Sender != "" {
		who = append(who, slog.String("sender", dec.Sender))
	}
	return who
}

// notes records what routing noticed on the way.
func (h *handling) notes(ctx context.Context, dec route.Decision) {
	for _, n := range dec.Notes {
		switch n {
		case route.NoteForgedEnvelope, route.NoteMalformedEnvelope:
			// The envelope is not one — another key, a copy from another
			// record, an edited text, an old version — and the comment is
			// judged by its poster (dec says how). Ids only, never text.
			h.s.deps.Events.Emit(ctx, "routing.forged_envelope", append(append([]slog.Attr{
				slog.String("detail", n), slog.String("event_id", dec.CommentEvent),
				slog.String("judged_as", judgedAs(dec))}, h.base...), h.who...)...)
		default:
			h.s.deps.Log.Warn("routing note", "note", n, "delivery_id", h.d.DeliveryID, "gh_event", h.d.Event, "via", h.via)
		}
	}
}

// keepPayload handles a payload that does not fit one message: it is kept
// whole in the object store, named by its hash (a redelivery stores nothing
// new), and the events carry the reference beside their summary.
func (h *handling) keepPayload(ctx context.Context, events []*loopv1.Event) error {
	ref, err := h.s.deps.Conn.PutObject(ctx, bus.ObjectPayloads, "github-"+route.PayloadDigest(h.d.Payload), h.d.Payload)
	if err != nil {
		return fmt.Errorf("store the oversized payload: %w", err)
	}
	for _, ev := range events {
		if a := ev.GetGithubActivity(); a != nil {
			a.PayloadRef = ref
		}
	}
	return nil
}

// messages encodes the events for the inbox; !ok is a payload no event can
// carry (an invalid id or ref): nothing a retry could fix.
func (h *handling) messages(events []*loopv1.Event) (_ []bus.Message, ok bool) {
	msgs := make([]bus.Message, 0, len(events))
	for _, ev := range events {
		msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
		if err != nil {
			h.s.deps.Log.Error("event not encodable", "event_id", ev.GetId(), "delivery_id", h.d.DeliveryID, "err", err)
			return nil, false
		}
		msgs = append(msgs, bus.FromEnvelope(msg))
	}
	return msgs, true
}

// publish puts the events on the inbox and records each.
func (h *handling) publish(ctx context.Context, events []*loopv1.Event, msgs []bus.Message) error {
	start := time.Now()
	acks, err := h.s.deps.Conn.PublishAll(ctx, msgs)
	if err != nil {
		return err
	}
	h.s.m.latency.Observe(time.Since(start).Seconds())
	for i, ev := range events {
		if !acks[i].Duplicate {
			h.s.m.published.WithLabelValues(ev.GetType(), h.via).Inc()
		}
		h.s.deps.Events.Emit(ctx, "bus.published",
			slog.String("event_id", ev.GetId()), slog.String("event_type", ev.GetType()),
			slog.String("work_item", ev.GetSubject()), slog.String("delivery_id", h.d.DeliveryID),
			slog.Bool("duplicate", acks[i].Duplicate), slog.String("via", h.via))
	}
	return nil
}

// routed records a delivery that reached the bus.
func (h *handling) routed(ctx context.Context, dec route.Decision, ids []string) {
	routed := append(append(slices.Clip(h.base), h.who...),
		slog.String("event_type", string(dec.Kind)), slog.Any("event_ids", ids),
		slog.Bool("authorized", len(dec.Events) > 0 && route.Authorized(dec.Events[0])))
	if dec.Admitted != "" {
		routed = append(routed, slog.String("admitted", dec.Admitted))
	}
	h.s.deps.Events.Emit(ctx, "routing.routed", routed...)
}

// markEntries are the seen marks of a published delivery: the delivery
// itself (webhooks), and every event whose id a redelivery of it could not
// be told by otherwise. An event keyed by a webhook's delivery id
// (gh:<delivery>, and its secondaries) is answered by the delivery's mark,
// which is looked up first; comment-derived ids need their own, as the
// poller and the webhook meet on them.
func markEntries(d route.Delivery, events []*loopv1.Event, via string, checkDelivery bool) []bus.KVEntry {
	mark := markValue(via, d.DeliveryID)
	var out []bus.KVEntry
	for _, ev := range events {
		if checkDelivery && ownID(d.DeliveryID, ev.GetId()) {
			continue
		}
		out = append(out, bus.KVEntry{Key: ev.GetId(), Value: mark})
	}
	if checkDelivery {
		out = append(out, bus.KVEntry{Key: deliveryKey(d.DeliveryID), Value: mark})
	}
	return out
}

// ownID reports whether id is keyed by the delivery: gh:<delivery>, or one
// of its secondaries gh:<delivery>/<ref>.
func ownID(delivery, id string) bool {
	own := envelope.GitHubID(delivery)
	return id == own || strings.HasPrefix(id, own+"/")
}

func markValue(via, delivery string) []byte {
	b, _ := json.Marshal(struct {
		Via      string `json:"via"`
		Delivery string `json:"delivery_id"`
	}{via, delivery})
	return b
}

// judgedAs says what became of a comment whose envelope was refused: the
// event it was published as, or its drop reason.
func judgedAs(dec route.Decision) string {
	if dec.Drop != "" {
		return "dropped:" + dec.Drop
	}
	return string(dec.Kind)
}
