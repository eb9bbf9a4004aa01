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
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

var errLive = errors.New("a live session exists")

// handle is the per-event entry point (docs/requirements.md K6 order).
func (s *Service) handle(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) error {
	in, ok := s.read(ev)
	if !ok {
		return nil
	}
	in.last, in.redelivered = d.Last(), d.NumDelivered > 1
	s.observeDepth(ctx, d)
	if in.redelivered {
		// A failure after a graph move may have kept its notifications
		// from the bus: publish the current node's again (same ids).
		s.gates.renotify(ctx, in.ref)
	}
	store := s.store.Load()
	cfg := s.deps.Config()

	if in.parse {
		g, err := control.New(cfg.Routing.Control.Enabled, cfg.Routing.Control.Keywords)
		if err != nil {
			// The config loader validates keywords; this is a last guard.
			s.deps.Log.Warn("dispatcher: control keywords invalid; using the defaults", "err", err)
			g, _ = control.New(cfg.Routing.Control.Enabled, nil)
		}
		res := g.Parse(in.body)
		switch {
		case res.Ambiguous:
			cmds := make([]string, len(res.Matched))
			for i, c := range res.Matched {
				cmds[i] = string(c)
			}
			s.m.control.WithLabelValues("ambiguous", "ambiguous").Inc()
			s.deps.Events.Emit(ctx, "control.ambiguous", append(eventAttrs(in),
				slog.String("actor", in.actor), slog.Any("commands", cmds), slog.Bool("relayed", in.relayed))...)
			return nil
		case res.Command != "":
			// The named-actor check, for typed and relayed commands alike
			// (abuse 5): an authorized GitHub login, judged by the config in
			// force now.
			if !authorizedGitHub(cfg, in.actor) {
				s.records.reject(ctx, in, res.Command, RejectUnauthorized)
				return nil
			}
			if res.Command != control.Execute {
				return s.apply(ctx, store, in, res.Command)
			}
			// execute answers the graph's phase-selection gate: recorded as
			// handed to the graph, and delivered like any comment.
			s.records.commanded(ctx, in, res.Command, "handed-to-graph")
		case in.relayed:
			s.records.drop(ctx, in, DropNoCommand)
			return nil
		}
	}
	if !s.instructs(cfg, in) {
		s.records.drop(ctx, in, DropUnauthorized, slog.String("actor", in.actor))
		return nil
	}
	if err := s.wholePayload(ctx, in); err != nil {
		return err
	}
	if in.labeled || in.unlabeled {
		want := in.labeled
		if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
			if r.Labeled == want {
				return sessions.ErrNoChange
			}
			r.Labeled = want
			return nil
		}); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
	}
	rec, _, err := store.Get(ctx, in.ref)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if in.closing {
		return s.closeWorkItem(ctx, store, in, rec)
	}
	if !rec.Session.Live() {
		return s.unmatched(ctx, store, in, rec, "")
	}
	return s.deliver(ctx, store, in)
}

// instructs reports whether in may reach a session: an authorized person's
// comment, record or reply, or activity whose actor (if named) is
// authorized. A collaborator's comment has no actor: mirrored, never
// delivered.
func (s *Service) instructs(cfg *config.Config, in *input) bool {
	switch {
	case in.ev.GetReply() != nil:
		dir := cfg.Routing.AuthorizedUsers
		return authorizedGitHub(cfg, in.actor) || in.slack != "" && dir != nil && dir.Authorized(identity.ChannelSlack, in.slack)
	case in.ev.GetGithubActivity() != nil:
		return in.actor == "" || in.closing || authorizedGitHub(cfg, in.actor)
	}
	return authorizedGitHub(cfg, in.actor)
}

func authorizedGitHub(cfg *config.Config, login string) bool {
	dir := cfg.Routing.AuthorizedUsers
	return login != "" && dir != nil && dir.Authorized(identity.ChannelGitHub, login)
}

// refusal is why no session may be spawned for in (docs/requirements.md K10),
// "" if one may.
func (s *Service) refusal(cfg *config.Config, in *input, rec sessions.Record, cmd control.Command) string {
	armed := false
	switch s.set.SpawnOnUnmatched {
	case SpawnAlways:
		armed = true
	case SpawnLabeled:
		armed = in.labeled || rec.Labeled
	}
	if !armed {
		return DropSpawnPolicy
	}
	c := cfg.Routing.Control
	if c.Enabled && c.RequireStartCommand && !cmd.Is(control.Spawning) && !rec.ArmingRecorded() {
		return DropAwaitingStart
	}
	return ""
}

// unmatched applies the unmatched policy to an event with no live session:
// spawn, or refuse (a control.rejected for a command, a drop otherwise).
// Refused events are never replayed later (docs/requirements.md K10).
func (s *Service) unmatched(ctx context.Context, store *sessions.Store, in *input, rec sessions.Record, cmd control.Command) error {
	if reason := s.refusal(s.deps.Config(), in, rec, cmd); reason != "" {
		if cmd != "" {
			s.records.reject(ctx, in, cmd, reason)
		} else {
			s.records.drop(ctx, in, reason)
		}
		return nil
	}
	return s.spawn(ctx, store, in, cmd)
}

// controlRecord is what a command by in's actor records.
func controlRecord(in *input, cmd control.Command) *sessions.Control {
	src := "comment"
	if in.relayed {
		src = "relayed"
	}
	return &sessions.Control{Command: string(cmd), Source: src, Actor: in.actor,
		RequestedAt: time.Now().UTC().Truncate(time.Second), Note: in.note, EventID: in.ev.GetId()}
}

// apply executes a session command (docs/requirements.md K8). The control
// record is written in the same compare-and-set as the command's effect on the
// registry, after any tmux step, so a redelivery either finds it done or does
// it again.
func (s *Service) apply(ctx context.Context, store *sessions.Store, in *input, cmd control.Command) error {
	rec, _, err := store.Get(ctx, in.ref)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	sess := rec.Session
	if rec.Control != nil && rec.Control.EventID == in.ev.GetId() {
		if cmd.Is(control.Spawning) && sess != nil && sess.Status == sessions.Spawning && sess.Pending == in.ev.GetId() {
			return s.spawn(ctx, store, in, cmd) // a spawn this command began before a crash
		}
		return nil // applied by an earlier delivery
	}
	ctl := controlRecord(in, cmd)
	var effect string
	switch cmd {
	case control.Start, control.Contribute, control.Do:
		if !sess.Live() {
			// The spawn emits session.spawned; a spawning start emits no
			// control.command (as the original).
			return s.unmatched(ctx, store, in, rec, cmd)
		}
		effect, err = s.setStatus(ctx, store, in, ctl, sessions.Paused, sessions.Active, "resumed")
	case control.Resume:
		if !sess.Live() || sess.Status != sessions.Paused {
			s.records.reject(ctx, in, cmd, RejectNothingResume)
			return nil
		}
		effect, err = s.setStatus(ctx, store, in, ctl, sessions.Paused, sessions.Active, "resumed")
	case control.Pause:
		effect, err = s.setStatus(ctx, store, in, ctl, sessions.Active, sessions.Paused, "paused")
	case control.Stop:
		if !sess.Live() {
			effect, err = s.record(ctx, store, in, ctl, "noop")
			break
		}
		if err = s.closeSession(ctx, store, in, sess, "stopped", ctl, false); err == nil {
			effect = "stopped"
		}
	case control.Cleanup:
		effect, err = s.cleanup(ctx, store, in, sess, ctl)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	s.records.commanded(ctx, in, cmd, effect)
	return nil
}

// record writes ctl and nothing else, returning effect.
func (s *Service) record(ctx context.Context, store *sessions.Store, in *input, ctl *sessions.Control, effect string) (string, error) {
	_, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		r.Control = ctl
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	return effect, nil
}

// setStatus records ctl and moves a live session from one status to
// another: effect when it moved, noop when it was not in from.
func (s *Service) setStatus(ctx context.Context, store *sessions.Store, in *input, ctl *sessions.Control, from, to sessions.Status, effect string) (string, error) {
	moved := false
	rec, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		r.Control = ctl
		moved = r.Session.Live() && r.Session.Status == from
		if moved {
			r.Session.Status = to
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	if !moved {
		return "noop", nil
	}
	name := "session.paused"
	if to == sessions.Active {
		name = "session.resumed"
	}
	s.deps.Events.Emit(ctx, name, sessionAttrs(in, rec.Session)...)
	return effect, nil
}

// cleanup releases the session's local resources (its tmux session) and
// forgets it; the control record stays (docs/requirements.md K8).
func (s *Service) cleanup(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, ctl *sessions.Control) (string, error) {
	cleaned := func(found bool) {
		s.deps.Events.Emit(ctx, "session.cleaned", append(sessionAttrs(in, sess),
			slog.String("actor", in.actor), slog.String("source", sourceOf(in)), slog.Bool("found", found))...)
	}
	if sess == nil {
		effect, err := s.record(ctx, store, in, ctl, "nothing-to-clean")
		if err == nil {
			cleaned(false)
		}
		return effect, err
	}
	if sess.Live() {
		if err := s.leases.takeOver(ctx, store, in, sess); err != nil {
			return "", err
		}
		if err := s.panes.kill(ctx, sess.TmuxTarget); err != nil {
			return "", err
		}
	}
	_, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		r.Control, r.Session = ctl, nil
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("registry: %w", err)
	}
	cleaned(true)
	return "cleaned", nil
}

// closeWorkItem handles issues/pull_request closed (docs/requirements.md K9):
// the work item's own close closes its session and clears its control record; a
// linked PR's close leaves it open.
func (s *Service) closeWorkItem(ctx context.Context, store *sessions.Store, in *input, rec sessions.Record) error {
	if in.entity == 0 || in.entity != numberOf(in.ref) || !strings.EqualFold(repoOf(in.ref), in.repository) {
		s.records.drop(ctx, in, DropKeptOpen)
		return nil
	}
	reason := "issue-closed"
	if in.ghEvent == "pull_request" {
		reason = "pr-closed"
		if in.merged {
			reason = "pr-merged"
		}
	}
	if !rec.Session.Live() {
		if rec.Control != nil {
			if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
				r.Control = nil
				return nil
			}); err != nil {
				return fmt.Errorf("registry: %w", err)
			}
		}
		s.records.drop(ctx, in, DropNoSession)
		return nil
	}
	return s.closeSession(ctx, store, in, rec.Session, reason, nil, true)
}

// closeSession kills the session's tmux session and marks it closed,
// writing ctl (a stop) or clearing the control record (a close of the work
// item) in the same compare-and-set.
func (s *Service) closeSession(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, reason string, ctl *sessions.Control, clearControl bool) error {
	if err := s.leases.takeOver(ctx, store, in, sess); err != nil {
		return err
	}
	if err := s.panes.kill(ctx, sess.TmuxTarget); err != nil {
		return err
	}
	rec, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if ctl != nil {
			r.Control = ctl
		}
		if clearControl {
			r.Control = nil
		}
		if r.Session != nil {
			r.Session.Status, r.Session.Pending, r.Session.PendingMarker = sessions.Closed, "", ""
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	s.deps.Events.Emit(ctx, "session.closed", append(sessionAttrs(in, rec.Session), slog.String("reason", reason))...)
	return nil
}

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
	if in.deliveryID == "" || !strings.Contains(s.tmpl.Event, "$delivery_id") {
		return ""
	}
	return deliveryMarker(in)
}

// pasteShown reads the session's pane for the delivery line of in's prompt,
// after a crash left in's paste unrecorded. known is false when the pane
// cannot tell (see paneShows) or the session is hosted elsewhere.
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
		shown, known := s.pasteShown(ctx, in, sess)
		if known && !shown {
			// The paste never reached the harness: type it now, below.
			s.deps.Log.Info("dispatcher: an interrupted paste is not in the session's pane; typing it",
				"work_item", in.ref, "event_id", id, "tmux_target", sess.TmuxTarget)
			break
		}
		if wait, err := s.leases.awaitPaste(ctx, store, in, sess); err != nil || wait {
			if err != nil {
				return err
			}
			return bus.Retry(fmt.Errorf("the paste of %s is unsettled on %s", id, sess.Host), s.set.ElsewhereRetry)
		}
		if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
			if r.Session == nil || r.Session.Pending != id {
				return sessions.ErrNoChange
			}
			r.Session.Remember(id, time.Now().UTC())
			return nil
		}); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		if shown {
			s.records.drop(ctx, in, DropAlreadyProcessed, slog.String("detail", "found in the session's pane"))
			return nil
		}
		s.records.drop(ctx, in, DropDeliveryUncertain)
		return nil
	}
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
	paused := false
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
		return fmt.Errorf("registry: %w", err)
	}
	if paused {
		s.records.drop(ctx, in, DropSessionPaused)
		return nil
	}
	target := sess.TmuxTarget
	if !s.tmux.Probe(ctx, target).LiveOrUnknown() {
		return s.respawn(ctx, store, in, sess, p)
	}
	err = s.tmux.Deliver(ctx, target, p)
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
	return cause
}
