package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"log/slog"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
)

// The dispatcher's request/reply endpoint (issue 8): `the-loop graph status`
// and `the-loop graph complete` ask the dispatcher instead of reading and
// writing KV "graph" behind its back, so the graphs a work item is judged by
// are the dispatcher's own (the operator config in force), and a move is
// logged and notified by the service that owns the state.
//
// Every replica serves it in one queue group and any replica may answer: the
// state is in KV and every write is a compare-and-set, so two replicas
// answering two requests for one work item cannot both move it. It is served
// whether or not this host can run agent sessions — the graph does not need
// tmux.

// Endpoint identity. The service name is also the queue group.
const (
	EndpointService = "the-loop-dispatcher"
	// EndpointVersion is the SemVer of the request and answer shapes below.
	EndpointVersion = "1.0.0"
)

// The endpoint subjects, under catalog.ServicePrefix, which no stream
// captures.
var (
	SubjectGraphStatus   = catalog.ServiceSubject(Name, "graph.status")
	SubjectGraphComplete = catalog.ServiceSubject(Name, "graph.complete")
)

// GraphRequest names the work item a graph.status or graph.complete request
// is about.
type GraphRequest struct {
	Ref string `json:"ref"`
}

// GraphStatus answers graph.status.
type GraphStatus struct {
	Ref string `json:"ref"`
	// URL is the work item's browser URL.
	URL string `json:"url"`
	// Revision is the state's revision in KV "graph".
	Revision uint64 `json:"revision"`
	// Known: the dispatcher has the state's graph (it may not, when an
	// operator graph's file left the config).
	Known bool `json:"known"`
	// Phase is the current node's phase label ("" when unknown).
	Phase string `json:"phase,omitempty"`
	// AtHumanGate is what ingress-slack decides from the same state and
	// graphs (docs/requirements.md R6.3): a human, non-terminal current node; for
	// an unknown graph, a waiting status.
	AtHumanGate bool         `json:"atHumanGate"`
	State       *graph.State `json:"state"`
}

// GraphCompleted answers graph.complete: the agent node left by done and
// the node entered, whose notifications are published.
type GraphCompleted struct {
	Ref   string       `json:"ref"`
	From  string       `json:"from"`
	To    string       `json:"to"`
	State *graph.State `json:"state"`
}

// serve starts answering the endpoint and returns what stops it,
// which waits for a request in hand. A failure to start is logged, not
// fatal: sessions and gates work without it, and `the-loop graph` then says
// that no dispatcher answered.
func (gs *gates) serve() (stop func()) {
	svc, err := gs.conn.AddService(bus.ServiceSpec{
		Name:        EndpointService,
		Version:     EndpointVersion,
		Description: "the-loop dispatcher: work items' process graphs (the-loop graph status|complete)",
		Logger:      gs.log,
		Endpoints: []bus.Endpoint{
			{Name: "graph-status", Subject: SubjectGraphStatus, Handler: gs.status},
			{Name: "graph-complete", Subject: SubjectGraphComplete, Handler: gs.completeRequest},
		},
	})
	if err != nil {
		gs.log.Error("dispatcher: graph endpoint not started; `the-loop graph` will find no dispatcher here", "err", err)
		return func() {}
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := svc.Stop(ctx); err != nil {
			gs.log.Warn("dispatcher: graph endpoint stop", "err", err)
		}
	}
}

// readGraphRequest decodes a request and checks its ref.
func readGraphRequest(data []byte) (string, error) {
	var req GraphRequest
	if err := json.Unmarshal(data, &req); err != nil {
		return "", bus.Fail(bus.CodeBadRequest, "bad request: want JSON {\"ref\": \"github:owner/repo#N\"}: %v", err)
	}
	if graphstate.WorkItemURL(req.Ref) == "" {
		return "", bus.Fail(bus.CodeBadRequest, "bad request: %q is not a work-item ref like github:owner/repo#15", req.Ref)
	}
	return req.Ref, nil
}

// status answers graph.status: the work item's state and how the
// dispatcher reads it.
func (gs *gates) status(ctx context.Context, data []byte) ([]byte, error) {
	ref, err := readGraphRequest(data)
	if err != nil {
		return nil, err
	}
	store, err := gs.open(ctx)
	if err != nil {
		return nil, bus.Fail(bus.CodeUnavailable, "graph state unavailable: %v", err)
	}
	st, rev, err := store.Get(ctx, ref)
	switch {
	case errors.Is(err, graphstate.ErrOtherRef):
		return nil, bus.Fail(bus.CodeConflict, "%v", err)
	case err != nil:
		return nil, err
	case st == nil:
		return nil, bus.Fail(bus.CodeNotFound, "%s has no graph state: no session has started its graph", ref)
	}
	ans := GraphStatus{Ref: ref, URL: graphstate.WorkItemURL(ref), Revision: rev, State: st,
		AtHumanGate: st.Status == graph.StatusWaiting}
	if g, ok := gs.config().Graphs.Registry().Get(st.Graph); ok {
		ans.Known, ans.AtHumanGate = true, st.AtHumanGate(g)
		if n := g.Node(st.Current); n != nil {
			ans.Phase = n.Phase
		}
	}
	return json.Marshal(ans)
}

// completeRequest answers graph.complete: the work item's agent node is done,
// so it moves on by done and the entered node's notifications are published
// (the artifact read from the session's workspace). A human gate is refused:
// only an authorized person's comment decides one.
func (gs *gates) completeRequest(ctx context.Context, data []byte) ([]byte, error) {
	ref, err := readGraphRequest(data)
	if err != nil {
		return nil, err
	}
	return gs.completeNode(ctx, ref, "", catalog.SourceCLI)
}

// completeNode moves ref's agent node on by done; node, when set, is the
// node the caller checked (nothing moves if the work item left it); source
// says who asked (an operator's CLI, or the work item's own session), for
// the log.
func (gs *gates) completeNode(ctx context.Context, ref, node, source string) ([]byte, error) {
	return gs.leave(ctx, ref, node, graph.OutcomeDone, source, nil)
}

// escalate moves ref's agent node on by escalate, the session's reason
// added to the conflict-escalated notification its escalated end raises.
func (gs *gates) escalate(ctx context.Context, ref, reason string) ([]byte, error) {
	return gs.leave(ctx, ref, "", graph.OutcomeEscalate, catalog.SourceSession, func(n graph.Notification) graph.Notification {
		if n.Type == catalog.ConflictEscalated {
			n.Text = strings.TrimSuffix(n.Text, ".") + " by its agent session: " + reason
		}
		return n
	})
}

// leave moves ref's agent node on by o and logs the move.
func (gs *gates) leave(ctx context.Context, ref, node string, o graph.Outcome, source string, edit func(graph.Notification) graph.Notification) ([]byte, error) {
	store, err := gs.open(ctx)
	if err != nil {
		return nil, bus.Fail(bus.CodeUnavailable, "graph state unavailable: %v", err)
	}
	cfg := gs.config()
	st, t, err := flow.LeaveAndPublish(ctx, store, gs.conn, cfg.Graphs.Registry(), ref, node, o, cfg.Channels.Slack.MaxChars, edit)
	switch {
	case errors.Is(err, flow.ErrNoState):
		return nil, bus.FailWith(bus.CodeNotFound, err)
	case errors.Is(err, flow.ErrHumanGate), errors.Is(err, graph.ErrTerminal), errors.Is(err, flow.ErrMoved),
		errors.Is(err, graph.ErrNoEdge), errors.Is(err, flow.ErrUnknownGraph), errors.Is(err, graphstate.ErrOtherRef):
		return nil, bus.FailWith(bus.CodeConflict, err)
	case err != nil && (st == nil || t.To == ""):
		return nil, err
	}
	// Moved (the notifications may have failed: err says so, after the log).
	gs.phase(ctx, ref, st)
	attrs := []slog.Attr{slog.String("work_item", ref), slog.String("graph", st.Graph), slog.String("from", t.From),
		slog.String("to", t.To), slog.String("outcome", string(t.Outcome)), slog.String("source", source)}
	gs.events.Emit(ctx, "graph.advanced", attrs...)
	if st.Terminal() {
		gs.events.Emit(ctx, "graph.completed", slog.String("work_item", ref), slog.String("graph", st.Graph),
			slog.String("node", st.Current), slog.String("status", string(st.Status)))
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(GraphCompleted{Ref: ref, From: t.From, To: t.To, State: st})
}
