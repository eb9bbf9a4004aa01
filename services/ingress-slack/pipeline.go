package ingressslack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/slack-go/slack"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/slackmsg"
	"github.com/the-loop/bus/pkg/tracing"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Drop reasons recorded on channel.dropped (docs/requirements.md R8.1).
const (
	reasonUnmapped         = "unmapped"
	reasonSelfAuthored     = "self-authored"
	reasonUnauthorized     = "unauthorized-actor"
	reasonUnpublishable    = "unpublishable-event"
	reasonKickoffDisabled  = "kickoff-disabled"
	reasonAmbiguousControl = "ambiguous-control"
	reasonIgnored          = "ignored"
	reasonChannelDisabled  = "channel-disabled"
	reasonInvalid          = "invalid"
	// reasonStaleGate: a gate button pressed after the work item left the
	// gate visit the button was drawn for (or on a button that names none).
	reasonStaleGate = "stale-gate"
)

// source is the ce-source of every event the service raises.
const source = string(identity.ChannelSlack)

// maxTitle is GitHub's limit on an issue title, in characters (decision 017).
const maxTitle = 256

// result is what became of one inbound message.
type result struct {
	// typ is the catalog type it was classified as ("" when it was dropped
	// before classification).
	typ catalog.Type
	// reason is the drop reason; "" when the event was published.
	reason string
	detail string
	ref    string
	// duplicate: the inbox already held the event id (a retry).
	duplicate bool
}

// classify decides the one catalog type of a message in a bound thread (a
// reply or a button press; top-level messages are always work-item.create).
// The precedence is the one decision 015 settled: a control keyword makes it
// control.command with no fallback, whatever the grants (an ambiguous mix of
// keywords included, so that no keyword ever reaches the agent as prose);
// otherwise gate.feedback when atGate reports the work item at a human gate
// and the channel holds the gate.feedback grant (the caller folds the grant
// into atGate, so the gate lookup is skipped without it); otherwise
// work-item.reply. It never consults the publish grant of the type it
// returns: a type the channel may not publish is dropped by the caller, never
// downgraded (R2.3).
func classify(g control.Grammar, text string, atGate func() (bool, error)) (catalog.Type, control.Result, error) {
	if res := g.Parse(text); res.Found() {
		return catalog.ControlCommand, res, nil
	}
	gate, err := atGate()
	if err != nil {
		return "", control.Result{}, err
	}
	if gate {
		return catalog.GateFeedback, control.Result{}, nil
	}
	return catalog.WorkItemReply, control.Result{}, nil
}

// grammar is the control grammar of cfg. A config the loader accepted always
// builds one; should it not, the default keywords are used, which errs
// toward treating a keyword as a command (dropped without the grant) rather
// than as prose.
func (s *Service) grammar(cfg *config.Config) control.Grammar {
	g, err := control.New(cfg.Routing.Control.Enabled, cfg.Routing.Control.Keywords)
	if err != nil {
		s.deps.Log.Warn("ingress-slack: routing.control does not build a grammar; using the default keywords", "err", err)
		return control.Default()
	}
	return g
}

// process runs one message through the pipeline, in this order: ignore
// what is not a person's message → drop bot and own messages → authorize →
// map → check a gate button's visit → classify → kickoff checks → publish
// grant → publish. Authorization comes before mapping, so a stranger's reply
// in an unbound thread, or press on an unbound message, is recorded as
// unauthorized-actor, never as unmapped (abuse 1); an empty kickoff.repo
// refuses a kickoff before the grant is read (abuse 6). A returned error is
// transient (KV or bus): nothing was decided, and the caller must let the
// message come again (HTTP 503, no Socket Mode ack, no cursor advance); the
// event id makes the retry harmless.
func (s *Service) process(ctx context.Context, in *inbound) (res result, err error) {
	// The trace of what this message becomes starts here.
	ctx, span := tracing.Start(ctx, "ingress-slack "+kindOf(in), trace.SpanKindServer,
		attribute.String("loop.via", in.via), attribute.String("loop.event.id", in.id))
	defer func() { tracing.End(span, err) }()
	s.m.received.WithLabelValues(in.via, kindOf(in)).Inc()
	if in.ignore != "" {
		return s.drop(ctx, in, result{reason: reasonIgnored, detail: in.ignore}, ""), nil
	}
	kv, err := s.stores()
	if err != nil {
		return result{}, err
	}
	cfg := s.deps.Config()
	sc := cfg.Channels.Slack
	if !sc.Enabled {
		return s.drop(ctx, in, result{reason: reasonChannelDisabled}, ""), nil
	}
	if in.invalid != "" {
		return s.drop(ctx, in, result{reason: reasonInvalid, detail: in.invalid}, in.user), nil
	}

	// 1. Drop bot and own messages: the Slack half of loop prevention.
	if in.botID != "" || in.subtype == "bot_message" || (in.user != "" && in.user == s.ownUser()) {
		return s.drop(ctx, in, result{reason: reasonSelfAuthored}, ""), nil
	}

	// 2. Authorize the member by their Slack id in routing.authorizedUsers;
	// the actor is that entry, never anything the text says (abuse 1, 8).
	// Before mapping: a stranger learns nothing of which threads are bound.
	person, ok := cfg.Routing.AuthorizedUsers.ByChannel(identity.ChannelSlack, in.user)
	if !ok {
		return s.drop(ctx, in, result{reason: reasonUnauthorized}, in.user), nil
	}

	// 3. Map; 3b. check a gate button's visit, and 4. classify; 5. and 6.
	// the kickoff checks and the publish grant.
	r, topLevel, err := s.mapTo(ctx, kv, in, sc)
	if err != nil {
		return result{}, err
	}
	if r.reason != "" {
		return s.drop(ctx, in, r, in.user), nil
	}
	s.deps.Events.Emit(ctx, "channel.reply_received", s.attrs(in, r, in.user)...)
	cmd, err := s.typeOf(ctx, kv, cfg, in, &r, topLevel)
	if err != nil {
		return result{}, err
	}
	if r.reason == "" {
		r.reason, r.detail = s.refusal(ctx, in, r, topLevel, person, cmd, sc)
	}
	if r.reason != "" {
		return s.drop(ctx, in, r, in.user), nil
	}

	// 7. Publish to the inbox; the ledger-writer records, then fans out.
	ev := s.event(in, r, person, cmd, sc)
	dup, err := s.publish(ctx, ev)
	if errors.Is(err, envelope.ErrInvalid) {
		r.reason, r.detail = reasonInvalid, "event"
		return s.drop(ctx, in, r, in.user), nil
	}
	if err != nil {
		return result{}, err
	}
	r.duplicate = dup
	s.m.published.WithLabelValues(string(r.typ), in.via).Inc()
	if dup {
		s.m.duplicates.WithLabelValues(in.via).Inc()
	}
	s.deps.Events.Emit(ctx, "bus.published", append(s.attrs(in, r, in.user), slog.Bool("duplicate", dup))...)
	return r, nil
}

// mapTo is step 3, map. A reply or a press belongs to the work item its
// thread is bound to (r.ref); a top-level message in the configured channel
// is a kickoff candidate (topLevel); anything else is not addressed to the
// loop (r.reason). A press never starts a work item, wherever its message
// is.
func (s *Service) mapTo(ctx context.Context, kv *stores, in *inbound, sc config.SlackChannel) (r result, topLevel bool, err error) {
	switch {
	case in.press != nil || !in.topLevel():
		ref, ok, err := kv.threads.Lookup(ctx, in.channel, in.threadTS)
		if err != nil {
			return result{}, false, fmt.Errorf("map %s/%s: %w", in.channel, in.threadTS, err)
		}
		if !ok {
			return result{reason: reasonUnmapped}, false, nil
		}
		return result{ref: ref}, false, nil
	case sc.Channel != "" && in.channel == sc.Channel:
		return result{}, true, nil
	}
	return result{reason: reasonUnmapped}, false, nil
}

// typeOf is steps 3b and 4: it checks a gate button's visit, then
// classifies the message into exactly one type (r.typ), or sets r.reason
// when a press is refused.
func (s *Service) typeOf(ctx context.Context, kv *stores, cfg *config.Config, in *inbound, r *result, topLevel bool) (control.Result, error) {
	sc := cfg.Channels.Slack
	// 3b. A gate button answers only the gate visit it was drawn for: once
	// the work item has left it, the press is refused and the presser told
	// so, and nothing is published
	// (docs/decisions/031-stale-gate-presses-refused.md).
	atGate := func() (bool, error) {
		if !sc.CanPublish(catalog.GateFeedback) {
			return false, nil
		}
		return s.atHumanGate(ctx, kv.graph, r.ref)
	}
	if in.press != nil && in.press.rendered {
		refusal, err := s.checkVisit(ctx, kv.graph, in.press.gate, r.ref)
		if err != nil {
			return control.Result{}, err
		}
		if refusal.reason != "" {
			r.reason, r.detail = refusal.reason, refusal.detail
			s.tellPresser(ctx, in, refusal.tell)
			return control.Result{}, nil
		}
		// Just read: the work item waits at the button's visit.
		atGate = func() (bool, error) { return sc.CanPublish(catalog.GateFeedback), nil }
	}

	// 4. Classify into exactly one type. A top-level message has no work
	// item a gate answer could be for: it is a kickoff, unless it carries a
	// control keyword, which makes it a control command wherever it is
	// typed (abuse 2: without the grant it is dropped, never opened as an
	// issue).
	if !topLevel {
		typ, cmd, err := classify(s.grammar(cfg), in.text, atGate)
		r.typ = typ
		return cmd, err
	}
	r.typ = catalog.WorkItemCreate
	if res := s.grammar(cfg).Parse(in.text); res.Found() {
		r.typ = catalog.ControlCommand
		return res, nil
	}
	return control.Result{}, nil
}

// refusal is steps 5 and 6: the drop reason (and detail) of a classified
// message the channel may not publish, "" when it may.
func (s *Service) refusal(ctx context.Context, in *inbound, r result, topLevel bool, person identity.Person, cmd control.Result, sc config.SlackChannel) (reason, detail string) {
	// 5. Kickoff: an empty repo disables the path whatever the grant says
	// (abuse 6); checked before anything is published.
	if r.typ == catalog.WorkItemCreate && sc.Kickoff.Repo == "" {
		return reasonKickoffDisabled, ""
	}
	// 6. The channel's publish grant: never downgraded to another type, so
	// a control keyword without the grant is dropped, not delivered as
	// prose (R2.3, abuse 2).
	if !sc.CanPublish(r.typ) {
		return reasonUnpublishable, ""
	}
	if topLevel && r.typ == catalog.ControlCommand {
		// Granted, but a command outside a bound thread names no work
		// item to act on.
		return reasonUnmapped, "control-without-work-item"
	}
	switch r.typ {
	case catalog.GateFeedback, catalog.ControlCommand:
		// decision 015: the gate and the control seam judge GitHub logins; a
		// person with no GitHub id in their entry can answer neither, and
		// the ledger would refuse the record anyway.
		if person.GitHub == "" {
			return reasonUnauthorized, "no-github-login"
		}
	}
	if cmd.Ambiguous {
		// Two different commands: nothing is executed, as on GitHub, and
		// nothing is recorded that the control seam would refuse anyway.
		s.deps.Events.Emit(ctx, "control.ambiguous", s.attrs(in, r, in.user)...)
		return reasonAmbiguousControl, ""
	}
	return "", ""
}

// event builds the catalog event. Repo and labels of a kickoff come from
// config only (abuse 7); the actor is the person's entry (abuse 8).
func (s *Service) event(in *inbound, r result, p identity.Person, cmd control.Result, sc config.SlackChannel) *loopv1.Event {
	ev := &loopv1.Event{
		Id:      in.id,
		Source:  source,
		Type:    string(r.typ),
		Subject: r.ref,
		Time:    envelope.NewTime(in.at(s.opts.Now())),
		Actor:   &loopv1.Actor{Github: p.GitHub, Slack: p.Slack, Name: p.Name},
		Conversation: &loopv1.Conversation{
			Channel: in.channel, ThreadTs: in.threadTS, MessageTs: in.ts,
		},
	}
	switch r.typ {
	case catalog.WorkItemCreate:
		// No work item yet: the subject is the conversation
		// (docs/architecture.md#streams-and-state), and the message becomes the root
		// of the new work item's thread.
		ev.Subject = "slack:" + in.channel + "/" + in.ts
		ev.Conversation.ThreadTs = ""
		ev.Body = &loopv1.Event_WorkItemCreate{WorkItemCreate: &loopv1.WorkItemCreate{
			Repo:   sc.Kickoff.Repo,
			Title:  title(in.text),
			Body:   in.text,
			Labels: append([]string(nil), sc.Kickoff.Labels...),
		}}
	case catalog.ControlCommand:
		ev.Body = &loopv1.Event_ControlCommand{ControlCommand: &loopv1.ControlCommand{
			Command: string(cmd.Command), Text: in.text,
		}}
	case catalog.GateFeedback:
		gf := &loopv1.GateFeedback{Text: in.text}
		if in.press != nil && in.press.rendered {
			// The visit travels on to the signed envelope, so the
			// dispatcher applies the answer to that visit only.
			gf.Action, gf.GateVisit = in.press.value, in.press.gate.Visit
		}
		ev.Body = &loopv1.Event_GateFeedback{GateFeedback: gf}
	default:
		ev.Body = &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: in.text}}
	}
	return ev
}

// title is a kickoff's issue title: its first non-blank line, cut to GitHub's
// limit. The ledger-writer scrubs and defangs it.
func title(text string) string {
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		if utf8.RuneCountInString(line) > maxTitle {
			line = string([]rune(line)[:maxTitle-1]) + "…"
		}
		return line
	}
	return ""
}

// publish stores ev in the inbox under Nats-Msg-Id = its id and waits for
// the PubAck. dup reports that the inbox already had that id.
func (s *Service) publish(ctx context.Context, ev *loopv1.Event) (dup bool, err error) {
	m, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		return false, err
	}
	start := time.Now()
	ack, err := s.deps.Conn.Publish(ctx, bus.FromEnvelope(m))
	if err != nil {
		return false, fmt.Errorf("publish %s: %w", ev.GetId(), err)
	}
	s.m.latency.Observe(time.Since(start).Seconds())
	return ack.Duplicate, nil
}

// atHumanGate reads the work item's graph state from KV "graph", stored by
// the dispatcher under catalog.SubjectKey(ref). No state means no gate. The
// gate is the current node being a human, non-terminal node of its graph
// (docs/requirements.md R6.3), the graph taken from the operator config in
// force (the built-ins and graphs.files, as the dispatcher reads them); for a
// graph the config does not know (an operator graph whose file left it), the
// state's status, which the graph package sets to waiting exactly on entering
// such a node, stands in.
func (s *Service) atHumanGate(ctx context.Context, kvGraph *bus.KV, ref string) (bool, error) {
	visit, err := s.gateVisit(ctx, kvGraph, ref)
	return visit != "", err
}

// gateVisit is the visit of the human gate ref waits at (graph.State
// GateVisit), "" when it waits at none; read as atHumanGate reads it. KV
// "graph" is the dispatcher's: this service only reads it.
func (s *Service) gateVisit(ctx context.Context, kvGraph *bus.KV, ref string) (string, error) {
	e, err := kvGraph.Get(ctx, catalog.SubjectKey(ref))
	if errors.Is(err, bus.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("graph state of %s: %w", ref, err)
	}
	st, err := graph.Decode(e.Value)
	if err != nil {
		s.deps.Log.Warn("ingress-slack: unreadable graph state; treating the work item as not at a gate",
			"work_item", ref, "err", err)
		return "", nil
	}
	if st.Ref != "" && st.Ref != ref {
		// Two refs share a subject key; this state is another item's.
		return "", nil
	}
	g, _ := s.deps.Config().Graphs.Registry().Get(st.Graph)
	return st.GateVisit(g), nil
}

// refusal is why a gate button's press is refused, and what the presser is
// told; a zero refusal lets the press through.
type refusal struct {
	reason, detail, tell string
}

// checkVisit decides whether a press of a gate button drawn for gv may
// answer ref's gate: the button must name ref (the work item its thread is
// bound to) and a visit, and that visit must be the gate the work item waits
// at now. Pressing Approve on an old gate's message must not approve the
// gate that is current (docs/decisions/031-stale-gate-presses-refused.md).
func (s *Service) checkVisit(ctx context.Context, kvGraph *bus.KV, gv slackmsg.GateValue, ref string) (refusal, error) {
	item := slackmsg.ShortRef(ref)
	switch {
	case gv.Visit == "":
		return refusal{reason: reasonStaleGate, detail: "no-visit",
			tell: "This button was drawn before buttons named the gate they answer, so it answers nothing: " +
				"nothing was recorded for " + item + ". Reply in this thread to answer the gate the work item waits at now."}, nil
	case gv.Ref != ref:
		return refusal{reason: reasonInvalid, detail: "gate-button-of-another-work-item",
			tell: "This button belongs to another work item than this thread's (" + item + "); nothing was recorded."}, nil
	}
	current, err := s.gateVisit(ctx, kvGraph, ref)
	if err != nil {
		return refusal{}, err
	}
	if current == gv.Visit {
		return refusal{}, nil
	}
	tell := "This gate has moved on: " + item + " is no longer waiting at the gate this button was drawn for, so nothing was recorded."
	if v, err := graph.ParseVisit(current); err == nil {
		tell += " It now waits at `" + v.Node + "`: answer on its newest message in this thread."
	}
	return refusal{reason: reasonStaleGate, detail: "moved", tell: tell}, nil
}

// tellPresser answers the person who pressed a refused button with a message
// only they see (chat.postEphemeral) in the pressed message's thread. Best
// effort: the refusal stands whether or not Slack takes the message.
func (s *Service) tellPresser(ctx context.Context, in *inbound, text string) {
	if text == "" || in.user == "" || !s.cfg.BotToken.IsSet() {
		return
	}
	opts := []slack.MsgOption{slack.MsgOptionText(text, false)}
	if in.threadTS != "" {
		opts = append(opts, slack.MsgOptionTS(in.threadTS))
	}
	if _, err := s.api().PostEphemeralContext(ctx, in.channel, in.user, opts...); err != nil {
		s.m.told.WithLabelValues("error").Inc()
		s.deps.Log.Warn("ingress-slack: the presser of a refused button was not told", "event_id", in.id, "err", err)
		return
	}
	s.m.told.WithLabelValues("ok").Inc()
}

// drop records a dropped message: channel.dropped with ids and types only
// (R8.2), and the dropped metric.
func (s *Service) drop(ctx context.Context, in *inbound, r result, actor string) result {
	s.m.dropped.WithLabelValues(r.reason, in.via).Inc()
	s.deps.Events.Emit(ctx, "channel.dropped", append(s.attrs(in, r, actor), slog.String("reason", r.reason))...)
	return r
}

// attrs are the event-log attributes of a message: ids and types, never
// its text.
func (s *Service) attrs(in *inbound, r result, actor string) []slog.Attr {
	a := []slog.Attr{slog.String("via", in.via)}
	add := func(k, v string) {
		if v != "" {
			a = append(a, slog.String(k, v))
		}
	}
	add("event_id", in.id)
	add("event_type", string(r.typ))
	add("detail", r.detail)
	add("channel", in.channel)
	add("thread_ts", in.threadTS)
	add("message_ts", in.ts)
	add("work_item", r.ref)
	add("actor", actor)
	if in.press != nil {
		add("action_id", safeLabel(in.press.actionID))
		add("gate_visit", in.press.gate.Visit)
	}
	return a
}

func kindOf(in *inbound) string {
	if in.press != nil {
		return "press"
	}
	return "message"
}
