package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

var errLive = errors.New("a live session exists")

// handle is the per-event entry point (docs/requirements.md K6 order).
func (s *Service) handle(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) error {
	if catalog.Type(ev.GetType()) == catalog.GraphOverride {
		// The operator's move by hand: it changes the graph, never reaches
		// a session, and needs none (override.go).
		in := &input{ev: ev, ref: ev.GetSubject(), deliveryID: ev.GetId(), actor: ev.GetActor().GetGithub()}
		in.last, in.redelivered = d.Last(), d.NumDelivered > 1
		return s.override(ctx, in)
	}
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
		if settled, err := s.control.command(ctx, store, cfg, in); settled {
			return err
		}
	}
	if !s.instructs(cfg, in) {
		s.records.drop(ctx, in, DropUnauthorized, slog.String("actor", in.actor))
		if (in.actor != "" || in.slack != "") && in.ev.GetGithubActivity() == nil {
			// A person's words the loop refused. A collaborator's
			// comment names nobody, and lifecycle activity (a bot's CI,
			// the ledger's own loop:<phase> label) is no one's request.
			s.marks.alert(ctx, in, config.AlertDroppedUnauthorized,
				fmt.Sprintf("An event of %s (%s) was dropped: its actor is not in routing.authorizedUsers.", in.ref, in.ev.GetType()))
		}
		return nil
	}
	if err := s.wholePayload(ctx, in); err != nil {
		return err
	}
	if err := s.rememberLabel(ctx, store, in); err != nil {
		return err
	}
	rec, _, err := store.Get(ctx, in.ref)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if in.closing {
		return s.control.closeWorkItem(ctx, store, in, rec)
	}
	if handled, err := s.prRoute(ctx, store, in, rec); handled {
		return err
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
	case catalog.Type(in.ev.GetType()) == catalog.CriticFindings:
		// The dispatcher raised it for the session that asked for the
		// round; the ledger-writer takes it from no one else.
		return true
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
	if _, ok := cfg.Standing.ForLedger(in.ref); ok {
		return standingRefusal(cmd)
	}
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

// rememberLabel records whether in put the auto-execute label on its work
// item or took it off: a comment event carries no labels, so the registry
// remembers what the last labeled/unlabeled activity said.
func (s *Service) rememberLabel(ctx context.Context, store *sessions.Store, in *input) error {
	if !in.labeled && !in.unlabeled {
		return nil
	}
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
	return nil
}
