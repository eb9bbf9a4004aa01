package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
)

// The operator's escape hatch (docs/decisions/111-operator-escape-hatch.md):
// `the-loop graph advance|skip|force|escalate` publishes a graph.override
// to the inbox as the operator — the only identity the bus lets raise it —
// the ledger-writer records it on the work item naming the operator and the
// reason, and the dispatcher applies the recorded event from loop.ev here.
// It moves the graph whether or not the work item has a live session (a
// stuck item often has none), and tells a live one. One event moves the graph once: the state keeps
// every applied override by its event id, in the same compare-and-set as the
// move.

// DropOverrideRefused: an operator's graph override the dispatcher cannot
// apply (the work item left the node it was decided at, the node has no such
// edge, a gate for advance or skip, no graph state). It is recorded on the
// work item already; the log says why it did not move anything.
const DropOverrideRefused = "override-refused"

// OverrideEvent builds the graph.override event an operator's CLI verb
// publishes: action on ref's graph g, from the node the operator saw it at,
// to the target node (advance and force), with the reason; person is the
// operator's own entry in routing.authorizedUsers when the CLI knows one.
// Its id derives from the request and its time, so a retried publish is
// stored once.
func OverrideEvent(ref, g string, action graph.Action, from, to, reason string, person *loopv1.Actor, now time.Time) *loopv1.Event {
	return &loopv1.Event{
		Id:      envelope.LoopID("cli-graph", ref, string(action), from, to, now.UTC().Format(time.RFC3339Nano)),
		Source:  catalog.SourceCLI,
		Type:    string(catalog.GraphOverride),
		Subject: ref,
		Time:    envelope.NewTime(now),
		Actor:   person,
		Body: &loopv1.Event_GraphOverride{GraphOverride: &loopv1.GraphOverride{
			Action: string(action), From: from, To: to, Reason: reason, Graph: g,
		}},
	}
}

// overrideRefusal is why an override was not applied, for good.
type overrideRefusal struct{ err error }

func (e *overrideRefusal) Error() string { return e.err.Error() }
func (e *overrideRefusal) Unwrap() error { return e.err }

// override applies the recorded graph.override in. A refusal is settled
// (recorded as dispatch.dropped, never retried: the same event would be
// refused again); only a failure of the bus is returned, to be retried.
func (s *Service) override(ctx context.Context, in *input) error {
	ev, gs := in.ev, s.gates
	o := ev.GetGraphOverride()
	switch {
	case ev.GetSource() != catalog.SourceCLI || o == nil:
		// The bus and the ledger-writer let only the operator's CLI raise
		// it; anything else is not an override, whoever signed it.
		s.refuseOverride(ctx, in, errors.New("not an operator's override from the CLI"))
		return nil
	case ev.GetLedger().GetUrl() == "":
		s.refuseOverride(ctx, in, errors.New("the override carries no ledger record"))
		return nil
	}
	store, err := gs.open(ctx)
	if err != nil {
		return fmt.Errorf("graph state: %w", err)
	}
	reg := gs.config().Graphs.Registry()
	req := graph.OverrideRequest{
		Action: graph.Action(o.GetAction()), From: o.GetFrom(), To: o.GetTo(), Reason: o.GetReason(),
		By: ev.GetActor().GetGithub(), EventID: ev.GetId(), RecordURL: ev.GetLedger().GetUrl(),
	}
	var (
		t       graph.Transition
		g       *graph.Graph
		left    string
		already bool
	)
	st, err := store.Mutate(ctx, in.ref, func(cur *graph.State) (*graph.State, error) {
		t, g, left, already = graph.Transition{}, nil, "", false
		if cur == nil {
			return nil, &overrideRefusal{fmt.Errorf("%s has no graph state: no session has started its graph", in.ref)}
		}
		if cur.Overridden(ev.GetId()) {
			// A redelivery of the override that moved it.
			already = true
			return nil, graphstate.ErrNoChange
		}
		var ok bool
		if g, ok = reg.Get(cur.Graph); !ok {
			return nil, &overrideRefusal{fmt.Errorf("%s follows graph %q, which the config in force does not hold", in.ref, cur.Graph)}
		}
		if want := o.GetGraph(); want != "" && want != cur.Graph {
			return nil, &overrideRefusal{fmt.Errorf("%w: decided on graph %q, the work item follows %q", graph.ErrStaleOverride, want, cur.Graph)}
		}
		left = cur.GateVisit(g)
		r := req
		r.At = time.Now().UTC()
		var err error
		if t, err = cur.Override(g, r); err != nil {
			return nil, &overrideRefusal{err}
		}
		return cur, nil
	})
	var refused *overrideRefusal
	switch {
	case errors.As(err, &refused), errors.Is(err, graphstate.ErrOtherRef):
		s.refuseOverride(ctx, in, err)
		return nil
	case err != nil:
		return fmt.Errorf("graph state: override of %s: %w", in.ref, err)
	case already:
		if in.redelivered {
			// A failure after the move may have kept its notifications
			// from the bus: publish them again (same ids), with the
			// reason, while the work item stands where this move left it.
			s.renotifyOverride(ctx, in, o)
		}
		// The session may not have been told yet (a failure after the
		// move); its registry knows whether it was.
		told, err := s.tellSession(ctx, in, o)
		if err == nil && !told {
			s.records.drop(ctx, in, DropAlreadyProcessed)
		}
		return err
	}
	gs.events.Emit(ctx, "graph.advanced", append(eventAttrs(in), slog.String("graph", g.Name), slog.String("from", t.From),
		slog.String("to", t.To), slog.String("outcome", string(t.Outcome)), slog.String("actor", in.actor),
		slog.String("source", "operator"), slog.String("override", o.GetAction()))...)
	gs.log.Info("dispatcher: operator override applied", "work_item", in.ref, "event_id", ev.GetId(),
		"override", o.GetAction(), "from", t.From, "to", t.To, "by", in.actor, "record", ev.GetLedger().GetUrl())
	if left != "" {
		gs.observeWait(g, st, t.From)
	}
	if st.Terminal() {
		gs.events.Emit(ctx, "graph.completed", append(eventAttrs(in), slog.String("graph", g.Name),
			slog.String("node", st.Current), slog.String("status", string(st.Status)))...)
	}
	workdir := flow.SessionWorkdir(ctx, gs.conn, in.ref)
	if workdir == "" {
		workdir = gs.workdir
	}
	gs.moved(ctx, in, g, t, left, workdir)
	if err := gs.notify(ctx, in.ref, st, withReason(t.Notifications, o.GetAction(), o.GetReason(), who(ev.GetActor())), workdir); err != nil {
		return err
	}
	_, err = s.tellSession(ctx, in, o)
	return err
}

// renotifyOverride publishes again the notifications of the node in's
// override entered, as gates.renotify does for any move, when the work item
// still stands there and entered it recently. Best effort.
func (s *Service) renotifyOverride(ctx context.Context, in *input, o *loopv1.GraphOverride) {
	gs := s.gates
	store, err := gs.open(ctx)
	if err != nil {
		return
	}
	st, _, err := store.Get(ctx, in.ref)
	if err != nil || st == nil || len(st.Overrides) == 0 || len(st.History) == 0 {
		return
	}
	last := st.Overrides[len(st.Overrides)-1]
	if last.EventID != in.ev.GetId() || last.To != st.Current || time.Since(st.History[len(st.History)-1].EnteredAt) > renotifyWithin {
		return
	}
	g, ok := gs.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		return
	}
	workdir := flow.SessionWorkdir(ctx, gs.conn, in.ref)
	if workdir == "" {
		workdir = gs.workdir
	}
	ns := withReason(flow.Current(st, g), o.GetAction(), o.GetReason(), who(in.ev.GetActor()))
	if err := gs.notify(ctx, in.ref, st, ns, workdir); err != nil {
		gs.log.Warn("dispatcher: an override's notifications not published again", "work_item", in.ref, "err", err)
	}
}

// tellSession types the recorded override into the work item's live
// session, as any recorded event, so that the agent knows its node moved
// under it (the prompt's graph context says where the work item is now)
// and does not complete a node it never worked. told is false when the
// work item has no live session here to tell: none is spawned for an
// override. A paused session is not told, as it is told nothing.
func (s *Service) tellSession(ctx context.Context, in *input, o *loopv1.GraphOverride) (told bool, err error) {
	store := s.store.Load()
	if store == nil {
		return false, nil
	}
	rec, _, err := store.Get(ctx, in.ref)
	if err != nil {
		return false, fmt.Errorf("registry: %w", err)
	}
	if !rec.Session.Live() {
		return false, nil
	}
	move := "from " + o.GetFrom()
	if o.GetTo() != "" {
		move += " to " + o.GetTo()
	}
	text := fmt.Sprintf("The operator moved this work item's graph by hand (%s, %s). Reason: %s\n\n"+
		"Work on the node the graph context names now; do not complete the node you were on.", o.GetAction(), move, o.GetReason())
	in.ghEvent, in.action = string(catalog.GraphOverride), o.GetAction()
	in.repository = repoOf(in.ref)
	in.excerptEvent = "issue_comment"
	in.payload = commentPayload(in.excerptEvent, &loopv1.Comment{Body: text, Url: in.ev.GetLedger().GetUrl(), Author: who(in.ev.GetActor())})
	return true, s.deliver(ctx, store, in)
}

// refuseOverride settles an override that cannot be applied.
func (s *Service) refuseOverride(ctx context.Context, in *input, why error) {
	s.deps.Log.Warn("dispatcher: operator override refused; the work item's graph did not move",
		"work_item", in.ref, "event_id", in.ev.GetId(), "override", in.ev.GetGraphOverride().GetAction(), "why", why)
	// The event log holds ids and kinds, never text: the reason is in the
	// service's log above.
	s.records.drop(ctx, in, DropOverrideRefused, slog.String("refusal", refusalKind(why)))
}

// refusalKind names a refusal for the event log.
func refusalKind(err error) string {
	switch {
	case errors.Is(err, graph.ErrStaleOverride):
		return "stale"
	case errors.Is(err, graph.ErrGateOverride):
		return "human-gate"
	case errors.Is(err, graph.ErrNoEdge):
		return "no-edge"
	case errors.Is(err, graph.ErrTerminal):
		return "terminal"
	case errors.Is(err, graph.ErrBadOverride):
		return "invalid"
	}
	return "other"
}

// who names the operator's person for a notification.
func who(a *loopv1.Actor) string {
	switch {
	case a.GetName() != "":
		return "the operator (" + a.GetName() + ")"
	case a.GetGithub() != "":
		return "the operator (@" + a.GetGithub() + ")"
	}
	return "the operator"
}

// withReason adds the operator's reason to an escalation's text: the person
// the work item is handed to learns why from the notification itself.
func withReason(ns []graph.Notification, action, reason, by string) []graph.Notification {
	reason = strings.TrimSpace(reason)
	out := make([]graph.Notification, len(ns))
	for i, n := range ns {
		if n.Type == catalog.ConflictEscalated && reason != "" {
			n.Text = strings.TrimSuffix(n.Text, ".") + " by " + by + " (" + action + "): " + reason
		}
		out[i] = n
	}
	return out
}
