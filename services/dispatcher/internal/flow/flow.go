// Package flow is what the dispatcher does with a work item's graph state
// (package pkg/graphstate) beyond reading and writing it: completing an
// agent node, turning the notifications a transition yields into catalog
// events on the inbox (docs/requirements.md R4.4, R6.3, R6.4), and reading
// and annotating the node's artifact in the session's workspace.
//
// Notifications are published to the inbox (loop.in) with source "loop" and a
// deterministic id per (work item, node, entry, type)
// (graphstate.NotificationID): the ledger-writer passes these unrecorded
// types through to loop.ev in order, and publishing the same entry's
// notification again (a redelivery) is dropped by the stream's duplicate
// window.
package flow

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
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

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

// ErrMoved: the work item is no longer at the node the caller checked.
var ErrMoved = errors.New("the work item moved on meanwhile")

// Complete leaves ref's current agent node by done (`the-loop graph
// complete`). A human gate is never passed this way — only an authorized
// person's comment decides it — and a terminal node has nowhere to go.
func Complete(ctx context.Context, s *graphstate.Store, reg *graph.Registry, ref string, at time.Time) (*graph.State, graph.Transition, error) {
	return Leave(ctx, s, reg, ref, "", graph.OutcomeDone, at)
}

// Leave leaves ref's current agent node by outcome (done, or a session's
// escalate). node, when set, is the node the caller checked: if the work
// item stands elsewhere now, nothing moves and the error wraps ErrMoved.
func Leave(ctx context.Context, s *graphstate.Store, reg *graph.Registry, ref, node string, o graph.Outcome, at time.Time) (*graph.State, graph.Transition, error) {
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
		if node != "" && cur.Current != node {
			return nil, fmt.Errorf("%s: %w (it is at %s, not %s)", ref, ErrMoved, cur.Current, node)
		}
		var err error
		t, err = cur.Advance(g, o, at)
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
func CompleteAndPublish(ctx context.Context, s *graphstate.Store, c *bus.Conn, reg *graph.Registry, ref string, maxChars int) (*graph.State, graph.Transition, error) {
	return LeaveAndPublish(ctx, s, c, reg, ref, "", graph.OutcomeDone, maxChars, nil)
}

// LeaveAndPublish is Leave followed by the publication of the entered
// node's notifications, each passed through edit first when it is set.
func LeaveAndPublish(ctx context.Context, s *graphstate.Store, c *bus.Conn, reg *graph.Registry, ref, node string, o graph.Outcome, maxChars int, edit func(graph.Notification) graph.Notification) (*graph.State, graph.Transition, error) {
	st, t, err := Leave(ctx, s, reg, ref, node, o, time.Now().UTC())
	if err != nil {
		return st, t, err
	}
	opts := Options{Workdir: SessionWorkdir(ctx, c, ref), MaxChars: maxChars}
	for _, n := range t.Notifications {
		if edit != nil {
			n = edit(n)
		}
		ev, _ := Event(n, st, opts)
		if _, err := Publish(ctx, c, ev); err != nil {
			return st, t, fmt.Errorf("%s moved to %s, but its %s notification was not published: %w", ref, t.To, n.Type, err)
		}
	}
	return st, t, nil
}

// SessionWorkdir is where ref's session keeps its artifacts (its spec
// directory, or its cwd in a record from before workspaces), "" when it has
// none.
func SessionWorkdir(ctx context.Context, c *bus.Conn, ref string) string {
	store, err := sessions.Open(ctx, c)
	if err != nil {
		return ""
	}
	rec, _, err := store.Get(ctx, ref)
	if err != nil || rec.Session == nil {
		return ""
	}
	return rec.Session.ArtifactDir()
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
	// Scrub masks secrets in the artifact's text before its excerpt
	// leaves for the channels (nil: the environment's secrets and the
	// usual token shapes, pkg/redact).
	Scrub func(string) string
}

// scrub masks secrets in text an agent wrote, before it goes to a channel:
// any session token, then what o.Scrub (or pkg/redact) finds. The artifact
// is the agent's, and a prompt-injected agent may have pasted its
// environment into it.
func (o Options) scrub(text string) string {
	text = sessionapi.Scrub(text, "")
	if o.Scrub != nil {
		return o.Scrub(text)
	}
	return redact.FromOS().Scrub(text)
}

// Event turns n, yielded by st, into the catalog event to publish (R4.4):
// the work item's browser URL and, when the node names an artifact that is
// in the workspace, its name and text with the front matter stripped, capped
// at MaxChars. note says why an artifact was not attached ("" when it was,
// or when the node names none).
func Event(n graph.Notification, st *graph.State, o Options) (ev *loopv1.Event, note string) {
	attempt := graphstate.Attempt(st, n.Node)
	body := &loopv1.Notification{
		Text: n.Text,
		Url:  graphstate.WorkItemURL(n.Ref),
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
			body.ArtifactExcerpt = Excerpt([]byte(o.scrub(string(text))), o.MaxChars)
		}
	}
	now := o.Now
	if now.IsZero() {
		now = time.Now()
	}
	return &loopv1.Event{
		Id:      graphstate.NotificationID(n.Ref, n.Node, attempt, n.Type),
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
		Url:       graphstate.WorkItemURL(ref),
		Node:      t.From,
		GateVisit: visit,
		Detail:    map[string]string{"graph": g, "outcome": string(t.Outcome), "to": t.To},
	}
	if from != nil && from.Artifact != "" {
		if name, text, err := ReadArtifact(o.Workdir, from.Artifact); err == nil {
			body.Artifact, body.ArtifactExcerpt = name, Excerpt([]byte(o.scrub(string(text))), o.MaxChars)
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
	return name, replace(root, filepath.FromSlash(name), out)
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

// WriteFeedback appends the comments that decided gate node into the first
// alternative of pattern present in workdir (graph.AppendFeedback). It
// returns the file's name, or ErrNoArtifact when none is there.
func WriteFeedback(workdir, pattern, node string, outcome graph.Outcome, at time.Time, comments []graph.Comment) (string, error) {
	name, text, err := ReadArtifact(workdir, pattern)
	if err != nil {
		return name, err
	}
	out := graph.AppendFeedback(text, node, outcome, at, comments)
	if string(out) == string(text) {
		return name, nil
	}
	root, err := os.OpenRoot(workdir)
	if err != nil {
		return name, err
	}
	defer root.Close()
	return name, replace(root, filepath.FromSlash(name), out)
}

// replace writes data as name under root through a temporary file renamed
// over it, keeping name's permissions. The dispatcher's own checks read an
// artifact while a gate's approval or feedback is written into it (the work
// item moves on meanwhile), so a reader must find the old text or the new,
// never a truncated file.
func replace(root *os.Root, name string, data []byte) error {
	mode := fs.FileMode(0o644)
	if fi, err := root.Stat(name); err == nil {
		mode = fi.Mode().Perm()
	}
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".the-loop-"+strconv.FormatInt(time.Now().UnixNano(), 36))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	err = errors.Join(werr, cerr)
	if err == nil {
		err = root.Chmod(tmp, mode) // the umask may have narrowed it
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}
