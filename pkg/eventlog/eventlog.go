// Package eventlog writes the event log (docs/requirements.md R8;
// decision 062): one record per bus step, channel decision, routing, dispatch,
// control, session and graph action, as a JSON log line through slog and as a
// message on loop.log.<service>.<type>, which `the-loop events --follow` tails.
//
// Records carry ids and types, never message text and never tokens (R8.2):
// Emit drops any attribute whose key names content or a secret, so a careless
// caller cannot leak one.
//
// The log-type catalog here is distinct from the bus catalog in pkg/catalog,
// although two names (session.awaiting_input, control.command) are in both;
// see docs/decisions (decision 006).
package eventlog

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/tracing"
)

// Type describes one event-log record type.
type Type struct {
	Name        string
	Level       slog.Level
	Description string
}

var types = []Type{
	{"bus.published", slog.LevelInfo, "An event was accepted by the bus (PubAck received)."},
	{"bus.recorded", slog.LevelInfo, "The ledger recorded an off-ledger event on GitHub and fanned it out."},
	{"bus.record_failed", slog.LevelWarn, "The ledger could not record an event; it went to the DLQ."},
	{"bus.dead_lettered", slog.LevelWarn, "A message exhausted its deliveries or failed permanently and was copied to LOOP_DLQ."},
	{"bus.forged_event", slog.LevelWarn, "A consumer refused a message whose signature does not make it its publisher's (reason: unsigned, unknown-signer, bad-signature, not-allowed — a signer that may not raise its type); it went to the DLQ, unhandled."},
	{"ledger.marked", slog.LevelInfo, "The ledger-writer wrote one of the loop's marks on GitHub: a reaction (state, content), the work item's phase label, loop: and its phase (label; changed false when it was already so) or the announcement of its first session."},
	{"ledger.mark_failed", slog.LevelWarn, "The ledger-writer gave up on a mark (reason): it is best effort and never holds the work item's events back."},
	{"bus.replayed", slog.LevelInfo, "A DLQ entry was republished under a new id (the-loop dlq replay)."},
	{"channel.posted", slog.LevelInfo, "A channel rendered an event."},
	{"channel.post_failed", slog.LevelWarn, "A channel failed to render an event."},
	{"channel.reply_received", slog.LevelInfo, "A channel message was received."},
	{"channel.dropped", slog.LevelInfo, "A channel message was dropped; reason is one of unmapped, self-authored, unauthorized-actor, undeliverable (recorded, but it reached no session: detail says why), unpublishable-event, kickoff-disabled, ambiguous-control, channel-disabled, ignored, invalid, stale-gate."},
	{"channel.kickoff_created", slog.LevelInfo, "A kickoff created a work item and bound its conversation to it."},
	{"routing.routed", slog.LevelInfo, "A GitHub delivery was routed to work items."},
	{"routing.dropped", slog.LevelInfo, "A GitHub delivery or comment was dropped; reason is one of disabled-event, duplicate-delivery, duplicate-event, no-work-item, self-authored, forged-marker, unauthorized-actor, fork-ci, comment-changed, bus-unavailable, bus-full."},
	{"routing.forged_envelope", slog.LevelWarn, "A comment carried a ledger envelope that does not verify for the record it sits in (another key, a copy from another record, an edited text, version 1); it was judged as an ordinary comment by its poster."},
	{"webhook.rejected", slog.LevelWarn, "Webhook requests were refused before routing: GitHub's (via webhook: over-capacity, invalid-signature, payload-too-large, slow-body, unreadable-body, unsupported-content-type, invalid-payload, missing-event, missing-delivery) or Slack's Events API and interactions (via events: no-signing-secret, bad-signature-headers, stale-timestamp, bad-signature, too-large, slow-body, unreadable, over-capacity, malformed); at most one record per reason per minute, count says how many since the last."},
	{"dispatch.succeeded", slog.LevelInfo, "An event was delivered to an agent session."},
	{"dispatch.dropped", slog.LevelInfo, "An event was not delivered to a session; reason is one of spawn-policy, awaiting-start, session-paused, already-processed, session-occupied, unauthorized-actor, delivery-uncertain, no-command, kept-open, no-session, stale-gate, override-refused, standing-not-started."},
	{"dispatch.failed", slog.LevelError, "Delivering to a session failed."},
	{"control.command", slog.LevelInfo, "A control command was recognised and applied."},
	{"control.rejected", slog.LevelWarn, "A control command was refused."},
	{"control.ambiguous", slog.LevelWarn, "A comment named two different control commands; nothing was executed."},
	{"session.spawned", slog.LevelInfo, "An agent session was started."},
	{"session.awaiting_input", slog.LevelInfo, "An agent session asked a question (the-loop ask); outcome is recorded (comment_url names the question comment), pending or failed."},
	{"session.respawned", slog.LevelInfo, "A dead agent session was started again, resumed when the harness could."},
	{"session.spawn_failed", slog.LevelError, "Starting an agent session failed."},
	{"session.taken_over", slog.LevelWarn, "A dispatcher replica took over a session whose host stopped renewing its lease."},
	{"session.cleaned", slog.LevelInfo, "A work item's session and its records were removed."},
	{"session.paused", slog.LevelInfo, "An agent session was paused."},
	{"session.resumed", slog.LevelInfo, "An agent session was resumed."},
	{"session.closed", slog.LevelInfo, "An agent session was closed."},
	{"session.registered", slog.LevelInfo, "An agent session recorded the conversation id its harness chose (the-loop sessions register), so a respawn resumes it."},
	{"session.pr_linked", slog.LevelInfo, "An agent session recorded a pull request as delivering its work item (the-loop sessions link-pr); already says it was linked before."},
	{"session.workspace_removed", slog.LevelInfo, "A work item's workspace was removed after its session was cleaned up or the work item closed; kept_branches names branches with unpushed work kept for a person (kept: LOOP_WORKSPACE_KEEP left everything)."},
	{"session.workspace_trusted", slog.LevelInfo, "The harness's first-run questions (Claude Code's workspace trust; its bypass-permissions notice only when the harness's arguments ask for bypass) were answered for a session's checkout (routing.harnessTrust)."},
	{"critic.started", slog.LevelInfo, "A critic round an agent session asked for (the-loop critic run) started: critic, node and round id; never the prompt."},
	{"critic.finished", slog.LevelInfo, "A critic round ended: outcome is ok, failed or timed out, with its exit code and duration; comment_url names its findings' record once recorded. Never the findings."},
	{"session.refused", slog.LevelWarn, "A request to the session endpoint was refused; reason is one of no-token, bad-token, no-session, other-work-item, hosted-elsewhere, empty-question, bad-request, too-large, registry-unavailable, human-gate, no-critic, critic-busy."},
	{"graph.advanced", slog.LevelInfo, "A work item's graph moved to another node."},
	{"graph.completed", slog.LevelInfo, "A work item's graph reached a terminal node."},
	{"graph.held", slog.LevelInfo, "A session's graph complete was refused because its node's exit hooks found it not done (an artifact's findings, failed tests); findings counts them, and the session was told each."},
	{"graph.tests", slog.LevelInfo, "A verify-tests hook's run of the test command finished in a session's checkout; passed says how, took how long it ran."},
	{"graph.replayed", slog.LevelWarn, "A record carrying an event id that already passed a gate, on another comment, was not applied again (a copied envelope)."},
	{"config.reloaded", slog.LevelInfo, "The operator config was reloaded."},
	{"config.reload_failed", slog.LevelWarn, "A config edit was refused; the last good config stays."},
	{"service.started", slog.LevelInfo, "A service started."},
	{"service.stopped", slog.LevelInfo, "A service stopped."},
}

// Types returns the registered log types in registration order.
func Types() []Type { return slices.Clone(types) }

// Lookup returns the log type called name.
func Lookup(name string) (Type, bool) {
	for _, t := range types {
		if t.Name == name {
			return t, true
		}
	}
	return Type{}, false
}

// forbiddenKeys name attributes that would carry content or secrets.
var forbiddenKeys = []string{"text", "body", "question", "message", "token", "secret", "password", "key", "payload"}

func forbidden(key string) bool {
	k := strings.ToLower(key)
	for _, f := range forbiddenKeys {
		if k == f || strings.HasSuffix(k, "_"+f) {
			return true
		}
	}
	return false
}

// Publisher sends a log record to the bus. It is best-effort: the event log
// never blocks or fails the work it describes.
type Publisher interface {
	PublishLog(ctx context.Context, subject string, data []byte) error
}

// Logger emits event-log records for one service.
type Logger struct {
	service string
	log     *slog.Logger
	pub     Publisher
	now     func() time.Time
	pid     int
	q       *Queue
}

// New returns a Logger for service. pub may be nil (slog only).
func New(service string, log *slog.Logger, pub Publisher) *Logger {
	return &Logger{service: service, log: log, pub: pub, now: time.Now, pid: os.Getpid()}
}

// Queued returns a copy of l whose Emit hands records to q and returns at
// once (see Queue).
func (l *Logger) Queued(q *Queue) *Logger {
	c := *l
	c.q = q
	return &c
}

// Record is one event-log record as it appears on loop.log.>.
type Record struct {
	TS     string         `json:"ts"`
	Source string         `json:"source"`
	Event  string         `json:"event"`
	Level  string         `json:"level"`
	PID    int            `json:"pid"`
	Fields map[string]any `json:"fields,omitempty"`
	// TraceID is the trace of the event this record is about, when it
	// was emitted inside one (docs/decisions/077-traces-across-the-hops.md).
	TraceID string `json:"trace_id,omitempty"`
}

// Emit writes one record of type name. Unregistered names are a programming
// error and are logged as such rather than dropped silently.
func (l *Logger) Emit(ctx context.Context, name string, attrs ...slog.Attr) {
	at := l.now()
	// The caller may reuse its slice once Emit returns.
	if l.q != nil && l.q.put(queued{l: l, ctx: context.WithoutCancel(ctx), name: name, at: at, attrs: slices.Clone(attrs)}) {
		return
	}
	l.emit(ctx, name, at, attrs)
}

func (l *Logger) emit(ctx context.Context, name string, at time.Time, attrs []slog.Attr) {
	t, ok := Lookup(name)
	if !ok {
		l.log.LogAttrs(ctx, slog.LevelError, "unregistered event-log type", slog.String("event", name))
		t = Type{Name: name, Level: slog.LevelInfo}
	}
	fields := make(map[string]any, len(attrs))
	kept := attrs[:0:0]
	for _, a := range attrs {
		if forbidden(a.Key) {
			l.log.LogAttrs(ctx, slog.LevelError, "event-log attribute dropped: records carry ids, never content or secrets",
				slog.String("event", name), slog.String("attr", a.Key))
			continue
		}
		kept = append(kept, a)
		fields[a.Key] = a.Value.Resolve().Any()
	}
	l.log.LogAttrs(ctx, t.Level, name, append([]slog.Attr{slog.String("event", name)}, kept...)...)
	if l.pub == nil {
		return
	}
	rec := Record{
		TS:      at.UTC().Format("2006-01-02T15:04:05.000Z"),
		Source:  l.service,
		Event:   name,
		Level:   strings.ToLower(t.Level.String()),
		PID:     l.pid,
		Fields:  fields,
		TraceID: tracing.TraceID(ctx),
	}
	data, err := json.Marshal(rec)
	if err != nil {
		l.log.LogAttrs(ctx, slog.LevelWarn, "event-log record not encodable", slog.String("event", name), slog.Any("err", err))
		return
	}
	if err := l.pub.PublishLog(ctx, catalog.LogSubject(l.service, name), data); err != nil {
		l.log.LogAttrs(ctx, slog.LevelWarn, "event-log record not published", slog.String("event", name), slog.Any("err", err))
	}
}

// Format renders a record for a terminal, one line.
func Format(r Record) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %-5s %-16s %s", r.TS, r.Level, r.Source, r.Event)
	keys := make([]string, 0, len(r.Fields))
	for k := range r.Fields {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, r.Fields[k])
	}
	if r.TraceID != "" {
		fmt.Fprintf(&b, " trace=%s", r.TraceID)
	}
	return b.String()
}
