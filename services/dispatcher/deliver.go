package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// unmarkPending clears id's pending mark from ref's session, if it is
// there, on its own deadline: the delivery that set it stops before typing.
func (s *Service) unmarkPending(store *sessions.Store, ref, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := store.Mutate(ctx, ref, func(r *sessions.Record) error {
		if r.Session == nil || r.Session.Pending != id {
			return sessions.ErrNoChange
		}
		r.Session.Pending, r.Session.PendingMarker = "", ""
		return nil
	}); err != nil {
		s.deps.Log.Warn("dispatcher: could not take back the pending mark of a delivery that typed nothing; its redelivery judges it",
			"work_item", ref, "event_id", id, "err", err)
	}
}

// deliveryMarker is the prompt line that names the event's delivery.
func deliveryMarker(in *input) string { return "- delivery: " + in.deliveryID }

// marker is the pane line that shows in's prompt was received, or "" when
// the event template prints no delivery line.
func (s *Service) marker(in *input) string {
	if in.deliveryID == "" || !strings.Contains(s.templates().Event, "$delivery_id") {
		return ""
	}
	return deliveryMarker(in)
}

// pasteShown reads the session's pane for the delivery line of in's prompt,
// after a crash left in's paste unrecorded. known is false when the pane
// cannot tell (see panes.shows) or the session is hosted elsewhere.
func (s *Service) pasteShown(ctx context.Context, in *input, sess *sessions.Session) (shown, known bool) {
	if sess.Host != s.set.Host {
		return false, false
	}
	return s.panes.shows(ctx, sess.TmuxTarget, s.marker(in))
}

// deliver renders the event prompt and types it into the live session,
// respawning the session when its terminal is gone (docs/requirements.md K12).
func (s *Service) deliver(ctx context.Context, store *sessions.Store, in *input) error {
	rec, _, err := store.Get(ctx, in.ref)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	sess := rec.Session
	id := in.ev.GetId()
	switch {
	case !sess.Live():
		return s.unmatched(ctx, store, in, rec, "")
	case sess.Status == sessions.Paused:
		s.records.drop(ctx, in, DropSessionPaused)
		return s.gates.paused(ctx, in)
	case slices.Contains(sess.Delivered, id):
		s.records.drop(ctx, in, DropAlreadyProcessed)
		return nil
	case sess.Pending == id:
		if retype, err := s.judgePending(ctx, store, in, sess); !retype {
			return err
		}
	}
	if sess.Host == s.set.Host {
		s.extendWorkspace(ctx, in)
	}
	return s.paste(ctx, store, in, sess)
}

// judgePending settles the redelivery of an event whose paste began before
// a crash: retype is true when the pane shows the paste never reached the
// harness; otherwise the event waits for the host that began it, or is
// recorded and dropped as received or delivery-uncertain.
func (s *Service) judgePending(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session) (retype bool, err error) {
	id := in.ev.GetId()
	shown, known := s.pasteShown(ctx, in, sess)
	if known && !shown {
		// The paste never reached the harness: type it now.
		s.deps.Log.Info("dispatcher: an interrupted paste is not in the session's pane; typing it",
			"work_item", in.ref, "event_id", id, "tmux_target", sess.TmuxTarget)
		return true, nil
	}
	if wait, err := s.leases.awaitPaste(ctx, store, in, sess); err != nil || wait {
		if err != nil {
			return false, err
		}
		return false, bus.Retry(fmt.Errorf("the paste of %s is unsettled on %s", id, sess.Host), s.set.ElsewhereRetry)
	}
	if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session == nil || r.Session.Pending != id {
			return sessions.ErrNoChange
		}
		r.Session.Remember(id, time.Now().UTC())
		return nil
	}); err != nil {
		return false, fmt.Errorf("registry: %w", err)
	}
	if shown {
		s.records.drop(ctx, in, DropAlreadyProcessed, slog.String("detail", "found in the session's pane"))
		return false, nil
	}
	s.records.drop(ctx, in, DropDeliveryUncertain)
	return false, nil
}

// paste types in's prompt into sess, here: the session is taken over if its
// host is gone, a human gate sees the comment first, and the paste is marked
// pending in the registry before it is typed.
func (s *Service) paste(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session) error {
	if err := s.leases.takeOver(ctx, store, in, sess); err != nil {
		return err
	}
	// Consult-first (docs/requirements.md K20): a human gate classifies
	// an authorized comment before the prompt is rendered, so the session is
	// told the gate's verdict and where the work item went.
	verdict, err := s.gates.consult(ctx, in, sess)
	var stale *staleGateError
	if errors.As(err, &stale) {
		s.deps.Log.Info("dispatcher: a button answer for a gate visit the work item has left; the gate does not move",
			"work_item", in.ref, "event_id", in.ev.GetId(), "answered_visit", stale.answered, "current_visit", stale.current)
		s.records.drop(ctx, in, DropStaleGate, slog.String("gate_visit", stale.answered), slog.String("current_visit", stale.current))
		return nil
	}
	if err != nil {
		return err
	}
	p := s.render(in, false, s.gates.context(ctx, in.ref, verdict))
	s.marks.react(ctx, in, config.ReactionStarted)
	if paused, err := s.markPending(ctx, store, in); err != nil || paused {
		return err
	}
	return s.typeInto(ctx, store, in, sess, p)
}

// markPending records in's event as being typed into its session, unless
// the session was paused or closed meanwhile (paused, and dropped).
func (s *Service) markPending(ctx context.Context, store *sessions.Store, in *input) (paused bool, err error) {
	id := in.ev.GetId()
	if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if !r.Session.Live() || r.Session.Status == sessions.Paused {
			paused = true
			return sessions.ErrNoChange
		}
		r.Session.Pending, r.Session.PendingMarker = id, s.marker(in)
		return nil
	}); err != nil {
		// Nothing has been typed yet, but a timed-out write may have
		// landed: take the mark back, or the redelivery would judge a
		// paste that never began (and, the pane not live here yet after a
		// takeover, drop the event as delivery-uncertain).
		s.unmarkPending(store, in.ref, id)
		return false, fmt.Errorf("registry: %w", err)
	}
	if paused {
		s.records.drop(ctx, in, DropSessionPaused)
	}
	return paused, nil
}

// typeInto types p into sess's terminal, respawning the session with p as
// its boot prompt when the terminal is gone, and records the outcome.
// Deliver reads the terminal's pane itself and answers ErrMissing when it is
// gone, so typeInto does not probe first: each tmux command run on its own
// is a process start on the path of every prompt (docs/performance.md).
func (s *Service) typeInto(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, p string) error {
	target := sess.TmuxTarget
	err := s.tmux.Deliver(ctx, target, p)
	if errors.Is(err, tmux.ErrMissing) {
		return s.respawn(ctx, store, in, sess, p)
	}
	if err != nil {
		return s.failed(ctx, store, in, sess, "dispatch.failed", err)
	}
	if err := s.delivered(ctx, store, in, func(*sessions.Session) {}); err != nil {
		return err
	}
	s.m.deliveries.WithLabelValues("delivered").Inc()
	s.deps.Events.Emit(ctx, "dispatch.succeeded", append(eventAttrs(in),
		slog.String("harness", sess.Harness), slog.String("via", s.set.Runner), slog.String("tmux_target", target))...)
	s.marks.react(ctx, in, config.ReactionCompleted)
	return nil
}

// delivered records in's event as typed into the session (edit adjusts the
// session in the same write).
func (s *Service) delivered(ctx context.Context, store *sessions.Store, in *input, edit func(*sessions.Session)) error {
	_, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session == nil {
			return sessions.ErrNoChange
		}
		edit(r.Session)
		if in.gate || r.Session.AwaitingInput == criticAwaiting+in.ev.GetId() {
			// A person's words reached the session: whatever it asked
			// has its answer, or a reason to go on. So have the
			// findings of the critic round it waits on.
			r.Session.AwaitingInput = ""
		}
		if r.Session.Status == sessions.Spawning {
			r.Session.Status = sessions.Active
		}
		r.Session.Remember(in.ev.GetId(), time.Now().UTC())
		return nil
	})
	if err != nil {
		// The paste happened; a redelivery finds Pending and does not
		// paste again.
		return fmt.Errorf("registry: record delivery: %w", err)
	}
	return nil
}

// failed clears Pending after a delivery that certainly did not happen,
// records it as record (dispatch.failed: the paste failed;
// session.spawn_failed: the respawn that was to take it failed) and asks
// for a retry.
func (s *Service) failed(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, record string, cause error) error {
	_, _ = store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session == nil || r.Session.Pending != in.ev.GetId() {
			return sessions.ErrNoChange
		}
		r.Session.Pending, r.Session.PendingMarker = "", ""
		return nil
	})
	s.m.deliveries.WithLabelValues("failed").Inc()
	s.deps.Events.Emit(ctx, record, append(eventAttrs(in),
		slog.String("harness", sess.Harness), slog.String("via", s.set.Runner), slog.String("tmux_target", sess.TmuxTarget),
		slog.String("error", cause.Error()), slog.Bool("will_retry", !in.last))...)
	s.marks.gaveUp(ctx, in, record)
	return cause
}
