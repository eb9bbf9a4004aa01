package dispatcher

import (
	"context"
	"sync"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
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

// graphs reads work-item states from the KV bucket "graph" (written by the
// graph wiring, issue 8) for the $graph_context block.
type graphs struct {
	mu  sync.Mutex
	kv  *bus.KV
	reg *graph.Registry
}

// context is the graph context block of ref: "" when there is no state, it
// cannot be read, or its graph is unknown here. Best effort: a prompt is
// never lost to it.
func (g *graphs) context(ctx context.Context, c *bus.Conn, ref string) string {
	g.mu.Lock()
	if g.kv == nil {
		kv, err := c.KV(ctx, bus.BucketGraph)
		if err != nil {
			g.mu.Unlock()
			return ""
		}
		g.kv, g.reg = kv, graph.NewRegistry()
	}
	kv, reg := g.kv, g.reg
	g.mu.Unlock()
	e, err := kv.Get(ctx, catalog.SubjectKey(ref))
	if err != nil {
		return ""
	}
	st, err := graph.Decode(e.Value)
	if err != nil {
		return ""
	}
	gr, ok := reg.Get(st.Graph)
	if !ok {
		return ""
	}
	return graph.Context(st, gr)
}
