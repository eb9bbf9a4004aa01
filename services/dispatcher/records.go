package dispatcher

import (
	"context"
	"log/slog"

	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/sessions"
)

// recorder writes what the dispatcher records about an event it settles
// without typing it (a drop, a control command's effect or rejection) to
// the event log, with the counters that go with each.
type recorder struct {
	events *eventlog.Logger
	m      *metrics
}

// Drop reasons of dispatch.dropped. The first six are the original's.
const (
	DropSpawnPolicy      = "spawn-policy"
	DropAwaitingStart    = "awaiting-start"
	DropSessionPaused    = "session-paused"
	DropAlreadyProcessed = "already-processed"
	DropSessionOccupied  = "session-occupied"
	DropUnauthorized     = "unauthorized-actor"
	// DropDeliveryUncertain: a redelivery of an event whose paste may have
	// happened before a crash; it is not typed again (at most once).
	DropDeliveryUncertain = "delivery-uncertain"
	// DropNoCommand: a relayed control record in which the grammar in force
	// finds no command; it is never delivered as prose.
	DropNoCommand = "no-command"
	// DropKeptOpen: a close of a linked pull request, not of the work item
	// its session belongs to (docs/requirements.md K6).
	DropKeptOpen = "kept-open"
	// DropNoSession: a close of a work item that has no live session.
	DropNoSession = "no-session"
	// DropStaleGate: a relayed button answer for a gate visit the work item
	// has left; it neither moves the gate nor reaches the session
	// (docs/decisions/031-stale-gate-presses-refused.md).
	DropStaleGate = "stale-gate"
	// DropPROwnSession: a pull request's event on the work item it
	// delivers, under routing.tmux.sessionPerPr: the pull request's own
	// session gets it (the work item's is told only that it was opened).
	DropPROwnSession = "pr-own-session"
)

// Control rejection reasons (control.rejected).
const (
	RejectUnauthorized  = "unauthorized-actor"
	RejectNothingResume = "nothing-to-resume"
)

// drop records a dispatch.dropped. A channel member's reply that reaches no
// session is also the channel's drop, undeliverable (its record on the
// ledger stands), so that the channel's own records say what became of it.
func (r recorder) drop(ctx context.Context, in *input, reason string, extra ...slog.Attr) {
	r.m.dropped.WithLabelValues(reason).Inc()
	r.events.Emit(ctx, "dispatch.dropped", append(append([]slog.Attr{slog.String("reason", reason)}, eventAttrs(in)...), extra...)...)
	if in.ev.GetReply() == nil || reason == DropAlreadyProcessed || reason == DropDeliveryUncertain {
		return
	}
	c := in.ev.GetConversation()
	r.events.Emit(ctx, "channel.dropped", slog.String("reason", "undeliverable"), slog.String("detail", reason),
		slog.String("event_id", in.ev.GetId()), slog.String("event_type", in.ev.GetType()), slog.String("work_item", in.ref),
		slog.String("origin", in.ev.GetSource()), slog.String("channel", c.GetChannel()), slog.String("thread_ts", c.GetThreadTs()),
		slog.String("message_ts", c.GetMessageTs()), slog.String("actor", in.slack))
}

// ambiguous records a control.ambiguous: in's body names several commands,
// so none is carried out.
func (r recorder) ambiguous(ctx context.Context, in *input, matched []control.Command) {
	cmds := make([]string, len(matched))
	for i, c := range matched {
		cmds[i] = string(c)
	}
	r.m.control.WithLabelValues("ambiguous", "ambiguous").Inc()
	r.events.Emit(ctx, "control.ambiguous", append(eventAttrs(in),
		slog.String("actor", in.actor), slog.Any("commands", cmds), slog.Bool("relayed", in.relayed))...)
}

// reject records a control.rejected; nothing is recorded in the registry.
func (r recorder) reject(ctx context.Context, in *input, cmd control.Command, reason string) {
	r.m.control.WithLabelValues(string(cmd), "rejected").Inc()
	r.events.Emit(ctx, "control.rejected", append(eventAttrs(in),
		slog.String("command", string(cmd)), slog.String("reason", reason), slog.String("actor", in.actor),
		slog.String("source", sourceOf(in)), slog.Bool("relayed", in.relayed))...)
}

// commanded records a control.command with its effect.
func (r recorder) commanded(ctx context.Context, in *input, cmd control.Command, effect string) {
	r.m.control.WithLabelValues(string(cmd), effect).Inc()
	r.events.Emit(ctx, "control.command", append(eventAttrs(in),
		slog.String("command", string(cmd)), slog.String("effect", effect), slog.String("actor", in.actor),
		slog.String("source", sourceOf(in)), slog.Bool("relayed", in.relayed))...)
}

func sourceOf(in *input) string {
	if in.relayed {
		return "relayed"
	}
	return "comment"
}

func sessionAttrs(in *input, sess *sessions.Session) []slog.Attr {
	attrs := eventAttrs(in)
	if sess != nil {
		attrs = append(attrs, slog.String("harness", sess.Harness), slog.String("harness_session_id", sess.HarnessSessionID),
			slog.String("tmux_target", sess.TmuxTarget), slog.String("host", sess.Host))
	}
	return attrs
}
