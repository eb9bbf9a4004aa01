package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// The graph wiring (issue 8): the dispatcher owns each work item's graph
// state in KV "graph" (package pkg/graphstate; what
// the dispatcher does with it is in internal/flow).
//
//   - A session's spawn starts its work item's graph: graphs.workItem of the
//     operator config (work-item by default), or the ad-hoc graph when the do
//     command spawned it. A work item that already has a graph that has not
//     ended keeps it (a respawn, a stop and a new start); one whose graph
//     ended starts again.
//   - An authorized comment (comment.human by an authorized login, or a
//     relayed gate-feedback or execute record re-attributed to an authorized
//     person) reaching a live session while the work item is at a human gate
//     is classified by the gate before the prompt is rendered (consult-first);
//     the prompt then carries the verdict. A move records approvedBy with the
//     envelope's provenance (R6.3) and writes the approval into the approved
//     artifact's front matter in the session's workspace.
//   - Every move publishes the entered node's notifications to the inbox
//     (flow.Event): the work item's URL, the artifact's excerpt (R4.4),
//     the gate visit when the node is a gate, and work-item-complete on
//     reaching complete (R6.4). Leaving a gate publishes gate.moved first.
//   - A relayed button answer applies only to the gate visit its signed
//     envelope names (docs/decisions/031-stale-gate-presses-refused.md).
//
// The graphs are the operator config's in force (config.Graphs: the
// built-ins and graphs.files), read per event like the rest of the config,
// so the dispatcher, ingress-slack and `the-loop graph` agree on them.
//
// As in the original, nothing reaches a gate while the work item has no live
// session or its session is paused (decision 023): the event is settled without
// advancing the graph. A gate answer relayed from a channel conversation that
// is settled so is answered there (catalog.GatePaused): the person learns
// that the gate did not move and why, instead of waiting for it.

// gates is the dispatcher's side of the work items' process graphs: it
// starts a graph with its session, lets a human gate classify a comment
// before the session sees it, publishes what each move yields, and answers
// the graph endpoint. It needs the bus, the config in force and the session
// registry (for a session's workspace), never a terminal.
type gates struct {
	conn     *bus.Conn
	config   func() *config.Config
	log      *slog.Logger
	events   *eventlog.Logger
	gateWait *prometheus.HistogramVec
	// workdir is the sessions' default workspace, where artifacts are read
	// when a work item's session names none.
	workdir  string
	sessions *atomic.Pointer[sessions.Store]
	// tests runs a verify-tests hook's command (hooks.go); runCtx bounds
	// the runs, ended when the service stops.
	tests  testRunner
	runCtx context.Context
	runs   testRuns

	mu    sync.Mutex
	store *graphstate.Store
}

// open returns the state store, opening it on first use.
func (gs *gates) open(ctx context.Context) (*graphstate.Store, error) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	if gs.store == nil {
		st, err := graphstate.Open(ctx, gs.conn)
		if err != nil {
			return nil, err
		}
		gs.store = st
	}
	return gs.store, nil
}

// context is the graph context block of ref ($graph_context): "" when there
// is no state, it cannot be read, or its graph is not in the config in
// force. verdict is the gate's verdict when a human gate classified this
// event first. Best effort: a prompt is never lost to it.
func (gs *gates) context(ctx context.Context, ref string, verdict graph.Outcome) string {
	store, err := gs.open(ctx)
	if err != nil {
		return ""
	}
	st, _, err := store.Get(ctx, ref)
	if err != nil || st == nil {
		return ""
	}
	gr, ok := gs.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		return ""
	}
	return graph.ContextWith(st, gr, graph.ContextOptions{Verdict: verdict})
}

// start starts in's work item on its graph when its session spawns.
func (gs *gates) start(ctx context.Context, in *input, cmd control.Command) error {
	cfg := gs.config()
	name := cfg.Graphs.WorkItem
	adhoc, pr := graph.Companions(name)
	switch {
	case in.prFor != "":
		// A pull request's own session: the ad-hoc loop (it works what
		// its reviews ask, then a person says done), or the original's
		// pull-request loop beside the original's work-item loop.
		name = pr
	case cmd == control.Do:
		name = adhoc
	}
	g, ok := cfg.Graphs.Registry().Get(name)
	if !ok {
		gs.log.Warn("dispatcher: graph not registered; the work item has no process graph", "work_item", in.ref, "graph", name)
		return nil
	}
	store, err := gs.open(ctx)
	if err != nil {
		return fmt.Errorf("graph state: %w", err)
	}
	var ns []graph.Notification
	created := false
	st, err := store.Mutate(ctx, in.ref, func(cur *graph.State) (*graph.State, error) {
		created = false
		if cur != nil && !cur.Terminal() {
			return nil, graphstate.ErrNoChange
		}
		next, notes, err := graph.New(g, in.ref, time.Now().UTC())
		ns, created = notes, err == nil
		return next, err
	})
	if errors.Is(err, graphstate.ErrOtherRef) {
		gs.log.Warn("dispatcher: the graph key of this work item holds another's state; no graph for it", "work_item", in.ref, "err", err)
		return nil
	}
	if err != nil {
		return fmt.Errorf("graph state: start %s: %w", in.ref, err)
	}
	if !created {
		return nil // kept the graph it had
	}
	gs.events.Emit(ctx, "graph.advanced", append(eventAttrs(in), slog.String("graph", g.Name),
		slog.String("from", ""), slog.String("to", st.Current), slog.String("outcome", "start"))...)
	return gs.notify(ctx, in.ref, st, ns, gs.workdir)
}

// staleGateError: a relayed button answer names a gate visit that is not the
// one the work item waits at (it moved on, or waits at no gate).
type staleGateError struct {
	answered, current string
}

func (e *staleGateError) Error() string {
	return fmt.Sprintf("answer for gate visit %s, the work item is at %q", e.answered, e.current)
}

// consult offers in's comment to the human gate the work item is parked
// at and returns the verdict ("" when no gate classified it). A button
// answer applies only to the gate visit its envelope names: for any other,
// the state is left as it is and a *staleGateError returned — ingress-slack
// refuses such a press already, and this is the check that holds when the
// gate moved between the press and its record coming back.
func (gs *gates) consult(ctx context.Context, in *input, sess *sessions.Session) (graph.Outcome, error) {
	if !in.gate || in.actor == "" {
		// Only an authorized person's comment can answer a gate; one
		// without an actor (a collaborator's) never reaches a session.
		return "", nil
	}
	cfg := gs.config()
	grammar, _ := grammarOf(cfg)
	store, err := gs.open(ctx)
	if err != nil {
		return "", fmt.Errorf("graph state: %w", err)
	}
	ans := &gateAnswer{in: in, reg: cfg.Graphs.Registry(), input: graph.GateInput{
		Comments:       []graph.Comment{{Author: in.actor, Body: in.gateBody, Provenance: in.prov}},
		Authorized:     func(login string) bool { return authorizedGitHub(cfg, login) },
		ExecuteKeyword: grammar.Keyword(control.Execute),
	}}
	st, err := store.Mutate(ctx, in.ref, ans.decide)
	if ans.replay {
		gs.events.Emit(ctx, "graph.replayed", slog.String("work_item", in.ref), slog.String("event_id", in.prov.EventID),
			slog.String("record_url", in.prov.RecordURL))
	}
	t := ans.t
	switch {
	case errors.Is(err, graphstate.ErrOtherRef), errors.Is(err, graph.ErrNotAtGate):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("graph state: gate of %s: %w", in.ref, err)
	case ans.stale != nil:
		return "", ans.stale
	case ans.g == nil || t.From == "":
		return "", nil
	}
	if len(t.Comments) == 0 {
		// Not an authorized person's words (or only an envelope): the
		// gate saw nothing to classify.
		return "", nil
	}
	if !t.Moved() {
		gs.log.Info("dispatcher: gate stays open", "work_item", in.ref, "event_id", in.ev.GetId(),
			"node", t.From, "reason", t.Reason)
		return t.Outcome, nil
	}
	return t.Outcome, gs.advanced(ctx, in, sess.ArtifactDir(), st, ans)
}

// gateAnswer is one comment offered to the human gate its work item waits
// at. decide runs on every read of the state (a compare-and-set retries it)
// and leaves what it found in the fields below input.
type gateAnswer struct {
	in    *input
	reg   *graph.Registry
	input graph.GateInput

	t      graph.Transition
	g      *graph.Graph
	stale  *staleGateError
	left   string // the visit the move ends
	replay bool   // an event id that passed a gate, on another record
}

// decide applies the answer to cur: the moved state, or ErrNoChange when
// there is no gate to answer, the answer is for another visit (stale) or
// was applied already (a redelivery, or a replay on another record).
func (a *gateAnswer) decide(cur *graph.State) (*graph.State, error) {
	in := a.in
	a.t, a.g, a.stale, a.left, a.replay = graph.Transition{}, nil, nil, "", false
	if cur == nil {
		if in.visit != "" {
			a.stale = &staleGateError{answered: in.visit}
		}
		return nil, graphstate.ErrNoChange
	}
	if g, ok := a.reg.Get(cur.Graph); ok {
		a.g = g
	}
	a.left = cur.GateVisit(a.g)
	if in.visit != "" && in.visit != a.left {
		if !applied(cur, in) {
			// Not the redelivery of the answer that moved it on.
			a.stale = &staleGateError{answered: in.visit, current: a.left}
		} else {
			a.replay = replayed(cur, in)
		}
		return nil, graphstate.ErrNoChange
	}
	if a.g == nil || !cur.AtHumanGate(a.g) {
		return nil, graphstate.ErrNoChange
	}
	if applied(cur, in) {
		// A redelivery of an event the gate already decided on, or
		// its envelope copied onto another record.
		a.replay = replayed(cur, in)
		return nil, graphstate.ErrNoChange
	}
	before := cur.Version
	gi := a.input
	gi.At = time.Now().UTC()
	t, err := cur.Apply(a.g, gi)
	a.t = t
	if err != nil {
		return nil, err
	}
	if cur.Version == before {
		return nil, graphstate.ErrNoChange
	}
	return cur, nil
}

// advanced records and publishes the gate move ans made to st: the event
// log, the gate's wait, the approvals in the artifact, gate.moved and the
// entered node's notifications (the artifact read from workdir).
func (gs *gates) advanced(ctx context.Context, in *input, workdir string, st *graph.State, ans *gateAnswer) error {
	g, t := ans.g, ans.t
	attrs := append(eventAttrs(in), slog.String("graph", g.Name), slog.String("from", t.From), slog.String("to", t.To),
		slog.String("outcome", string(t.Outcome)), slog.String("actor", in.actor), slog.String("channel", in.prov.Channel))
	gs.events.Emit(ctx, "graph.advanced", attrs...)
	gs.observeWait(g, st, t.From)
	if st.Terminal() {
		gs.events.Emit(ctx, "graph.completed", append(eventAttrs(in), slog.String("graph", g.Name),
			slog.String("node", st.Current), slog.String("status", string(st.Status)))...)
	}
	if n := g.Node(t.From); n != nil && n.Artifact != "" {
		for _, a := range t.Approvals {
			gs.recordApproval(in, workdir, n.Artifact, a)
		}
	}
	if n := g.Node(t.From); n != nil {
		for _, h := range n.ExitHooks(graph.HookRecordFeedback) {
			gs.recordFeedback(in, workdir, h.Artifact, t)
		}
	}
	gs.moved(ctx, in, g, t, ans.left, workdir)
	return gs.notify(ctx, in.ref, st, t.Notifications, workdir)
}

// moved publishes the catalog.GateMoved signal of t, the move that ended
// gate visit left, before the entered node's notifications, so that a
// channel retires that visit's answer buttons before it shows the next
// gate. Best effort: a channel that misses it retires the buttons when the
// work item's next gate is posted (docs/decisions/032-old-gate-messages-lose-their-buttons.md).
func (gs *gates) moved(ctx context.Context, in *input, g *graph.Graph, t graph.Transition, left, workdir string) {
	if left == "" {
		return
	}
	ev := flow.MovedEvent(in.ref, left, g.Name, t, g.Node(t.From), in.ev.GetActor(), in.ev.GetId(),
		flow.Options{Workdir: workdir, MaxChars: gs.config().Channels.Slack.MaxChars})
	if _, err := flow.Publish(ctx, gs.conn, ev); err != nil {
		gs.log.Warn("dispatcher: gate.moved not published; channels retire the gate's buttons at its next gate",
			"work_item", in.ref, "gate_visit", left, "err", err)
		return
	}
	gs.log.Info("dispatcher: gate.moved published", "work_item", in.ref, "gate_visit", left,
		"outcome", string(t.Outcome), "to", t.To, "event_id", ev.GetId())
}

// paused tells the person whose relayed answer reached a work item at a
// human gate while its session is paused that the gate did not move
// (decision 023), with a catalog.GatePaused notice to their conversation. An
// answer typed on GitHub names no conversation and gets none. The notice's
// id derives from the answer's, so a redelivery publishes it once.
func (gs *gates) paused(ctx context.Context, in *input) error {
	conv := in.ev.GetConversation()
	if !in.gate || conv.GetChannel() == "" {
		return nil
	}
	store, err := gs.open(ctx)
	if err != nil {
		return fmt.Errorf("graph state: %w", err)
	}
	st, _, err := store.Get(ctx, in.ref)
	if err != nil || st == nil {
		// No readable state, no gate to speak of.
		return nil
	}
	cfg := gs.config()
	g, ok := cfg.Graphs.Registry().Get(st.Graph)
	if !ok || !st.AtHumanGate(g) {
		return nil
	}
	if in.visit != "" && in.visit != st.GateVisit(g) {
		// A button answer for a visit the work item has left: the gate
		// it answered is gone, so there is nothing to answer again.
		return nil
	}
	resume := "Once the session is resumed, answer again."
	if grammar, err := grammarOf(cfg); err == nil && grammar.Enabled() {
		if kw := grammar.Keyword(control.Resume); kw != "" {
			resume = "Once the session is resumed (`" + kw + "`), answer again."
		}
	}
	ev := &loopv1.Event{
		Id:           envelope.LoopID("gate-paused", in.ev.GetId()),
		Source:       "loop",
		Type:         string(catalog.GatePaused),
		Subject:      in.ref,
		Time:         envelope.NewTime(time.Now()),
		Actor:        in.ev.GetActor(),
		Conversation: conv,
		CausationId:  in.ev.GetId(),
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{
			Text: "Your answer is recorded on the work item, but the gate `" + st.Current + "` did not move: " +
				"the work item's session is paused, and a paused session's events are settled without moving its graph. " + resume,
			Url:    graphstate.WorkItemURL(in.ref),
			Node:   st.Current,
			Detail: map[string]string{"graph": st.Graph, "reason": DropSessionPaused},
		}},
	}
	if _, err := flow.Publish(ctx, gs.conn, ev); err != nil {
		return fmt.Errorf("publish %s of %s: %w", catalog.GatePaused, in.ref, err)
	}
	gs.log.Info("dispatcher: gate answer settled while the session is paused; the conversation is told",
		"work_item", in.ref, "event_id", in.ev.GetId(), "node", st.Current, "notice_id", ev.GetId())
	return nil
}

// replayed reports whether in's event id already passed a gate on another
// record: its envelope copied, word for word, onto a new comment of the same
// work item. It is not applied again (decision 026); unlike a redelivery,
// it is recorded.
func replayed(st *graph.State, in *input) bool {
	id, url := in.prov.EventID, in.prov.RecordURL
	if id == "" {
		return false
	}
	for _, a := range st.ApprovedBy {
		if a.Provenance.EventID == id && a.Provenance.RecordURL != url {
			return true
		}
	}
	for _, d := range st.Decisions {
		if slices.Contains(d.Events, id) && !slices.Contains(d.Records, url) {
			return true
		}
	}
	return false
}

// applied reports whether st already holds a decision or an approval taken
// on in's event (a redelivery after the move was written, or the same event
// id on another record: a copied envelope). An event id passes a gate once;
// a comment without one is known by its record's URL.
func applied(st *graph.State, in *input) bool {
	if id := in.prov.EventID; id != "" {
		for _, a := range st.ApprovedBy {
			if a.Provenance.EventID == id {
				return true
			}
		}
		for _, d := range st.Decisions {
			if slices.Contains(d.Events, id) {
				return true
			}
		}
	}
	if in.prov.RecordURL == "" {
		return false
	}
	for _, a := range st.ApprovedBy {
		if a.Provenance.RecordURL == in.prov.RecordURL {
			return true
		}
	}
	for _, d := range st.Decisions {
		if slices.Contains(d.Records, in.prov.RecordURL) {
			return true
		}
	}
	return false
}

// recordApproval writes a into the artifact's front matter in the session's
// workspace; an artifact that is not there is skipped, and the log says so.
func (gs *gates) recordApproval(in *input, workdir, pattern string, a graph.Approval) {
	name, err := flow.WriteApproval(workdir, pattern, a)
	switch {
	case errors.Is(err, flow.ErrNoArtifact):
		gs.log.Info("dispatcher: approval not written into the artifact: it is not in the session's workspace",
			"work_item", in.ref, "node", a.Node, "artifact", pattern, "login", a.Login)
	case err != nil:
		gs.log.Warn("dispatcher: approval not written into the artifact", "work_item", in.ref, "node", a.Node,
			"artifact", name, "login", a.Login, "err", err)
	default:
		gs.log.Info("dispatcher: approval written into the artifact's front matter", "work_item", in.ref,
			"node", a.Node, "artifact", name, "login", a.Login)
	}
}

// recordFeedback appends the comments that decided t into the artifact
// (the record-feedback hook); an artifact that is not there is skipped, and
// the log says so.
func (gs *gates) recordFeedback(in *input, workdir, pattern string, t graph.Transition) {
	name, err := flow.WriteFeedback(workdir, pattern, t.From, t.Outcome, time.Now().UTC(), t.Comments)
	switch {
	case errors.Is(err, flow.ErrNoArtifact):
		gs.log.Info("dispatcher: feedback not recorded: the artifact is not in the session's workspace",
			"work_item", in.ref, "node", t.From, "artifact", pattern)
	case err != nil:
		gs.log.Warn("dispatcher: feedback not recorded", "work_item", in.ref, "node", t.From, "artifact", name, "err", err)
	default:
		gs.log.Info("dispatcher: feedback recorded in the artifact", "work_item", in.ref, "node", t.From, "artifact", name)
	}
}

// notify publishes ns, yielded by a move of ref to st, to the inbox. A
// failure is returned (the event is retried and renotify publishes them
// again under the same ids).
func (gs *gates) notify(ctx context.Context, ref string, st *graph.State, ns []graph.Notification, workdir string) error {
	gs.phase(ctx, ref, st) // marks.go
	maxChars := gs.config().Channels.Slack.MaxChars
	for _, n := range ns {
		ev, note := flow.Event(n, st, flow.Options{Workdir: workdir, MaxChars: maxChars})
		if note != "" {
			gs.log.Info("dispatcher: notification carries no artifact excerpt", "work_item", ref,
				"node", n.Node, "event_type", string(n.Type), "artifact", n.Artifact, "why", note)
		}
		if _, err := flow.Publish(ctx, gs.conn, ev); err != nil {
			return fmt.Errorf("publish %s of %s: %w", n.Type, ref, err)
		}
		gs.log.Info("dispatcher: graph notification published", "work_item", ref, "node", n.Node,
			"event_type", string(n.Type), "event_id", ev.GetId())
	}
	return nil
}

// renotifyWithin bounds how long after entering a node its notifications are
// published again: well inside the inbox's duplicate window (at least an
// hour), so a late redelivery never shows a stale ping twice.
const renotifyWithin = 30 * time.Minute

// renotify publishes the current node's notifications of ref again, best
// effort: their ids are those of the first publication, so the bus keeps one.
func (gs *gates) renotify(ctx context.Context, ref string) {
	store, err := gs.open(ctx)
	if err != nil {
		return
	}
	st, _, err := store.Get(ctx, ref)
	if err != nil || st == nil || len(st.History) == 0 || time.Since(st.History[len(st.History)-1].EnteredAt) > renotifyWithin {
		return
	}
	g, ok := gs.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		return
	}
	workdir := gs.workdir
	if reg := gs.sessions.Load(); reg != nil {
		if rec, _, err := reg.Get(ctx, ref); err == nil && rec.Session.ArtifactDir() != "" {
			workdir = rec.Session.ArtifactDir()
		}
	}
	if err := gs.notify(ctx, ref, st, flow.Current(st, g), workdir); err != nil {
		gs.log.Warn("dispatcher: graph notifications not published again", "work_item", ref, "err", err)
	}
}

// observeWait records how long the gate node from waited, from its
// entry to the answer that moved the work item on (loop_gate_wait_seconds).
func (gs *gates) observeWait(g *graph.Graph, st *graph.State, from string) {
	n := g.Node(from)
	if n == nil || st == nil {
		return
	}
	for i := len(st.History) - 1; i >= 0; i-- {
		h := st.History[i]
		if h.Node == from && !h.ExitedAt.IsZero() && !h.Skipped {
			gs.gateWait.WithLabelValues(string(n.Gate)).Observe(h.ExitedAt.Sub(h.EnteredAt).Seconds())
			return
		}
	}
}
