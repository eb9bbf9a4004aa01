package ledgerwriter

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// The marks are the loop's own writes on GitHub about its work, which the
// dispatcher asks for through the inbox because only the ledger-writer
// writes GitHub (docs/decisions/115-alerts-reactions-and-phase-labels.md):
//
//   - a reaction on the comment (or issue) the loop acted on, as
//     routing.reactions says; GitHub keeps one reaction per user and content,
//     so a redelivery adds nothing;
//   - the work item's loop:<phase> label, the only one of its prefix; read
//     before it is written, so a redelivery writes nothing;
//   - the announcement of a work item's first session, a recorded comment
//     like any other: claimed and read back by its event id, so it is on
//     the work item once.
//
// A reaction or a label is a courtesy: one GitHub refuses for good, or that
// still fails on the event's last delivery, is logged (ledger.mark_failed)
// and acknowledged, never dead-lettered, and never holds the work item's
// other events back. Nothing is fanned out: no channel and no session reads
// a mark.

// PhasePrefix is what every phase label starts with, as in the original.
const PhasePrefix = "loop:"

var (
	markPhaseRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$`)
	markTmuxRE  = regexp.MustCompile(`^loop-[A-Za-z0-9_-]{1,200}$`)
	markNameRE  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,39}$`)
)

// mark applies the mark ev asks for.
func (s *Service) mark(ctx context.Context, stop <-chan struct{}, ev *loopv1.Event, d *bus.Delivery) error {
	typ := catalog.Type(ev.GetType())
	if s.gh == nil {
		s.deps.Log.LogAttrs(ctx, slog.LevelDebug, "ledger-writer: mark skipped, GitHub is not configured", s.logAttrs(ev, d)...)
		return nil
	}
	r, ok := parseRef(ev.GetSubject())
	if !ok {
		return s.markFailed(ctx, ev, d, "bad-ref", errors.New("work item "+ev.GetSubject()+" is not a github:owner/repo#N ref"))
	}
	cfg := s.deps.Config()
	detail := ev.GetNotification().GetDetail()
	switch typ {
	case catalog.Announcement:
		if !cfg.Routing.Announce.Enabled {
			return nil
		}
		// A recorded comment: the claim and the read-back make it one.
		if _, err := s.record(ctx, stop, ev, d, catalog.RecordAnnouncement); err != nil {
			return err
		}
		s.deps.Events.Emit(ctx, "ledger.marked", slog.String("event_id", ev.GetId()), slog.String("mark", string(typ)),
			slog.String("work_item", ev.GetSubject()))
		return nil
	case catalog.Reaction:
		state := detail["state"]
		content := cfg.Routing.Reactions.Content(state)
		if content == "" {
			return nil // off, or this state skipped
		}
		var id int64
		if c := detail["comment_id"]; c != "" {
			n, err := strconv.ParseInt(c, 10, 64)
			if err != nil || n <= 0 {
				return s.markFailed(ctx, ev, d, "invalid", errors.New("comment id "+strconv.Quote(c)))
			}
			id = n
		}
		if repo := detail["repo"]; repo != "" {
			// A comment of a linked pull request in another repository.
			owner, name, ok := parseRepo(repo)
			if !ok {
				return s.markFailed(ctx, ev, d, "invalid", errors.New("repository "+strconv.Quote(repo)))
			}
			r.Owner, r.Repo = owner, name
		}
		if err := s.pacer.wait(ctx, stop); err != nil {
			return s.interrupted(err)
		}
		if err := s.gh.react(ctx, r, id, detail["review"] == "true", content); err != nil {
			return s.markFailed(ctx, ev, d, "", err)
		}
		s.deps.Events.Emit(ctx, "ledger.marked", slog.String("event_id", ev.GetId()), slog.String("mark", string(typ)),
			slog.String("work_item", ev.GetSubject()), slog.String("state", state), slog.String("content", content),
			slog.Int64("comment_id", id), slog.String("causation_id", ev.GetCausationId()))
		return nil
	case catalog.PhaseLabel:
		phase := detail["phase"]
		if !markPhaseRE.MatchString(phase) {
			return s.markFailed(ctx, ev, d, "invalid", errors.New("phase "+strconv.Quote(phase)))
		}
		label := PhasePrefix + phase
		// A move is two content writes (the old label removed, the new
		// one added); each is paced, the read before them is not.
		var paused error
		pace := func() error {
			if err := s.pacer.wait(ctx, stop); err != nil {
				paused = err
				return err
			}
			return nil
		}
		changed, err := s.gh.phaseLabel(ctx, r, PhasePrefix, label, pace)
		if paused != nil {
			return s.interrupted(paused)
		}
		if err != nil {
			return s.markFailed(ctx, ev, d, "", err)
		}
		s.deps.Events.Emit(ctx, "ledger.marked", slog.String("event_id", ev.GetId()), slog.String("mark", string(typ)),
			slog.String("work_item", ev.GetSubject()), slog.String("label", label), slog.Bool("changed", changed))
		return nil
	}
	return nil
}

// markFailed settles a reaction or label that did not land: retried while
// the failure may pass and deliveries are left, logged and acknowledged
// otherwise. reason overrides the failure's own.
func (s *Service) markFailed(ctx context.Context, ev *loopv1.Event, d *bus.Delivery, reason string, err error) error {
	var f *failure
	if !errors.As(err, &f) {
		f = &failure{err: err, reason: reason, permanent: true}
	}
	if reason == "" {
		reason = f.reason
	}
	if !f.permanent && !d.Last() {
		s.m.retried.WithLabelValues(f.reason).Inc()
		wait := s.backoff(int(d.NumDelivered))
		if f.wait > 0 {
			wait = s.namedWait(f.wait)
		}
		return bus.Retry(err, wait)
	}
	s.m.failed.WithLabelValues(ev.GetType(), reason).Inc()
	s.deps.Events.Emit(ctx, "ledger.mark_failed", slog.String("event_id", ev.GetId()), slog.String("mark", ev.GetType()),
		slog.String("work_item", ev.GetSubject()), slog.String("reason", reason))
	s.deps.Log.LogAttrs(ctx, slog.LevelWarn, "ledger-writer: mark not written; it is best effort",
		s.logAttrs(ev, d, slog.String("reason", reason), slog.Any("err", err))...)
	return nil
}

// announcement is the visible text announcing a work item's first session.
// Only the mark's own fields reach it, each checked against what the
// dispatcher writes, so no event text can be injected: the tmux session, and
// the harness. It names the socket directory by its setting, never by a path
// of the dispatcher's machine.
func announcement(ev *loopv1.Event) (string, error) {
	detail := ev.GetNotification().GetDetail()
	target, harness := detail["tmux_target"], detail["harness"]
	if !markTmuxRE.MatchString(target) {
		return "", refuse("invalid", "announcement %s: tmux session %q", ev.GetId(), target)
	}
	if !markNameRE.MatchString(harness) {
		return "", refuse("invalid", "announcement %s: harness %q", ev.GetId(), harness)
	}
	var b strings.Builder
	b.WriteString("🖥️ **the-loop** started a session for this work item.\n\n")
	b.WriteString("| | |\n|---|---|\n")
	b.WriteString("| tmux session | `" + target + "` |\n")
	b.WriteString("| harness | `" + harness + "` |\n\n")
	b.WriteString("To watch it, on the machine that runs the dispatcher (each session has a tmux server of its own, its socket in `LOOP_TMUX_DIR`):\n\n")
	b.WriteString("```sh\ntmux -S \"$LOOP_TMUX_DIR/" + target + "\" attach -r\n```\n\n")
	b.WriteString("A respawn keeps this session's name, so the command stays right.")
	return b.String(), nil
}
