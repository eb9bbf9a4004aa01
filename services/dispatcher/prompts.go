package dispatcher

import (
	"context"
	"sync"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/services/dispatcher/graphstate"
	"github.com/the-loop/bus/services/dispatcher/internal/prompt"
)

const (
	promptEvent = prompt.Event
	promptSpawn = prompt.Spawn
)

func promptData(in *input, ex, graphContext string) prompt.Data {
	return prompt.Data{
		WorkItem: in.ref, Event: in.ghEvent, Action: in.action, Repository: in.repository,
		DeliveryID: in.deliveryID, Excerpt: ex, GraphContext: graphContext,
	}
}

// graphs is the dispatcher's access to the work items' graph states (KV
// "graph", package graphstate), opened on first use.
type graphs struct {
	mu    sync.Mutex
	store *graphstate.Store
}

// open returns the state store, opening it on first use.
func (g *graphs) open(ctx context.Context, c *bus.Conn) (*graphstate.Store, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.store == nil {
		st, err := graphstate.Open(ctx, c)
		if err != nil {
			return nil, err
		}
		g.store = st
	}
	return g.store, nil
}

// context is the graph context block of ref ($graph_context): "" when there
// is no state, it cannot be read, or its graph is not in reg. verdict is the
// gate's verdict when a human gate classified this event first. Best effort:
// a prompt is never lost to it.
func (g *graphs) context(ctx context.Context, c *bus.Conn, reg *graph.Registry, ref string, verdict graph.Outcome) string {
	store, err := g.open(ctx, c)
	if err != nil {
		return ""
	}
	st, _, err := store.Get(ctx, ref)
	if err != nil || st == nil {
		return ""
	}
	gr, ok := reg.Get(st.Graph)
	if !ok {
		return ""
	}
	return graph.ContextWith(st, gr, graph.ContextOptions{Verdict: verdict})
}
