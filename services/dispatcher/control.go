package dispatcher

import (
	"context"
	"fmt"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
	"log/slog"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// controller carries out control commands (docs/requirements.md K8) and
// closes a session when its work item closes. It changes a session's
// status in the registry and ends its terminal; a command that starts a
// session hands it back to the pipeline (unmatched, spawn).
type controller struct {
	records recorder
	leases  *leases
	panes   *panes
	events  *eventlog.Logger
	log     *slog.Logger
	// unmatched applies the spawn policy to a command for a work item
	// without a live session; spawn resumes a spawn the same command
	// began before a crash.
	unmatched func(ctx context.Context, store *sessions.Store, in *input, rec sessions.Record, cmd control.Command) error
	spawn     func(ctx context.Context, store *sessions.Store, in *input, cmd control.Command) error
	// removeWorkspace removes the work item's checkouts once its session
	// is cleaned up or its work item closed (workspace.go).
	removeWorkspace func(ctx context.Context, in *input)
	// adopt takes a leftover tmux session as the work item's
	// (leftover.go): an effect, or a rejection's reason.
	adopt func(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, ctl *sessions.Control) (effect, reason string, err error)
}

// grammarOf is the control grammar in force. Keywords the config loader
// should have refused fall back to the defaults, and err says why.
func grammarOf(cfg *config.Config) (control.Grammar, error) {
	g, err := control.New(cfg.Routing.Control.Enabled, cfg.Routing.Control.Keywords)
	if err != nil {
		g, _ = control.New(cfg.Routing.Control.Enabled, nil)
	}
	return g, err
}

// command parses in's body for a control command and carries it out.
// settled is true when the event ends there (a command executed or
// rejected, an ambiguous one, a relayed record that holds none); execute is
// recorded and the event goes on to be delivered like any comment.
func (c *controller) command(ctx context.Context, store *sessions.Store, cfg *config.Config, in *input) (settled bool, err error) {
	g, err := grammarOf(cfg)
	if err != nil {
		// The config loader validates keywords; this is a last guard.
		c.log.Warn("dispatcher: control keywords invalid; using the defaults", "err", err)
	}
	res := g.Parse(in.body)
	switch {
	case res.Ambiguous:
		c.records.ambiguous(ctx, in, res.Matched)
		return true, nil
	case res.Command != "":
		// The named-actor check, for typed and relayed commands alike
		// (abuse 5): an authorized GitHub login, judged by the config in
		// force now.
		if !authorizedGitHub(cfg, in.actor) {
			c.records.reject(ctx, in, res.Command, RejectUnauthorized)
			return true, nil
		}
		if res.Command != control.Execute {
			return true, c.apply(ctx, store, in, res.Command)
		}
		// execute answers the graph's phase-selection gate: recorded as
		// handed to the graph, and delivered like any comment.
		c.records.commanded(ctx, in, res.Command, "handed-to-graph")
	case in.relayed:
		c.records.drop(ctx, in, DropNoCommand)
		return true, nil
	}
	return false, nil
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
func (c *controller) apply(ctx context.Context, store *sessions.Store, in *input, cmd control.Command) error {
	rec, _, err := store.Get(ctx, in.ref)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	sess := rec.Session
	if rec.Control != nil && rec.Control.EventID == in.ev.GetId() {
		if cmd.Is(control.Spawning) && sess != nil && sess.Status == sessions.Spawning && sess.Pending == in.ev.GetId() {
			return c.spawn(ctx, store, in, cmd) // a spawn this command began before a crash
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
			return c.unmatched(ctx, store, in, rec, cmd)
		}
		effect, err = c.setStatus(ctx, store, in, ctl, sessions.Paused, sessions.Active, "resumed")
	case control.Resume:
		if !sess.Live() || sess.Status != sessions.Paused {
			c.records.reject(ctx, in, cmd, RejectNothingResume)
			return nil
		}
		effect, err = c.setStatus(ctx, store, in, ctl, sessions.Paused, sessions.Active, "resumed")
	case control.Pause:
		effect, err = c.setStatus(ctx, store, in, ctl, sessions.Active, sessions.Paused, "paused")
	case control.Stop:
		if !sess.Live() {
			effect, err = c.record(ctx, store, in, ctl, "noop")
			break
		}
		if err = c.closeSession(ctx, store, in, sess, "stopped", ctl, false); err == nil {
			effect = "stopped"
		}
	case control.Cleanup:
		effect, err = c.cleanup(ctx, store, in, sess, ctl)
	case control.Adopt:
		var reason string
		if effect, reason, err = c.adopt(ctx, store, in, sess, ctl); reason != "" {
			c.records.reject(ctx, in, cmd, reason)
			return nil
		}
	case control.End:
		return c.end(ctx, store, in, rec, cmd)
	default:
		return nil
	}
	if err != nil {
		return err
	}
	c.records.commanded(ctx, in, cmd, effect)
	return nil
}

// end kills the leftover tmux session of in's work item (leftover.go), if
// one runs, and spawns the loop's own as a start would. A work item whose
// own session is live is refused: stop ends that one.
func (c *controller) end(ctx context.Context, store *sessions.Store, in *input, rec sessions.Record, cmd control.Command) error {
	if rec.Session.Live() {
		c.records.reject(ctx, in, cmd, RejectSessionLive)
		return nil
	}
	target := tmux.Target(in.ref)
	effect := "nothing-to-end"
	if c.panes.term.Probe(ctx, target) != tmux.Absent {
		if err := c.panes.kill(ctx, target); err != nil {
			return err
		}
		effect = "ended"
	}
	c.records.commanded(ctx, in, cmd, effect)
	return c.unmatched(ctx, store, in, rec, cmd)
}

// record writes ctl and nothing else, returning effect.
func (c *controller) record(ctx context.Context, store *sessions.Store, in *input, ctl *sessions.Control, effect string) (string, error) {
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
func (c *controller) setStatus(ctx context.Context, store *sessions.Store, in *input, ctl *sessions.Control, from, to sessions.Status, effect string) (string, error) {
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
	c.events.Emit(ctx, name, sessionAttrs(in, rec.Session)...)
	return effect, nil
}

// cleanup releases the session's local resources (its tmux session) and
// forgets it; the control record stays (docs/requirements.md K8).
func (c *controller) cleanup(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, ctl *sessions.Control) (string, error) {
	cleaned := func(found bool) {
		c.events.Emit(ctx, "session.cleaned", append(sessionAttrs(in, sess),
			slog.String("actor", in.actor), slog.String("source", sourceOf(in)), slog.Bool("found", found))...)
	}
	if sess == nil {
		effect, err := c.record(ctx, store, in, ctl, "nothing-to-clean")
		if err == nil {
			cleaned(false)
		}
		return effect, err
	}
	if sess.Live() {
		if err := c.leases.takeOver(ctx, store, in, sess); err != nil {
			return "", err
		}
		if err := c.panes.kill(ctx, sess.TmuxTarget); err != nil {
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
	c.removeWorkspace(ctx, in)
	cleaned(true)
	return "cleaned", nil
}

// closeWorkItem handles issues/pull_request closed (docs/requirements.md K9):
// the work item's own close closes its session and clears its control record; a
// linked PR's close leaves it open.
func (c *controller) closeWorkItem(ctx context.Context, store *sessions.Store, in *input, rec sessions.Record) error {
	if in.entity == 0 || in.entity != numberOf(in.ref) || !strings.EqualFold(repoOf(in.ref), in.repository) {
		c.records.drop(ctx, in, DropKeptOpen)
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
		c.records.drop(ctx, in, DropNoSession)
		return nil
	}
	if err := c.closeSession(ctx, store, in, rec.Session, reason, nil, true); err != nil {
		return err
	}
	// The work item is over: its checkouts go (unpushed work is kept).
	c.removeWorkspace(ctx, in)
	return nil
}

// closeSession kills the session's tmux session and marks it closed,
// writing ctl (a stop) or clearing the control record (a close of the work
// item) in the same compare-and-set.
func (c *controller) closeSession(ctx context.Context, store *sessions.Store, in *input, sess *sessions.Session, reason string, ctl *sessions.Control, clearControl bool) error {
	if err := c.leases.takeOver(ctx, store, in, sess); err != nil {
		return err
	}
	if err := c.panes.kill(ctx, sess.TmuxTarget); err != nil {
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
	c.events.Emit(ctx, "session.closed", append(sessionAttrs(in, rec.Session), slog.String("reason", reason))...)
	return nil
}
