// Package graphstate keeps a work item's process-graph state (pkg/graph) in
// the KV bucket "graph", under catalog.SubjectKey(ref), and turns the
// notifications a transition yields into catalog events on the inbox
// (docs/requirements.md R4.4, R6.3, R6.4).
//
// The dispatcher owns the state: it starts a graph when a session spawns,
// moves it when an authorized comment answers a human gate, and answers
// `the-loop graph status|complete` on its request/reply endpoint, moving an
// agent node on with the same compare-and-set. ingress-slack reads the same
// value to tell whether the work item is at a human gate; it requires
// State.Ref to be the ref, so every state written here carries it.
//
// Notifications are published to the inbox (loop.in) with source "loop" and a
// deterministic id per (work item, node, entry, type): the ledger-writer
// passes these unrecorded types through to loop.ev in order, and publishing the
// same entry's notification again (a redelivery) is dropped by the stream's
// duplicate window.
//
// Like package registry it is importable, not internal, so tests read
// exactly what the dispatcher writes.
package graphstate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/registry"
)

// ErrNoChange returned by a Mutate function writes nothing.
var ErrNoChange = errors.New("graphstate: no change")

// ErrOtherRef: the key holds the state of another work item whose ref maps
// to the same subject key; it is never read as, nor overwritten by, this one.
var ErrOtherRef = errors.New("graphstate: the key holds another work item's state")

// Why Complete refuses, for errors.Is.
var (
	// ErrNoState: no session has started the work item's graph.
	ErrNoState = errors.New("no graph state")
	// ErrUnknownGraph: the state names a graph the registry does not hold
	// (an operator graph whose file left the config).
	ErrUnknownGraph = errors.New("a graph this process does not know")
	// ErrHumanGate: the work item waits at a human gate, which only an
	// authorized person's comment decides.
	ErrHumanGate = errors.New("at the human gate")
)

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
		if rev == 0 {
			_, err = s.kv.Create(ctx, Key(ref), data)
		} else {
			_, err = s.kv.Update(ctx, Key(ref), data, rev)
		}
		if err == nil {
			return next, nil
		}
		if !errors.Is(err, bus.ErrKeyExists) && !errors.Is(err, bus.ErrWrongRevision) || attempt >= 20 {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// Complete leaves ref's current agent node by done (`the-loop graph
// complete`). A human gate is never passed this way — only an authorized
// person's comment decides it — and a terminal node has nowhere to go.
func (s *Store) Complete(ctx context.Context, reg *graph.Registry, ref string, at time.Time) (*graph.State, graph.Transition, error) {
	var t graph.Transition
	st, err := s.Mutate(ctx, ref, func(cur *graph.State) (*graph.State, error) {
		if cur == nil {
			return nil, fmt.Errorf("%s has %w: no session has started its graph", ref, ErrNoState)
		}
		g, ok := reg.Get(cur.Graph)
		if !ok {
			return nil, fmt.Errorf("%s follows graph %q, %w", ref, cur.Graph, ErrUnknownGraph)
		}
		if cur.Terminal() {
			return nil, fmt.Errorf("%s: %w (%s)", ref, graph.ErrTerminal, cur.Current)
		}
		if n := g.Node(cur.Current); n != nil && n.IsGate() {
			return nil, fmt.Errorf("%s is %w %s: only an authorized person's comment decides it", ref, ErrHumanGate, cur.Current)
		}
		var err error
		t, err = cur.Advance(g, graph.OutcomeDone, at)
		if err != nil {
			return nil, err
		}
		return cur, nil
	})
	return st, t, err
}

// CompleteAndPublish is Complete followed by the publication of the entered
// node's notifications, with the artifact read from the work item's session
// workspace (its registry record's cwd): what the dispatcher does when
// `the-loop graph complete` asks.
func (s *Store) CompleteAndPublish(ctx context.Context, c *bus.Conn, reg *graph.Registry, ref string, maxChars int) (*graph.State, graph.Transition, error) {
	st, t, err := s.Complete(ctx, reg, ref, time.Now().UTC())
	if err != nil {
		return st, t, err
	}
	o := Options{Workdir: SessionWorkdir(ctx, c, ref), MaxChars: maxChars}
	for _, n := range t.Notifications {
		ev, _ := Event(n, st, o)
		if _, err := Publish(ctx, c, ev); err != nil {
			return st, t, fmt.Errorf("%s moved to %s, but its %s notification was not published: %w", ref, t.To, n.Type, err)
		}
	}
	return st, t, nil
}

// SessionWorkdir is the cwd of ref's session in the session registry, ""
// when it has none.
func SessionWorkdir(ctx context.Context, c *bus.Conn, ref string) string {
	sessions, err := registry.Open(ctx, c)
	if err != nil {
		return ""
	}
	rec, _, err := sessions.Get(ctx, ref)
	if err != nil || rec.Session == nil {
		return ""
	}
	return rec.Session.Cwd
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

// Current returns the notifications the entry into st's current node
// published, for publishing them again after a failure (their ids are the
// same, so the bus keeps one of each). Nil when the node was skipped or
// cannot be read.
func Current(st *graph.State, g *graph.Graph) []graph.Notification {
	if st == nil || len(st.History) == 0 {
		return nil
	}
	last := st.History[len(st.History)-1]
	if last.Node != st.Current || last.Skipped {
		return nil
	}
	data, err := st.Encode()
	if err != nil {
		return nil
	}
	c, err := graph.Decode(data)
	if err != nil {
		return nil
	}
	c.History = c.History[:len(c.History)-1]
	ns, err := c.Enter(g, st.Current, last.EnteredAt)
	if err != nil {
		return nil
	}
	return ns
}

// Options say what a notification carries beyond the graph's own words.
type Options struct {
	// Workdir is the work item's workspace (the session's cwd), where the
	// node's artifact is read; "" reads none.
	Workdir string
	// MaxChars caps the artifact excerpt (channels.slack.maxChars).
	MaxChars int
	// Now stamps the event.
	Now time.Time
}

// Event turns n, yielded by st, into the catalog event to publish (R4.4):
// the work item's browser URL and, when the node names an artifact that is
// in the workspace, its name and text with the front matter stripped, capped
// at MaxChars. note says why an artifact was not attached ("" when it was,
// or when the node names none).
func Event(n graph.Notification, st *graph.State, o Options) (ev *loopv1.Event, note string) {
	attempt := Attempt(st, n.Node)
	body := &loopv1.Notification{
		Text: n.Text,
		Url:  WorkItemURL(n.Ref),
		Node: n.Node,
		Detail: map[string]string{
			"graph":   st.Graph,
			"phase":   n.Phase,
			"status":  string(st.Status),
			"attempt": strconv.Itoa(attempt),
		},
	}
	if n.Node == st.Current {
		// The visit a channel's answer buttons may answer: set only while
		// the work item waits at this node's gate.
		body.GateVisit = st.GateVisit(nil)
	}
	if n.Artifact != "" {
		name, text, err := ReadArtifact(o.Workdir, n.Artifact)
		switch {
		case err != nil:
			body.Artifact = n.Artifact
			note = err.Error()
		default:
			body.Artifact = name
			body.ArtifactExcerpt = Excerpt(text, o.MaxChars)
		}
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	return &loopv1.Event{
		Id:      NotificationID(n.Ref, n.Node, attempt, n.Type),
		Source:  "loop",
		Type:    string(n.Type),
		Subject: n.Ref,
		Time:    envelope.NewTime(now),
		Body:    &loopv1.Event_Notification{Notification: body},
	}, note
}

// MovedEvent is the catalog.GateMoved signal of t, the move that ended ref's
// gate visit at node from of graph g (docs/decisions/032-old-gate-messages-lose-their-buttons.md):
// the gate, the visit, the outcome and where the work item went, the
// person whose answer (event causation) moved it, and — so a channel can
// keep showing what was decided — the gate's artifact excerpt as it stands
// now. Its id derives from the visit, so a redelivery publishes it once.
func MovedEvent(ref, visit, g string, t graph.Transition, from *graph.Node, actor *loopv1.Actor, causation string, o Options) *loopv1.Event {
	who := ""
	switch {
	case actor.GetName() != "":
		who = " by " + actor.GetName()
	case actor.GetGithub() != "":
		who = " by @" + actor.GetGithub()
	}
	var what string
	switch t.Outcome {
	case graph.OutcomeApproved:
		what = "was approved" + who
	case graph.OutcomeApprovedWithComments:
		what = "was approved with comments" + who
	case graph.OutcomeChangesRequested:
		what = "had changes requested" + who
	case graph.OutcomeEscalate:
		what = "was escalated" + who
	case graph.OutcomeExecute:
		what = "was passed (execute)" + who
	default:
		what = "was decided (" + string(t.Outcome) + ")" + who
	}
	body := &loopv1.Notification{
		Text:      fmt.Sprintf("%s: %s %s; the work item moved on to %s.", ref, t.From, what, t.To),
		Url:       WorkItemURL(ref),
		Node:      t.From,
		GateVisit: visit,
		Detail:    map[string]string{"graph": g, "outcome": string(t.Outcome), "to": t.To},
	}
	if from != nil && from.Artifact != "" {
		if name, text, err := ReadArtifact(o.Workdir, from.Artifact); err == nil {
			body.Artifact, body.ArtifactExcerpt = name, Excerpt(text, o.MaxChars)
		}
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	return &loopv1.Event{
		Id:          envelope.LoopID("gate-moved", ref, visit),
		Source:      "loop",
		Type:        string(catalog.GateMoved),
		Subject:     ref,
		Time:        envelope.NewTime(now),
		Actor:       actor,
		CausationId: causation,
		Body:        &loopv1.Event_Notification{Notification: body},
	}
}

// Publish puts ev on the inbox with its id as Nats-Msg-Id and waits for the
// stream's acknowledgement.
func Publish(ctx context.Context, c *bus.Conn, ev *loopv1.Event) (bus.PubAck, error) {
	msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		return bus.PubAck{}, err
	}
	return c.Publish(ctx, bus.FromEnvelope(msg))
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

// ErrNoArtifact: none of the node's artifact alternatives is in the
// workspace.
var ErrNoArtifact = errors.New("artifact not in the workspace")

// MaxArtifactBytes bounds what is read of an artifact.
const MaxArtifactBytes = 1 << 20

// ReadArtifact reads the first alternative of pattern (graph.Node.Artifact,
// alternatives separated by '|') present in workdir, the work item's
// workspace. The read goes through an os.Root, so a symlink cannot lead out
// of the workspace.
func ReadArtifact(workdir, pattern string) (name string, text []byte, err error) {
	if workdir == "" {
		return "", nil, fmt.Errorf("%w: no workspace known", ErrNoArtifact)
	}
	root, err := os.OpenRoot(workdir)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrNoArtifact, err)
	}
	defer root.Close()
	for _, alt := range strings.Split(pattern, "|") {
		f, err := root.Open(filepath.FromSlash(alt))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return alt, nil, err
		}
		b, rerr := io.ReadAll(io.LimitReader(f, MaxArtifactBytes))
		f.Close()
		if rerr != nil {
			return alt, nil, rerr
		}
		return alt, b, nil
	}
	return "", nil, fmt.Errorf("%w: %s", ErrNoArtifact, strings.ReplaceAll(pattern, "|", " or "))
}

// WriteApproval adds a to the approvedBy list in the front matter of the
// first alternative of pattern present in workdir (graph.AddApproval). It
// returns the file's name, or ErrNoArtifact when none is there.
func WriteApproval(workdir, pattern string, a graph.Approval) (string, error) {
	name, text, err := ReadArtifact(workdir, pattern)
	if err != nil {
		return name, err
	}
	out, err := graph.AddApproval(text, a)
	if err != nil {
		return name, err
	}
	if string(out) == string(text) {
		return name, nil
	}
	root, err := os.OpenRoot(workdir)
	if err != nil {
		return name, err
	}
	defer root.Close()
	mode := fs.FileMode(0o644)
	if fi, err := root.Stat(filepath.FromSlash(name)); err == nil {
		mode = fi.Mode().Perm()
	}
	return name, root.WriteFile(filepath.FromSlash(name), out, mode)
}

// Excerpt is an artifact's text for a notification: the YAML front matter
// removed, surrounding blank space trimmed, and capped at maxChars characters
// (an ellipsis marks a cut). maxChars <= 0 means no cap.
func Excerpt(text []byte, maxChars int) string {
	s := strings.TrimSpace(StripFrontMatter(strings.ToValidUTF8(string(text), "\uFFFD")))
	if maxChars <= 0 || utf8.RuneCountInString(s) <= maxChars {
		return s
	}
	if maxChars == 1 {
		return "…"
	}
	i, n := 0, 0
	for i = range s {
		if n == maxChars-1 {
			break
		}
		n++
	}
	return strings.TrimRightFunc(s[:i], func(r rune) bool { return r == ' ' || r == '\n' || r == '\t' || r == '\r' }) + "…"
}

// StripFrontMatter removes a leading YAML front matter block: a first line
// "---" up to the next line that is "---" or "...". A document without a
// closed block is returned whole.
func StripFrontMatter(s string) string {
	rest, ok := cutLine(strings.TrimPrefix(s, "\ufeff"))
	if !ok || strings.TrimRight(rest.line, " \t\r") != "---" {
		return s
	}
	for body := rest.after; body != ""; {
		l, _ := cutLine(body)
		if t := strings.TrimRight(l.line, " \t\r"); t == "---" || t == "..." {
			return l.after
		}
		body = l.after
	}
	return s
}

type lineCut struct{ line, after string }

func cutLine(s string) (lineCut, bool) {
	if s == "" {
		return lineCut{}, false
	}
	line, after, _ := strings.Cut(s, "\n")
	return lineCut{line: line, after: after}, true
}
