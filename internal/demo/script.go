package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/threads"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// StepTimeout bounds each step: on 2 cores every step takes well under a
// second; a step that waits this long has found a fault, not a slow machine.
const StepTimeout = 30 * time.Second

// Summary is what the demo counted at the end. Every figure is read from
// where the effect landed: the bus's event log, the stand-ins, the agent's
// records.
type Summary struct {
	// Events is the distinct catalog events accepted by the bus.
	Events int
	// Records is the events the ledger-writer recorded on GitHub.
	Records int
	// Comments and Issues are what GitHub holds (the person's and the-loop's).
	Comments, Issues int
	// SlackMessages is what the-loop posted to Slack.
	SlackMessages int
	// Boots and Prompts are the sessions started and the prompts typed into
	// them.
	Boots, Prompts int
	// ApprovedBy is the approvals the work item's gates recorded: login,
	// gate and the channel the approval was given on.
	ApprovedBy []string
}

// player plays one demo.
type player struct {
	st   *Stage
	conn *bus.Conn
	out  io.Writer
	log  *eventlog.Recorder
	// graphs is KV "graph", opened once: every wait for a node polls it.
	graphs *graphstate.Store

	// marks of the step being played, for "what is new".
	markLog, markSlack, markBoots, markInputs int
	markComments                              map[int]int
	markIssues                                int
}

// agent is what the stand-in agent runs `the-loop ask` and `the-loop graph
// complete` with: the session endpoint, with the token the session was
// started with (its boot record keeps its environment).
func (p *player) agent() sessionapi.Client {
	b, _ := standin.ReadBoots(p.st.agentDir)
	if len(b) == 0 {
		return sessionapi.Client{}
	}
	env := b[len(b)-1].Env
	return sessionapi.Client{URL: env["LOOP_SESSION_URL"], Token: env["LOOP_SESSION_TOKEN"]}
}

// writeArtifact writes an artifact where the agent of work item number
// keeps it: docs/specs/issue-N in the checkout its session works in.
func (p *player) writeArtifact(number int, name, text string) (string, error) {
	b, _ := standin.ReadBoots(p.st.agentDir)
	if len(b) == 0 || b[len(b)-1].Dir == "" {
		return "", fmt.Errorf("no session has booted to write %s in", name)
	}
	rel := filepath.Join("docs", "specs", fmt.Sprintf("issue-%d", number), name)
	path := filepath.Join(b[len(b)-1].Dir, rel)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return "", err
	}
	return filepath.ToSlash(rel), os.WriteFile(path, []byte(text), 0o644)
}

// Play runs the seven steps against services already running on conn and
// prints the transcript to out.
func (s *Stage) Play(ctx context.Context, conn *bus.Conn, out io.Writer) (Summary, error) {
	p := &player{st: s, conn: conn, out: out, log: &eventlog.Recorder{}}
	defer p.tail(ctx)()
	if err := s.waitConnected(ctx); err != nil {
		return Summary{}, fmt.Errorf("ingress-slack's Socket Mode connection: %w", err)
	}
	t := &story{s: s, p: p}
	p.mark()
	for i, step := range t.steps() {
		fmt.Fprintf(out, "\n── %d. %s ──\n", i+1, step.title)
		sctx, cancel := context.WithTimeout(ctx, StepTimeout)
		err := step.play(sctx)
		cancel()
		if err != nil {
			return Summary{}, fmt.Errorf("step %d (%s): %w", i+1, step.title, err)
		}
		p.settle(ctx)
		p.report()
		p.mark()
		if s.afterStep != nil {
			if err := s.afterStep(ctx, i+1); err != nil {
				return Summary{}, fmt.Errorf("after step %d (%s): %w", i+1, step.title, err)
			}
		}
	}
	if err := s.deliveryErrors(); err != nil {
		return Summary{}, err
	}
	sum, err := p.summary(ctx, t.ref)
	if err != nil {
		return Summary{}, err
	}
	p.printSummary(sum)
	return sum, nil
}

// tail records the bus's event log from its first record, so nothing is
// missed between start and tail; the function returned stops it.
func (p *player) tail(ctx context.Context) func() {
	tctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- p.conn.TailLog(tctx, bus.TailOptions{Last: 1 << 30}, func(m bus.LogRecord) error {
			_ = p.log.PublishLog(tctx, m.Subject, m.Data) // a record that does not decode is not narrated
			return nil
		})
	}()
	return func() {
		stop()
		<-done
	}
}

// ---- waiting ----

func (p *player) wait(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (p *player) waitLog(ctx context.Context, what, event, key, value string) error {
	return p.wait(ctx, what, func() (bool, error) { return len(p.log.Find(event, map[string]any{key: value})) > 0, nil })
}

func (p *player) state(ctx context.Context, r string) (*graph.State, error) {
	if p.graphs == nil {
		store, err := graphstate.Open(ctx, p.conn)
		if err != nil {
			return nil, err
		}
		p.graphs = store
	}
	st, _, err := p.graphs.Get(ctx, r)
	return st, err
}

func (p *player) waitNode(ctx context.Context, r, node string) (*graph.State, error) {
	var st *graph.State
	err := p.wait(ctx, r+" to reach "+node, func() (bool, error) {
		var err error
		st, err = p.state(ctx, r)
		return err == nil && st != nil && st.Current == node, nil
	})
	if err == nil {
		p.say("loop", "%s is at %s (%s)", r, node, st.Status)
	}
	return st, err
}

func (p *player) thread(ctx context.Context, r string) (string, error) {
	kv, err := p.conn.KV(ctx, bus.BucketThreads)
	if err != nil {
		return "", err
	}
	store := threads.New(kv)
	var ts string
	err = p.wait(ctx, "the Slack thread of "+r, func() (bool, error) {
		var ok bool
		ts, ok, err = store.ThreadFor(ctx, Channel, r)
		return err == nil && ok, nil
	})
	return ts, err
}

func messageText(m slackfake.Message) string { return m.Text + "\n" + string(m.Blocks) }

func (p *player) waitSlack(ctx context.Context, root string, parts ...string) (slackfake.Message, error) {
	var found slackfake.Message
	err := p.wait(ctx, fmt.Sprintf("a Slack message with %q", parts), func() (bool, error) {
		for _, m := range p.st.Slack.Thread(Channel, root) {
			text := messageText(m)
			if !slices.ContainsFunc(parts, func(s string) bool { return !strings.Contains(text, s) }) {
				found = m
				return true, nil
			}
		}
		return false, nil
	})
	return found, err
}

func (p *player) waitInput(ctx context.Context, text string) error {
	return p.wait(ctx, "the session to be told "+text, func() (bool, error) {
		in, err := standin.ReadInputs(p.st.agentDir)
		return slices.ContainsFunc(in, func(i standin.Input) bool { return strings.Contains(i.Text, text) }), err
	})
}

// settle waits until the event log is quiet for a moment, so a step's
// report shows its effects rather than half of them. Correctness never
// depends on it: every step waited for its own end already.
func (p *player) settle(ctx context.Context) {
	last, quiet := p.log.Len(), 0
	for quiet < 8 && ctx.Err() == nil {
		time.Sleep(25 * time.Millisecond)
		if n := p.log.Len(); n != last {
			last, quiet = n, 0
			continue
		}
		quiet++
	}
}

// ---- the transcript ----

func (p *player) say(who, format string, args ...any) {
	fmt.Fprintf(p.out, "  %-8s %s\n", who, fmt.Sprintf(format, args...))
}

func (p *player) mark() {
	p.markLog = p.log.Len()
	p.markSlack = len(p.posts())
	b, _ := standin.ReadBoots(p.st.agentDir)
	in, _ := standin.ReadInputs(p.st.agentDir)
	p.markBoots, p.markInputs = len(b), len(in)
	p.markIssues = len(p.st.GitHub.Issues(Repo))
	p.markComments = map[int]int{}
	for _, is := range p.st.GitHub.Issues(Repo) {
		p.markComments[is.Number] = len(p.st.GitHub.Comments(Repo, is.Number))
	}
}

// posts are the messages the-loop posted (the stand-in keeps only those).
func (p *player) posts() []slackfake.Message {
	var out []slackfake.Message
	for _, m := range p.st.Slack.Messages(Channel) {
		if m.BotID != "" {
			out = append(out, m)
		}
	}
	return out
}

// report prints what crossed the bus, what GitHub and Slack received and
// what the session was told since the step began.
func (p *player) report() {
	// One line per event: its type, id, work item and the services that
	// published it (an off-ledger event: its ingress, then the ledger-writer
	// after recording it).
	type hop struct {
		typ, id, ref string
		by           []string
	}
	var hops []*hop
	byID := map[string]*hop{}
	for _, r := range p.log.Since(p.markLog) {
		if r.Event != "bus.published" || r.Fields["duplicate"] == true {
			continue
		}
		id := fmt.Sprint(r.Fields["event_id"])
		h := byID[id]
		if h == nil {
			h = &hop{typ: fmt.Sprint(r.Fields["event_type"]), id: id}
			byID[id] = h
			hops = append(hops, h)
		}
		h.ref = fmt.Sprint(r.Fields["work_item"]) // the ledger-writer's names the created issue
		h.by = append(h.by, r.Source)
	}
	for _, h := range hops {
		p.say("bus", "%s %s on %s (by %s)", h.typ, h.id, h.ref, strings.Join(h.by, " → "))
	}
	for _, is := range p.st.GitHub.Issues(Repo)[p.markIssues:] {
		if is.Login == LedgerLogin {
			p.say("GitHub", "issue #%d opened by %s: %q labels %v", is.Number, is.Login, is.Title, is.Labels)
		}
	}
	for _, is := range p.st.GitHub.Issues(Repo) {
		for _, c := range p.st.GitHub.Comments(Repo, is.Number)[p.markComments[is.Number]:] {
			if c.Login == Person {
				continue // said above, as the person's action
			}
			p.say("GitHub", "comment on #%d by %s: %s", is.Number, c.Login, firstLine(c.Body))
		}
	}
	for _, m := range p.posts()[p.markSlack:] {
		where := "top level"
		if m.ThreadTS != "" {
			where = "thread " + m.ThreadTS
		}
		p.say("Slack", "%s: %s", where, firstLine(m.Text))
	}
	boots, _ := standin.ReadBoots(p.st.agentDir)
	for _, b := range boots[min(p.markBoots, len(boots)):] {
		p.say("session", "%s %s, first turn: %s", b.Mode, b.SessionID, firstLine(b.Prompt))
	}
	in, _ := standin.ReadInputs(p.st.agentDir)
	for _, i := range in[min(p.markInputs, len(in)):] {
		p.say("session", "typed: %s", gist(i.Text))
	}
}

// gist is what a typed prompt is about: its event line and the words of the
// comment it carries, when it carries one (a relayed record's text without
// its attribution line and envelope).
func gist(prompt string) string {
	var event, body string
	for _, line := range strings.Split(prompt, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case event == "" && strings.HasPrefix(t, "- event:"):
			event = strings.TrimSpace(strings.TrimPrefix(t, "- event:"))
		case body == "" && strings.HasPrefix(t, `"body":`):
			body = strings.TrimSuffix(strings.TrimSpace(strings.TrimPrefix(t, `"body":`)), ",")
			var text string
			if json.Unmarshal([]byte(body), &text) == nil && graph.RelayedText(text) != "" {
				body = `"` + graph.RelayedText(text) + `"`
			}
		}
	}
	switch {
	case event == "":
		return firstLine(prompt)
	case body == "":
		return event
	}
	return firstLine(event + ": " + body)
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " …"
	}
	if r := []rune(s); len(r) > 110 {
		s = string(r[:110]) + "…"
	}
	return s
}

func (p *player) summary(ctx context.Context, r string) (Summary, error) {
	var sum Summary
	ids := map[string]bool{}
	for _, x := range p.log.Since(0) {
		switch x.Event {
		case "bus.published":
			if id, _ := x.Fields["event_id"].(string); id != "" {
				ids[id] = true
			}
		case "bus.recorded":
			sum.Records++
		}
	}
	sum.Events = len(ids)
	issues := p.st.GitHub.Issues(Repo)
	sum.Issues = len(issues)
	for _, is := range issues {
		sum.Comments += len(p.st.GitHub.Comments(Repo, is.Number))
	}
	sum.SlackMessages = len(p.posts())
	boots, err := standin.ReadBoots(p.st.agentDir)
	if err != nil {
		return sum, err
	}
	in, err := standin.ReadInputs(p.st.agentDir)
	if err != nil {
		return sum, err
	}
	sum.Boots, sum.Prompts = len(boots), len(in)
	st, err := p.state(ctx, r)
	if err != nil {
		return sum, err
	}
	if st == nil {
		return sum, errors.New("the work item has no graph state")
	}
	for _, a := range st.ApprovedBy {
		sum.ApprovedBy = append(sum.ApprovedBy, fmt.Sprintf("%s at %s (on %s)", a.Login, a.Node, a.Provenance.Channel))
	}
	return sum, nil
}

func (p *player) printSummary(s Summary) {
	fmt.Fprintln(p.out, "\n── Summary ──")
	tw := tabwriter.NewWriter(p.out, 0, 0, 2, ' ', 0)
	rows := []struct {
		name string
		n    int
		what string
	}{
		{"events", s.Events, "catalog events the bus accepted"},
		{"ledger records", s.Records, "of them written to GitHub by the ledger-writer before anyone saw them"},
		{"GitHub comments", s.Comments, "on the issues, alice's and the-loop's"},
		{"GitHub issues", s.Issues, "one opened by alice, one by her Slack kickoff"},
		{"Slack messages", s.SlackMessages, "posted by the-loop"},
		{"sessions", s.Boots, "agent sessions spawned"},
		{"prompts", s.Prompts, "events typed into the session"},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", r.name, r.n, r.what)
	}
	fmt.Fprintf(tw, "  approvedBy\t\t%s\n", strings.Join(s.ApprovedBy, "; "))
	_ = tw.Flush()
}
