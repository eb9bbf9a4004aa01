package graph

import (
	"embed"
	"errors"
	"fmt"
	"slices"
)

// The names of the built-in graphs.
const (
	WorkItemGraph = "work-item"
	AdhocGraph    = "adhoc"
	// The original's four graphs (docs/decisions/112-the-originals-graphs.md).
	PDLCWorkItemGraph     = "pdlc-work-item-loop"
	PDLCPRGraph           = "pdlc-pr-loop"
	PDLCContributionGraph = "pdlc-contribution-loop"
	PDLCAdhocGraph        = "pdlc-adhoc-loop"
)

//go:embed builtin/*.yaml
var builtinFS embed.FS

// builtinFiles maps each built-in graph to its file, in registry order.
var builtinFiles = []struct{ name, file string }{
	{WorkItemGraph, "builtin/work-item.yaml"},
	{AdhocGraph, "builtin/adhoc.yaml"},
	{PDLCWorkItemGraph, "builtin/pdlc-work-item-loop.yaml"},
	{PDLCPRGraph, "builtin/pdlc-pr-loop.yaml"},
	{PDLCContributionGraph, "builtin/pdlc-contribution-loop.yaml"},
	{PDLCAdhocGraph, "builtin/pdlc-adhoc-loop.yaml"},
}

// Companions names, for a work-item graph, the graph its ad-hoc (do)
// sessions and its pull requests' sessions follow: the original's loops
// go together, and any other graph keeps the short ad-hoc loop for both.
func Companions(workItem string) (adhoc, pullRequest string) {
	if workItem == PDLCWorkItemGraph {
		return PDLCAdhocGraph, PDLCPRGraph
	}
	return AdhocGraph, AdhocGraph
}

// BuiltinYAML returns the YAML a built-in graph is loaded from, so operators
// can copy it as the start of their own graph.
func BuiltinYAML(name string) ([]byte, bool) {
	for _, b := range builtinFiles {
		if b.name == name {
			data, err := builtinFS.ReadFile(b.file)
			return data, err == nil
		}
	}
	return nil, false
}

// Builtin returns a freshly loaded built-in graph. It panics if a shipped
// graph does not validate, which the tests rule out.
func Builtin(name string) (*Graph, bool) {
	data, ok := BuiltinYAML(name)
	if !ok {
		return nil, false
	}
	g, err := Load(data)
	if err != nil {
		panic(fmt.Sprintf("graph: built-in %s: %v", name, err))
	}
	if g.Name != name {
		panic(fmt.Sprintf("graph: built-in %s is named %q", name, g.Name))
	}
	return g, true
}

// BuiltinNames lists the built-in graphs.
func BuiltinNames() []string {
	out := make([]string, len(builtinFiles))
	for i, b := range builtinFiles {
		out[i] = b.name
	}
	return out
}

// ErrNameClash: a graph with that name is already registered.
var ErrNameClash = errors.New("graph name already registered")

// Registry holds the graphs a deployment knows: the built-ins and the
// operator's own. It is not safe for concurrent mutation; build it once at
// start (or on config reload) and then only read it.
type Registry struct {
	graphs map[string]*Graph
	order  []string
}

// NewRegistry returns a registry holding the built-in graphs.
func NewRegistry() *Registry {
	r := &Registry{graphs: map[string]*Graph{}}
	for _, name := range BuiltinNames() {
		g, _ := Builtin(name)
		r.graphs[name] = g
		r.order = append(r.order, name)
	}
	return r
}

// Add registers g. A name already taken, built-in or not, is refused with
// ErrNameClash.
func (r *Registry) Add(g *Graph) error {
	if g == nil {
		return errors.New("graph: nil graph")
	}
	if _, ok := r.graphs[g.Name]; ok {
		return fmt.Errorf("%w: %q", ErrNameClash, g.Name)
	}
	r.graphs[g.Name] = g
	r.order = append(r.order, g.Name)
	return nil
}

// AddYAML loads one operator graph from data (the caller read it from
// source, which only names it in errors) and registers it.
func (r *Registry) AddYAML(source string, data []byte) (*Graph, error) {
	g, err := Load(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if err := r.Add(g); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return g, nil
}

// Get returns the graph called name.
func (r *Registry) Get(name string) (*Graph, bool) {
	g, ok := r.graphs[name]
	return g, ok
}

// Names lists the registered graphs: the built-ins first, then the rest in
// the order they were added.
func (r *Registry) Names() []string { return slices.Clone(r.order) }
