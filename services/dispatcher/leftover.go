package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// A leftover is a tmux session of a work item's name that the loop finds
// where it would spawn, and did not start: one a crash left behind, or one
// started by hand. The loop never spawns over it; it tells the person on
// the work item, and an authorized person adopts it (the loop takes it as
// the work item's session) or ends it (the loop kills it and spawns its
// own) — docs/decisions/100-a-tmux-server-per-session.md.

// Control rejections of adopt and end.
const (
	// RejectNothingToAdopt: no leftover session runs where the work item's
	// session goes, or the work item already has a live session.
	RejectNothingToAdopt = "nothing-to-adopt"
	// RejectLeftoverUnconfined: sessions are sandboxed and the leftover's
	// tmux server was not started in the session sandbox: adopted, it
	// would run unconfined. It can only be ended.
	RejectLeftoverUnconfined = "leftover-unconfined"
	// RejectSessionLive: end is for a leftover; the work item's own live
	// session is stopped with stop.
	RejectSessionLive = "session-live"
)

// ReasonLeftover is the notification's detail reason.
const ReasonLeftover = "session-leftover"

// reportLeftover tells the work item's channels that target, a session
// the loop did not start, holds the work item's place, and how to adopt or
// end it: a catalog.ConflictEscalated notification on the inbox (a conflict
// the loop hands to a human). Its id derives from the event's, so a
// redelivery publishes it once.
func (s *Service) reportLeftover(ctx context.Context, in *input, target string) {
	adopt, end := "the-loop adopt", "the-loop end"
	if g, err := grammarOf(s.deps.Config()); err == nil {
		adopt, end = g.Keyword(control.Adopt), g.Keyword(control.End)
	}
	how := fmt.Sprintf("Comment `%s` to take it as the work item's session, or `%s` to end it and let the loop start its own", adopt, end)
	if adopt == "" || end == "" {
		how = "The adopt and end commands are disabled (routing.control.keywords): end it on the host and the next event starts the loop's own"
	}
	detail := map[string]string{"reason": ReasonLeftover, "tmux_target": target, "host": s.set.Host}
	if s.servers != nil {
		detail["attach"] = "tmux -S " + s.servers.Socket(target) + " attach"
	}
	ev := &loopv1.Event{
		Id:          envelope.LoopID("session-leftover", in.ev.GetId()),
		Source:      catalog.SourceLoop,
		Type:        string(catalog.ConflictEscalated),
		Subject:     in.ref,
		Time:        envelope.NewTime(time.Now()),
		CausationId: in.ev.GetId(),
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{
			Text: "A tmux session `" + target + "` already runs on " + s.set.Host + " where this work item's session goes, " +
				"and the loop did not start it (a crash left it, or someone started it by hand), so no session is started for the work item. " +
				how + " (also `the-loop sessions adopt|end --work-item " + in.ref + " --as LOGIN`).",
			Url:    graphstate.WorkItemURL(in.ref),
			Detail: detail,
		}},
	}
	if _, err := flow.Publish(ctx, s.deps.Conn, ev); err != nil {
		s.deps.Log.Warn("dispatcher: a leftover session holds the work item's place; the channels were not told",
			"work_item", in.ref, "tmux_target", target, "err", err)
		return
	}
	s.deps.Log.Info("dispatcher: a leftover session holds the work item's place; the channels are told",
		"work_item", in.ref, "tmux_target", target, "notice_id", ev.GetId())
}

// adopt takes the leftover tmux session of in's work item as its session:
// the registry records it (active, on this host), and events are typed into
// it from now on. It never holds a session endpoint token of the loop's, so
// its harness cannot ask or complete through the endpoint.
func (s *Service) adopt(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, ctl *sessions.Control) (effect, reason string, err error) {
	target := tmux.Target(in.ref)
	if sess.Live() || s.tmux.Probe(ctx, target) != tmux.Live {
		return "", RejectNothingToAdopt, nil
	}
	if s.servers != nil && s.sandboxed() {
		sealed, err := s.servers.Sealed(ctx, target)
		if err != nil {
			return "", "", err
		}
		if !sealed {
			return "", RejectLeftoverUnconfined, nil
		}
	}
	ws, err := s.ensureWorkspace(ctx, in)
	if err != nil {
		return "", "", fmt.Errorf("workspace of %s: %w", in.ref, err)
	}
	h := s.harness()
	_, err = store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session.Live() {
			return errLive
		}
		now := time.Now().UTC()
		r.Control = ctl
		r.Session = &sessions.Session{
			Harness: h.Name(), Cwd: ws.Primary, SpecDir: ws.SpecDir, Workspace: ws.Dir, Host: s.set.Host,
			TmuxTarget: target, Status: sessions.Active, Interaction: string(s.templates().Mode),
			CreatedAt: now, LastEventAt: now,
		}
		if in.prFor != "" {
			r.Session.Kind = sessions.KindPR
		}
		return nil
	})
	if err == errLive {
		return "", RejectNothingToAdopt, nil
	}
	if err != nil {
		return "", "", fmt.Errorf("registry: %w", err)
	}
	s.deps.Log.Info("dispatcher: adopted a leftover session", "work_item", in.ref, "tmux_target", target, "actor", in.actor)
	return "adopted", "", nil
}
