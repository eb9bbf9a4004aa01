// Package graphstate is the document format of a work item's process-graph
// state (pkg/graph) in the KV bucket "graph", kept under
// catalog.SubjectKey(ref), and the ids of the notifications its moves
// publish: a bus contract like the envelopes (docs/decisions/087-shared-documents-in-pkg.md).
//
// The dispatcher owns the state: it starts a graph when a session spawns,
// moves it when an authorized comment answers a human gate, and answers
// `the-loop graph status|complete` on its request/reply endpoint, moving an
// agent node on with the same compare-and-set. ingress-slack and the status
// page read the same value; a reader requires State.Ref to be the ref, so
// every state written here carries it.
package graphstate

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
)

// ErrNoChange returned by a Mutate function writes nothing.
var ErrNoChange = errors.New("graphstate: no change")

// ErrOtherRef: the key holds the state of another work item whose ref maps
// to the same subject key; it is never read as, nor overwritten by, this one.
var ErrOtherRef = errors.New("graphstate: the key holds another work item's state")

// Store is the work items' graph states in KV "graph".
type Store struct{ kv *bus.KV }

// Open opens the provisioned bucket "graph".
func Open(ctx context.Context, c *bus.Conn) (*Store, error) {
	kv, err := c.KV(ctx, bus.BucketGraph)
	if err != nil {
		return nil, err
	}
	return &Store{kv: kv}, nil
}

// Key is where ref's state is kept.
func Key(ref string) string { return catalog.SubjectKey(ref) }

// Get returns ref's state and its revision; nil and 0 when there is none.
func (s *Store) Get(ctx context.Context, ref string) (*graph.State, uint64, error) {
	e, err := s.kv.Get(ctx, Key(ref))
	if errors.Is(err, bus.ErrNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := graph.Decode(e.Value)
	if err != nil {
		return nil, e.Revision, fmt.Errorf("graph state of %s: %w", ref, err)
	}
	if st.Ref != "" && st.Ref != ref {
		return nil, e.Revision, fmt.Errorf("%w: %s holds %s", ErrOtherRef, Key(ref), st.Ref)
	}
	return st, e.Revision, nil
}

// Mutate reads ref's state (nil when there is none), lets fn return the
// state to write, and writes it with a compare-and-set, running fn again on a
// fresh read after a conflict. fn returning ErrNoChange writes nothing; any
// other error aborts. It returns the state as written, or as found.
func (s *Store) Mutate(ctx context.Context, ref string, fn func(cur *graph.State) (*graph.State, error)) (*graph.State, error) {
	for attempt := 0; ; attempt++ {
		cur, rev, err := s.Get(ctx, ref)
		if err != nil {
			return nil, err
		}
		next, err := fn(cur)
		if err != nil {
			if errors.Is(err, ErrNoChange) {
				return cur, nil
			}
			return cur, err
		}
		next.Ref = ref
		data, err := next.Encode()
		if err != nil {
			return nil, err
		}
		_, err = s.kv.CompareAndSet(ctx, Key(ref), data, rev)
		if err == nil {
			return next, nil
		}
		if !bus.IsConflict(err) || attempt >= 20 {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// Attempt is how many times st has entered node (the entry a notification
// belongs to).
func Attempt(st *graph.State, node string) int {
	n := 0
	for _, h := range st.History {
		if h.Node == node {
			n++
		}
	}
	return n
}

// NotificationID is the event id of the notification of type typ for the
// attempt-th entry of node by ref. The type is part of it because a node may
// yield two (its own notify and work-item-complete).
func NotificationID(ref, node string, attempt int, typ catalog.Type) string {
	return envelope.LoopID("notify", ref, node, strconv.Itoa(attempt), string(typ))
}

// WorkItemURL is the browser URL of a github:[host/]owner/repo#N ref:
// https://github.com/owner/repo/issues/N, on the ref's host for GitHub
// Enterprise (GitHub redirects a pull request's number to /pull/). "" for any
// other ref.
func WorkItemURL(ref string) string {
	rest, ok := strings.CutPrefix(ref, "github:")
	if !ok {
		return ""
	}
	path, num, ok := strings.Cut(rest, "#")
	if !ok {
		return ""
	}
	if n, err := strconv.ParseUint(num, 10, 63); err != nil || n == 0 {
		return ""
	}
	parts := strings.Split(path, "/")
	host := "github.com"
	switch len(parts) {
	case 2:
	case 3:
		host, parts = parts[0], parts[1:]
	default:
		return ""
	}
	for _, p := range append([]string{host}, parts...) {
		if p == "" || strings.ContainsAny(p, " \t\n?#") {
			return ""
		}
	}
	return "https://" + host + "/" + parts[0] + "/" + parts[1] + "/issues/" + num
}
