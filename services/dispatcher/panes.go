package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// panes are this host's session terminals as the registry sees them: what a
// pane shows (to settle a paste a crash left unrecorded), whether a resumed
// harness stayed up, and which local sessions must end because the registry
// says they are closed or hosted elsewhere.
type panes struct {
	term terminal
	host string
	// probe is how long a resumed harness must stay up (Settings.ResumeProbe).
	probe time.Duration
	log   *slog.Logger
}

// settle judges, before this host consumes anything, the pastes it
// left unrecorded when it last stopped (a crash between a paste and its
// record): the prompt's marker in the live pane means received (recorded as
// delivered), a live pane without it means never typed (Pending cleared, so
// the redelivery types it, here or on the host that has the partition now).
// A pane that cannot tell clears the marker: whoever gets the redelivery
// drops it as delivery-uncertain instead of waiting for this host.
func (pn *panes) settle(ctx context.Context, store *sessions.Store) {
	recs, err := store.List(ctx)
	if err != nil {
		pn.log.Warn("dispatcher: unrecorded pastes: registry unreadable", "err", err)
		return
	}
	for _, r := range recs {
		sess := r.Session
		if !sess.Live() || sess.Host != pn.host || sess.Pending == "" {
			continue
		}
		id, verdict := sess.Pending, "uncertain"
		switch shown, known := pn.shows(ctx, sess.TmuxTarget, sess.PendingMarker); {
		case known && shown:
			verdict = "received"
		case known:
			verdict = "not-typed"
		}
		if _, err := store.Mutate(ctx, r.Ref, func(rec *sessions.Record) error {
			if rec.Session == nil || rec.Session.Pending != id {
				return sessions.ErrNoChange
			}
			switch verdict {
			case "received":
				rec.Session.Remember(id, time.Now().UTC())
			case "not-typed":
				rec.Session.Pending, rec.Session.PendingMarker = "", ""
			default:
				rec.Session.PendingMarker = ""
			}
			return nil
		}); err != nil {
			pn.log.Warn("dispatcher: unrecorded paste: registry", "work_item", r.Ref, "err", err)
			continue
		}
		pn.log.Info("dispatcher: settled an unrecorded paste", "work_item", r.Ref, "event_id", id, "verdict", verdict)
	}
}

// reconcile kills this host's loop-* tmux sessions that the registry says
// are closed, gone or hosted elsewhere: after a takeover the old host must
// not keep a second live session of the work item when it comes back.
func (pn *panes) reconcile(ctx context.Context, store *sessions.Store) {
	names, err := pn.term.Sessions(ctx)
	if err != nil || len(names) == 0 {
		return
	}
	recs, err := store.List(ctx)
	if err != nil {
		pn.log.Warn("dispatcher: reconcile: registry unreadable; leaving tmux sessions alone", "err", err)
		return
	}
	ours := map[string]bool{}
	for _, r := range recs {
		if r.Session.Live() && r.Session.Host == pn.host {
			ours[r.Session.TmuxTarget] = true
		}
	}
	owned := map[string]string{}
	for _, r := range recs {
		if r.Session != nil {
			owned[r.Session.TmuxTarget] = r.Ref
		}
	}
	for _, n := range names {
		ref, known := owned[n]
		if !known || ours[n] {
			// Not ours to judge (an operator's session that happens to share
			// the server), or ours and live.
			continue
		}
		if err := pn.term.Kill(ctx, n); err == nil {
			pn.log.Warn("dispatcher: killed a stale local session whose work item is closed or hosted elsewhere",
				"tmux_target", n, "work_item", ref)
		}
	}
}

// kill ends target's tmux session; a session that is already gone is fine.
func (pn *panes) kill(ctx context.Context, target string) error {
	if target == "" {
		return nil
	}
	if err := pn.term.Kill(ctx, target); err != nil && pn.term.Probe(ctx, target) != tmux.Absent {
		return fmt.Errorf("kill %s: %w", target, err)
	}
	return nil
}

// shows reports whether line stands in target's live pane. known is
// false when the pane cannot tell: no line to look for (the template prints
// no delivery), the pane is not live here, or tmux did not answer.
func (pn *panes) shows(ctx context.Context, target, line string) (shown, known bool) {
	if line == "" || pn.term.Probe(ctx, target) != tmux.Live {
		return false, false
	}
	shown, err := pn.term.Shows(ctx, target, line)
	if err != nil {
		pn.log.Warn("dispatcher: cannot read the session's pane", "tmux_target", target, "err", err)
		return false, false
	}
	return shown, true
}

// stillLive waits ResumeProbe and reports whether target's harness is still
// running: an unknown conversation id makes a resuming harness exit at once.
// The wait is a heuristic about the harness, not about our own correctness:
// a false "live" only means the next event respawns it.
func (pn *panes) stillLive(ctx context.Context, target string) bool {
	if pn.probe > 0 {
		t := time.NewTimer(pn.probe)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	return pn.term.Probe(ctx, target) == tmux.Live
}
