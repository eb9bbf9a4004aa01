package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
)

// spawn starts a new session for in's work item with the spawn template as
// its boot prompt (docs/requirements.md K12). The registry is claimed first
// (status spawning, Pending = this event) so that a crash between the claim and
// tmux is recognised: the redelivery finds its own claim, and a live tmux
// session of that name is then its own spawn, not an occupant. Any other live
// session of that name is never replaced.
func (s *Service) spawn(ctx context.Context, store *sessions.Store, in *input, cmd control.Command) error {
	h := s.harness()
	target := tmux.Target(in.ref)
	token, tokenHash, err := newSessionToken(in.ref)
	if err != nil {
		return err
	}
	// The work item's own checkouts, before the claim names them: a
	// workspace that cannot be made (the repository unreachable, git
	// failing) is a spawn that failed, and is retried.
	ws, err := s.ensureWorkspace(ctx, in)
	if err != nil {
		s.m.spawns.WithLabelValues("failed").Inc()
		s.deps.Events.Emit(ctx, "session.spawn_failed", append(eventAttrs(in), slog.String("harness", h.Name()),
			slog.String("tmux_target", target), slog.String("error", "workspace: "+err.Error()), slog.Bool("will_retry", !in.last))...)
		s.marks.gaveUp(ctx, in, "the session's spawn")
		return fmt.Errorf("workspace of %s: %w", in.ref, err)
	}
	c, err := s.claimSpawn(ctx, store, in, cmd, target, tokenHash, ws, h)
	if errors.Is(err, errLive) {
		return s.deliver(ctx, store, in)
	}
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	st, standing := s.standing(in.ref)
	s.marks.react(ctx, in, config.ReactionStarted)
	var p string
	if standing {
		// A standing session has no graph: it boots with its directive
		// and brief (standing.go).
		p = standingPrompt(st, announces(s.deps.Config(), st))
	} else {
		// The graph starts with the session, before the boot prompt is
		// rendered, so the prompt shows where the work item stands.
		if err := s.gates.start(ctx, in, cmd); err != nil {
			return err
		}
		p = s.render(in, true, s.gates.context(ctx, in.ref, ""))
	}
	s.prepareHarness(ctx, in, h, ws.Primary)
	env := s.sessionEnv(h, token)
	argv, err := s.confineSession(target, append([]string{h.Command()}, h.SpawnArgv(p, c.id)...), env, ws)
	if err == nil {
		err = s.tmux.Spawn(ctx, target, ws.Primary, env, argv)
	}
	if err == nil && !h.BootPromptInArgv() {
		// A harness that takes no prompt on its command line reads the
		// boot prompt as its first typed turn.
		err = s.tmux.Deliver(ctx, target, p)
	}
	started := err == nil
	if err != nil && c.recovering && errors.Is(err, tmux.ErrOccupied) {
		err = nil // our own spawn from before the crash: it booted with this event
	}
	if err != nil {
		return s.spawnFailed(ctx, store, in, c, target, err)
	}
	rec, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session == nil || r.Session.HarnessSessionID != c.id {
			return sessions.ErrNoChange
		}
		r.Session.Status = sessions.Active
		if started {
			r.Session.TokenHash = tokenHash
		}
		r.Session.NextTokenHash = ""
		r.Session.Remember(in.ev.GetId(), time.Now().UTC())
		return nil
	})
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	s.m.spawns.WithLabelValues("spawn").Inc()
	s.m.deliveries.WithLabelValues("spawned").Inc()
	s.deps.Events.Emit(ctx, "session.spawned", append(sessionAttrs(in, rec.Session),
		slog.String("runner", s.set.Runner), slog.String("interaction", string(s.templates().Mode)))...)
	if standing {
		if announces(s.deps.Config(), st) {
			s.announce(ctx, in, st, c.id, target)
		}
	} else {
		s.marks.spawned(ctx, in, rec.Session, c.prev == nil)
	}
	return nil
}

// spawnClaim is what claimSpawn wrote: the new harness session id, and what
// the record held before (to undo the claim when the spawn fails).
type spawnClaim struct {
	id          string
	prev        *sessions.Session
	prevControl *sessions.Control
	// recovering: the claim is this host's own, from before a crash.
	recovering bool
}

// claimSpawn writes the spawning claim for in's work item (with cmd's
// control record), or finds this host's own claim of the same event from
// before a crash. errLive: another live session holds the work item.
func (s *Service) claimSpawn(ctx context.Context, store *sessions.Store, in *input, cmd control.Command, target, tokenHash string, ws *workspace.Workspace, h agent.Harness) (spawnClaim, error) {
	evID := in.ev.GetId()
	var ctl *sessions.Control
	if cmd != "" {
		ctl = controlRecord(in, cmd)
	}
	var c spawnClaim
	_, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		c = spawnClaim{prevControl: r.Control}
		if r.Session.Live() {
			if r.Session.Status == sessions.Spawning && r.Session.Pending == evID && r.Session.Host == s.set.Host {
				// Our own claim from before a crash. A process that claim
				// started holds the token of that attempt; one started now
				// gets this token, whose hash replaces the old one only once
				// it runs.
				c.recovering, c.id = true, r.Session.HarnessSessionID
				r.Session.NextTokenHash = tokenHash
				return nil
			}
			return errLive
		}
		if r.Session != nil {
			prev := *r.Session
			c.prev = &prev
		}
		c.id = s.set.NewSessionID()
		if h.ChoosesSessionID() {
			// Its own id reaches the registry with `the-loop sessions
			// register`; until then a respawn starts afresh.
			c.id = ""
		}
		if ctl != nil {
			r.Control = ctl
		}
		now := time.Now().UTC()
		r.Session = &sessions.Session{
			Harness: h.Name(), HarnessSessionID: c.id, Cwd: ws.Primary, SpecDir: ws.SpecDir, Workspace: ws.Dir, Host: s.set.Host,
			TmuxTarget: target, Status: sessions.Spawning, Interaction: string(s.templates().Mode),
			CreatedAt: now, LastEventAt: now, Pending: evID, TokenHash: tokenHash,
		}
		if in.prFor != "" {
			r.Session.Kind = sessions.KindPR
		}
		if _, ok := s.standing(in.ref); ok {
			r.Session.Kind = sessions.KindStanding
		}
		return nil
	})
	return c, err
}

// spawnFailed undoes claim c after the terminal refused the spawn: an
// occupied target is a drop (never spawn over a live session), anything
// else a session.spawn_failed and a retry.
func (s *Service) spawnFailed(ctx context.Context, store *sessions.Store, in *input, c spawnClaim, target string, cause error) error {
	evID := in.ev.GetId()
	if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session == nil || r.Session.Status != sessions.Spawning || r.Session.Pending != evID {
			return sessions.ErrNoChange
		}
		// Nothing of the attempt stays: with the command's control
		// record left in place, its retry would read as already
		// applied and the start would be lost.
		r.Session, r.Control = c.prev, c.prevControl
		return nil
	}); err != nil {
		return fmt.Errorf("registry: undo spawn claim: %w", err)
	}
	if errors.Is(cause, tmux.ErrOccupied) {
		// Never spawn over a live session (docs/requirements.md K12): the
		// work item is told, and a person adopts or ends it (leftover.go).
		s.m.spawns.WithLabelValues("refused").Inc()
		s.records.drop(ctx, in, DropSessionOccupied, slog.String("tmux_target", target), slog.Bool("will_retry", false))
		s.reportLeftover(ctx, in, target)
		return nil
	}
	s.m.spawns.WithLabelValues("failed").Inc()
	s.deps.Events.Emit(ctx, "session.spawn_failed", append(eventAttrs(in), slog.String("harness", s.set.Harness.Name()),
		slog.String("tmux_target", target), slog.String("error", cause.Error()), slog.Bool("will_retry", !in.last))...)
	s.marks.gaveUp(ctx, in, "the session's spawn")
	return fmt.Errorf("spawn %s: %w", target, cause)
}

// respawn restarts a session whose terminal is gone, booting it with the
// event prompt p (docs/requirements.md K12): first resuming the harness
// conversation when the harness can and the id is safe, else a fresh
// conversation. A live occupant found meanwhile gets the paste instead (respawn
// averted).
func (s *Service) respawn(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, p string) error {
	h := s.harness()
	target := sess.TmuxTarget
	if target == "" {
		target = tmux.Target(in.ref)
	}
	s.marks.alert(ctx, in, config.AlertSessionDied,
		fmt.Sprintf("The session of %s (%s) was found dead; it is started again with the event that found it.", in.ref, target))
	id, resumed := sess.HarnessSessionID, false
	// The new process gets a new endpoint token: its hash is written
	// before the process can use it, and replaces the old one once the
	// respawn took (an occupant found meanwhile keeps its own).
	token, tokenHash, err := newSessionToken(in.ref)
	if err != nil {
		return err
	}
	if _, err := store.Mutate(ctx, in.ref, func(r *sessions.Record) error {
		if r.Session == nil {
			return sessions.ErrNoChange
		}
		r.Session.NextTokenHash = tokenHash
		return nil
	}); err != nil {
		// Nothing typed yet: the redelivery must type the prompt, not judge
		// a paste that never began (see unmarkPending).
		s.unmarkPending(store, in.ref, in.ev.GetId())
		return fmt.Errorf("registry: %w", err)
	}
	env := s.sessionEnv(h, token)
	// The workspace is made again if it went (a person removed it); a
	// session recorded before workspaces moves into its own.
	cwd := sess.Cwd
	ws, err := s.ensureWorkspace(ctx, in)
	if err != nil {
		s.unmarkPending(store, in.ref, in.ev.GetId())
		return fmt.Errorf("workspace of %s: %w", in.ref, err)
	}
	if sess.Workspace == "" || sess.Cwd == "" {
		cwd = ws.Primary
	}
	s.prepareHarness(ctx, in, h, cwd)
	if argv, ok := h.ResumeArgv(p, id); ok && h.Name() == sess.Harness {
		argv, err := s.confineSession(target, append([]string{h.Command()}, argv...), env, ws)
		if err == nil {
			err = s.tmux.Spawn(ctx, target, cwd, env, argv)
		}
		switch {
		case errors.Is(err, tmux.ErrOccupied):
			return s.averted(ctx, store, in, sess, target, p)
		case err == nil:
			resumed = s.panes.stillLive(ctx, target)
			if !resumed {
				_ = s.tmux.Kill(ctx, target)
			}
		}
		if !resumed {
			s.deps.Log.Warn("dispatcher: resume failed; starting a fresh conversation",
				"work_item", in.ref, "harness_session_id", id, "err", err)
		}
	}
	if !resumed {
		if st, ok := s.standing(in.ref); ok {
			// A fresh conversation of a standing session is told what it
			// is again before the event.
			p = standingPrompt(st, announces(s.deps.Config(), st)) + "\n\n---\n\n" + p
		}
		id = s.set.NewSessionID()
		if h.ChoosesSessionID() {
			id = ""
		}
		argv, err := s.confineSession(target, append([]string{h.Command()}, h.SpawnArgv(p, id)...), env, ws)
		if err == nil {
			err = s.tmux.Spawn(ctx, target, cwd, env, argv)
		}
		if errors.Is(err, tmux.ErrOccupied) {
			return s.averted(ctx, store, in, sess, target, p)
		}
		if err == nil && !h.BootPromptInArgv() {
			err = s.tmux.Deliver(ctx, target, p)
		}
		if err != nil {
			s.m.spawns.WithLabelValues("failed").Inc()
			return s.failed(ctx, store, in, sess, "session.spawn_failed", fmt.Errorf("respawn: %w", err))
		}
	}
	err = s.delivered(ctx, store, in, func(ss *sessions.Session) {
		ss.HarnessSessionID, ss.Host, ss.TmuxTarget, ss.Harness = id, s.set.Host, target, h.Name()
		ss.Cwd, ss.SpecDir, ss.Workspace = cwd, ws.SpecDir, ws.Dir
		ss.TokenHash, ss.NextTokenHash = tokenHash, ""
	})
	if err != nil {
		return err
	}
	kind := "respawn"
	if resumed {
		kind = "resume"
	}
	s.m.spawns.WithLabelValues(kind).Inc()
	s.m.deliveries.WithLabelValues("respawned").Inc()
	rec, _, _ := store.Get(ctx, in.ref)
	s.deps.Events.Emit(ctx, "session.respawned", append(sessionAttrs(in, rec.Session),
		slog.String("runner", s.set.Runner), slog.String("interaction", string(s.templates().Mode)),
		slog.Bool("resumed", resumed))...)
	s.marks.react(ctx, in, config.ReactionCompleted)
	return nil
}

// averted pastes p into a live session found where a respawn would go.
func (s *Service) averted(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, target, p string) error {
	if err := s.tmux.Deliver(ctx, target, p); err != nil {
		return s.failed(ctx, store, in, sess, "dispatch.failed", err)
	}
	// The occupant keeps its own token; the one made for the respawn went
	// to no process.
	if err := s.delivered(ctx, store, in, func(ss *sessions.Session) { ss.NextTokenHash = "" }); err != nil {
		return err
	}
	s.m.deliveries.WithLabelValues("delivered").Inc()
	s.deps.Events.Emit(ctx, "dispatch.succeeded", append(eventAttrs(in),
		slog.String("harness", sess.Harness), slog.String("via", s.set.Runner), slog.String("tmux_target", target),
		slog.Bool("respawn_averted", true))...)
	s.marks.react(ctx, in, config.ReactionCompleted)
	return nil
}
