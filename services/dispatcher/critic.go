package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/ask"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"github.com/the-loop/bus/services/dispatcher/internal/repoinfo"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// Critic rounds (docs/decisions/120-critics.md): a session asks, through
// its endpoint, for one round of a critic the operator configured
// (routing.critics) on a node's artifact. The dispatcher runs the critic's
// argv — the operator's, with placeholders filled element-wise and no shell
// — in the session's checkout, sandboxed as the session is, under the
// critic's timeout, then publishes what it printed (or why it failed) as
// critic.findings: the ledger-writer records it on the work item and fans
// it out, and the dispatcher types it into the session as any event. The
// agent chooses the critic, the node and a brief; nothing it sends becomes
// a command, an argument of its own or a directory.

// Bounds of a critic round.
const (
	criticWaitMax = 30 * time.Minute
	// maxBriefBytes bounds the agent's brief.
	maxBriefBytes = 16 << 10
	// maxPromptArtifact bounds the artifact text in the prompt: the prompt
	// may travel as one argument, and Linux refuses one over 128 KiB.
	maxPromptArtifact = 96 << 10
	// maxCriticOutput bounds what is kept of the critic's output, and
	// maxFindings what is published of it (a comment holds 65,536).
	maxCriticOutput = 1 << 20
	maxFindings     = 56 << 10
	maxCriticStderr = 8 << 10
	maxErrorLine    = 500
	// criticPublishWait bounds the publication of the findings.
	criticPublishWait = 30 * time.Second
)

// Refusals of a critic request (session.refused reasons).
const (
	refusedNoCritic   = "no-critic"
	refusedCriticBusy = "critic-busy"
)

// criticRunner runs the rounds of the sessions of this host, one at a time
// per work item: an agent cannot start critics faster than they finish.
type criticRunner struct {
	s *Service
	// base ends when the dispatcher stops: a round still running is killed
	// and reported.
	base    context.Context
	mu      sync.Mutex
	running map[string]string
}

// round is one critic round and, once done is closed, its outcome.
type round struct {
	rep    sessionapi.CriticRound
	critic config.Critic
	ref    string
	sess   *sessions.Session
	token  string
	brief  string
	// artifact is the artifact's absolute path and text ("" none).
	artifact     string
	artifactText []byte
	started      time.Time
	// published: the findings are on the bus (set before done closes).
	published bool
	done      chan struct{}
}

// criticsList answers sessionapi.PathCritics.
func (ep *sessionEndpoint) criticsList(_ context.Context, _ *http.Request, ref string, sess *sessions.Session, _ string) (int, any) {
	out := sessionapi.Critics{Ref: ref, Critics: []sessionapi.Critic{}, RepoCritics: repoinfo.RepoCritics(sess.Cwd)}
	env := ep.critic.env()
	for _, c := range ep.gates.config().Routing.Critics {
		bin := c.Argv()[0]
		out.Critics = append(out.Critics, sessionapi.Critic{Name: c.Name, Harness: c.Harness, Model: c.Model, Command: bin,
			Available: criticBinary(bin, env["PATH"]) != "", Enabled: c.Enabled, Timeout: sessionapi.Duration(c.Timeout)})
	}
	return http.StatusOK, out
}

// criticRun answers sessionapi.PathCriticRun: it starts the round and waits
// up to the request's wait for it to end and be recorded.
func (ep *sessionEndpoint) criticRun(ctx context.Context, r *http.Request, ref string, sess *sessions.Session, token string) (int, any) {
	var req sessionapi.CriticRunRequest
	if status, e, ok := readOwn(r, &req, `{"critic": "NAME", "node": "…", "brief": "…"}`, ref); !ok {
		return status, e
	}
	cfg := ep.gates.config()
	c, ok := cfg.Routing.Critic(req.Critic)
	switch {
	case !ok:
		var names []string
		for _, c := range cfg.Routing.Critics {
			names = append(names, c.Name)
		}
		known := "none is configured"
		if len(names) > 0 {
			known = "the critics are " + strings.Join(names, ", ")
		}
		return http.StatusNotFound, refusal{refusedNoCritic, fmt.Sprintf("no critic named %q in the operator's routing.critics; %s", clip(req.Critic), known)}
	case !c.Enabled:
		return http.StatusConflict, refusal{refusedNoCritic, fmt.Sprintf("critic %s is disabled in the operator's routing.critics", c.Name)}
	case len(req.Brief) > maxBriefBytes:
		return http.StatusBadRequest, refusal{refusedBadRequest, fmt.Sprintf("the brief is longer than %d bytes", maxBriefBytes)}
	case sess.Cwd == "":
		return http.StatusConflict, refusal{refusedBadRequest, "the session has no checkout for a critic to run in"}
	}
	rd := &round{critic: c, ref: ref, sess: sess, token: token, brief: strings.TrimSpace(req.Brief), started: time.Now(), done: make(chan struct{})}
	if status, e := ep.criticTarget(ctx, rd, req.Node); e != "" {
		return status, refusal{refusedBadRequest, e}
	}
	rd.rep.ID = envelope.LoopID("critic", ref, c.Name, rd.started.UTC().Format(time.RFC3339Nano))
	rd.rep.Ref, rd.rep.Critic = ref, c.Name
	if other := ep.critic.claim(ref, c.Name); other != "" {
		return http.StatusConflict, refusal{refusedCriticBusy, fmt.Sprintf("a round of critic %s is running for this work item; its findings arrive as a new prompt", other)}
	}
	// Marked as waiting, so the Stop hook lets the agent stop until the
	// findings reach it (the delivery clears the mark).
	ep.awaiting(ctx, ref, sess, criticAwaiting+rd.rep.ID)
	ep.events.Emit(ctx, "critic.started", slog.String("work_item", ref), slog.String("critic", c.Name),
		slog.String("node", rd.rep.Node), slog.String("round", rd.rep.ID))
	// The round writes rd.rep from now on; the answer of a round still
	// running is this copy.
	running := rd.rep
	running.Running = true
	go ep.critic.run(rd, ep)

	wait := min(max(time.Duration(req.Wait), 0), criticWaitMax)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-rd.done:
	case <-t.C:
		return http.StatusAccepted, running
	case <-ctx.Done():
		return http.StatusServiceUnavailable, map[string]string{"error": "the request ended; the round goes on and its findings arrive as a new prompt", "id": running.ID}
	}
	rep := rd.rep
	if rd.published {
		// The round ended in the wait: its record is awaited for what is
		// left of it.
		wctx, cancel := context.WithTimeout(ctx, max(time.Until(rd.started.Add(wait)), time.Second))
		url, err := ask.Await(wctx, ep.conn, rep.ID, ref)
		cancel()
		rep.URL, rep.Pending = url, err != nil
	}
	return http.StatusOK, rep
}

// criticAwaiting prefixes the awaited id of a session waiting on a critic.
const criticAwaiting = "critic:"

// unawait takes back the session's wait on id, if it still waits on it.
func (ep *sessionEndpoint) unawait(ctx context.Context, ref, id string) {
	if _, err := ep.sessions.Load().Mutate(ctx, ref, func(r *sessions.Record) error {
		if r.Session == nil || r.Session.AwaitingInput != id {
			return sessions.ErrNoChange
		}
		r.Session.AwaitingInput = ""
		return nil
	}); err != nil {
		ep.log.Warn("dispatcher: a critic round's wait not taken back; `the-loop check` answers wait until the next event", "work_item", ref, "err", err)
	}
}

// criticTarget settles the node and artifact of rd: node's when named
// (it must be in the work item's graph, and its artifact written), else the
// current node's once written, else the last visited node's that is. A
// node without an artifact, or none written, is a round on the checkout as
// the brief says. It answers a status and a refusal when there is none to
// settle.
func (ep *sessionEndpoint) criticTarget(ctx context.Context, rd *round, node string) (int, string) {
	store, err := ep.gates.open(ctx)
	if err != nil {
		return http.StatusServiceUnavailable, "graph state unavailable"
	}
	st, _, err := store.Get(ctx, rd.ref)
	if err != nil {
		return http.StatusServiceUnavailable, "the work item's graph state could not be read"
	}
	if st == nil {
		if node != "" {
			return http.StatusConflict, "no process graph has started for this work item: there is no node " + clip(node)
		}
		return 0, ""
	}
	g, ok := ep.gates.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		return http.StatusConflict, fmt.Sprintf("the work item follows graph %q, which this dispatcher's configuration does not hold", st.Graph)
	}
	dir := rd.sess.ArtifactDir()
	var n *graph.Node
	switch {
	case node != "":
		if n = g.Node(node); n == nil {
			return http.StatusBadRequest, fmt.Sprintf("node %q is not in graph %s", clip(node), g.Name)
		}
	default:
		// The current node's artifact once written, else the last written
		// along the way (a review node's own report is written after its
		// rounds), else none: the round is on the checkout.
		rd.rep.Node = st.Current
		seen := []string{st.Current}
		for i := len(st.History) - 1; i >= 0; i-- {
			seen = append(seen, st.History[i].Node)
		}
		for _, name := range seen {
			if h := g.Node(name); h != nil && h.Artifact != "" {
				if _, _, err := flow.ReadArtifact(dir, h.Artifact); err == nil {
					n = h
					break
				}
			}
		}
	}
	if n == nil {
		return 0, ""
	}
	rd.rep.Node = n.Name
	if n.Artifact == "" {
		return 0, ""
	}
	name, text, err := flow.ReadArtifact(dir, n.Artifact)
	if err != nil {
		return http.StatusConflict, fmt.Sprintf("the artifact of node %s (%s) cannot be read: write it first", n.Name, strings.ReplaceAll(n.Artifact, "|", " or "))
	}
	rd.artifact, rd.artifactText = filepath.Join(dir, filepath.FromSlash(name)), text
	rd.rep.Artifact = filepath.ToSlash(name)
	if rel, err := filepath.Rel(rd.sess.Cwd, rd.artifact); err == nil && !strings.HasPrefix(rel, "..") {
		rd.rep.Artifact = filepath.ToSlash(rel)
	}
	return 0, ""
}

// claim records a round of critic for ref, or names the round already
// running there.
func (cr *criticRunner) claim(ref, critic string) string {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	if other, ok := cr.running[ref]; ok {
		return other
	}
	cr.running[ref] = critic
	return ""
}

func (cr *criticRunner) release(ref string) {
	cr.mu.Lock()
	defer cr.mu.Unlock()
	delete(cr.running, ref)
}

// env is the environment a critic runs with: a session's, without the
// endpoint and its token — a critic reviews, it does not act as the
// session.
func (cr *criticRunner) env() map[string]string {
	env := maps.Clone(cr.s.set.SessionEnv)
	if env == nil {
		env = map[string]string{}
	}
	if env["PATH"] == "" {
		env["PATH"] = defaultPath
	}
	delete(env, EnvSessionURL)
	delete(env, EnvSessionToken)
	return env
}

// run runs rd to its end and publishes its findings, whatever the end.
func (cr *criticRunner) run(rd *round, ep *sessionEndpoint) {
	defer close(rd.done)
	defer cr.release(rd.ref)
	base := cr.base
	if base == nil {
		base = context.Background()
	}
	out, exit, runErr := cr.execute(base, rd)
	rep := &rd.rep
	rep.Duration = sessionapi.Duration(time.Since(rd.started).Round(time.Millisecond))
	rep.ExitCode = exit
	switch {
	case errors.Is(runErr, context.DeadlineExceeded):
		rep.Outcome, rep.Error = sessionapi.CriticTimedOut, fmt.Sprintf("no answer within its timeout of %s; it was stopped", rd.critic.Timeout)
	case runErr != nil:
		rep.Outcome, rep.Error = sessionapi.CriticFailed, runErr.Error()
	default:
		rep.Outcome = sessionapi.CriticOK
	}
	text := criticText(out, rd.critic.OutputFormat())
	text = ep.scrub(sessionapi.Scrub(text, rd.token))
	// One line, bounded: it stands in the record's heading.
	rep.Error = strings.Join(strings.Fields(ep.scrub(sessionapi.Scrub(rep.Error, rd.token))), " ")
	if len(rep.Error) > maxErrorLine {
		rep.Error = strings.ToValidUTF8(rep.Error[:maxErrorLine], "") + "…"
	}
	if len(text) > maxFindings {
		text = strings.ToValidUTF8(text[:maxFindings], "") + "\n\n… (cut by the-loop: the critic printed more)"
	}
	rep.Findings = text

	ctx, cancel := context.WithTimeout(context.Background(), criticPublishWait)
	defer cancel()
	ev := criticEvent(rd, time.Now())
	if _, err := flow.Publish(ctx, ep.conn, ev); err != nil {
		// The findings are in the answer still, when the agent waits.
		ep.log.Error("dispatcher: critic findings not published", "work_item", rd.ref, "round", rep.ID, "err", err)
		rep.Error = strings.TrimSpace(rep.Error + "; its findings could not be put on the bus, so they are not on the work item: " + err.Error())
		// Nothing will arrive: the session must not wait for it.
		uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
		ep.unawait(uctx, rd.ref, criticAwaiting+rep.ID)
		ucancel()
	} else {
		rd.published = true
	}
	ep.events.Emit(ctx, "critic.finished", slog.String("work_item", rd.ref), slog.String("critic", rd.critic.Name),
		slog.String("round", rep.ID), slog.String("outcome", rep.Outcome), slog.Int("exit_code", exit),
		slog.Duration("duration", time.Duration(rep.Duration)))
}

// execute runs the critic and returns its standard output (what it printed
// before it failed or was stopped included), its exit code and why it did
// not succeed.
func (cr *criticRunner) execute(base context.Context, rd *round) ([]byte, int, error) {
	s := cr.s
	env := cr.env()
	tmp, err := os.MkdirTemp(env["TMPDIR"], "the-loop-critic-")
	if err != nil {
		return nil, -1, fmt.Errorf("no scratch directory for the prompt: %w", err)
	}
	defer os.RemoveAll(tmp)
	prompt := criticPrompt(rd)
	promptFile := filepath.Join(tmp, "prompt.md")
	if err := os.WriteFile(promptFile, []byte(prompt), 0o600); err != nil {
		return nil, -1, fmt.Errorf("the prompt file: %w", err)
	}
	values := map[string]string{
		config.PlaceholderPrompt: prompt, config.PlaceholderPromptFile: promptFile, config.PlaceholderModel: rd.critic.Model,
		config.PlaceholderArtifact: rd.artifact, config.PlaceholderWorkItem: rd.ref, config.PlaceholderSpecDir: rd.sess.ArtifactDir(),
		config.PlaceholderCwd: rd.sess.Cwd,
	}
	argv := fillCriticArgv(rd.critic.Argv(), values)
	bin := criticBinary(argv[0], env["PATH"])
	if bin == "" {
		return nil, -1, fmt.Errorf("its command %s is not an executable on the session's PATH", argv[0])
	}
	argv[0] = bin
	if s.sandboxed() {
		if argv, err = s.confineCritic(base, rd, argv, env); err != nil {
			return nil, -1, fmt.Errorf("no sandbox for it: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(base, rd.critic.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = rd.sess.Cwd
	cmd.Env = envList(env)
	var stdout, stderr capped
	stdout.max, stderr.max, stderr.tail = maxCriticOutput, maxCriticStderr, true
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The whole process group goes at the timeout: a critic's own children
	// must not outlive its round.
	killGroup(cmd)
	cmd.WaitDelay = 5 * time.Second
	err = cmd.Run()
	switch {
	case ctx.Err() != nil:
		return stdout.b.Bytes(), cmd.ProcessState.ExitCode(), ctx.Err()
	case err != nil:
		why := strings.TrimSpace(stderr.b.String())
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if why == "" {
				return stdout.b.Bytes(), ee.ExitCode(), fmt.Errorf("it exited %d", ee.ExitCode())
			}
			return stdout.b.Bytes(), ee.ExitCode(), fmt.Errorf("it exited %d: %s", ee.ExitCode(), why)
		}
		return stdout.b.Bytes(), -1, fmt.Errorf("it could not run: %w", err)
	}
	return stdout.b.Bytes(), 0, nil
}

// confineCritic is argv under `the-loop sandbox` with the session's own
// policy, and the critic's executable's directory.
func (s *Service) confineCritic(ctx context.Context, rd *round, argv []string, env map[string]string) ([]string, error) {
	ws, err := s.ensureWorkspace(ctx, &input{ref: rd.ref})
	if err != nil {
		return nil, err
	}
	p, err := s.sessionPolicy(env, ws)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(argv[0]); err == nil {
		p.Exec = append(p.Exec, filepath.Dir(real))
	}
	if err := s.checkPolicy(p, nil); err != nil {
		return nil, err
	}
	return p.Command(s.loopBinary(), argv), nil
}

// criticBinary is the executable name stands for: itself when absolute,
// else found on path; "" when there is none.
func criticBinary(name, path string) string {
	if filepath.IsAbs(name) {
		if fi, err := os.Stat(name); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return name
		}
		return ""
	}
	return lookPathIn(name, path)
}

// fillCriticArgv replaces the placeholders of each element of tmpl: a value
// stays inside the element it replaces, so it can never add an argument.
// One pass over the template: a value is never searched for placeholders
// in its turn.
func fillCriticArgv(tmpl []string, values map[string]string) []string {
	out := make([]string, len(tmpl))
	for i, a := range tmpl {
		out[i] = criticPlaceholder.ReplaceAllStringFunc(a, func(ph string) string {
			if v, ok := values[ph]; ok {
				return v
			}
			return ph
		})
	}
	return out
}

// criticPlaceholder is a placeholder's shape (config refuses unknown ones).
var criticPlaceholder = regexp.MustCompile(`\{[A-Za-z][A-Za-z0-9_]*\}`)

// criticPrompt is what the critic is asked. It starts with words, never a
// dash, so a critic that reads it as one argument cannot take it for a
// flag.
func criticPrompt(rd *round) string {
	var b strings.Builder
	fmt.Fprintf(&b, "You are a critic. Another agent is working on %s", rd.ref)
	if rd.rep.Node != "" {
		fmt.Fprintf(&b, " and is at the step %q of its process", rd.rep.Node)
	}
	b.WriteString(". Review its work and report your findings as a numbered list, the most important first, each saying what is wrong and why; say \"No findings.\" when you have none. Do not change any file: you review, the agent acts.\n")
	if rd.brief != "" {
		fmt.Fprintf(&b, "\nThe agent asks you to look at this:\n%s\n", rd.brief)
	}
	if rd.artifact == "" {
		b.WriteString("\nThe work is in the checkout you run in.\n")
		return b.String()
	}
	fmt.Fprintf(&b, "\nThe artifact under review is %s, in the checkout you run in. Its text:\n\n", rd.rep.Artifact)
	text := rd.artifactText
	cut := len(text) > maxPromptArtifact
	if cut {
		text = text[:maxPromptArtifact]
	}
	fmt.Fprintf(&b, "===== %s =====\n%s\n===== end of %s =====\n", rd.rep.Artifact, strings.ToValidUTF8(string(text), ""), rd.rep.Artifact)
	if cut {
		b.WriteString("(The text was cut here; read the file for the rest.)\n")
	}
	return b.String()
}

// criticText is the findings in out: as it is, or for json output the
// first text key of the object it prints (else as it is: findings printed
// in another shape are findings still).
func criticText(out []byte, format string) string {
	text := strings.ToValidUTF8(string(out), "")
	if format != config.CriticOutputJSON {
		return strings.TrimSpace(text)
	}
	var obj map[string]any
	trimmed := bytes.TrimSpace(out)
	if i := bytes.LastIndexByte(trimmed, '\n'); json.Unmarshal(trimmed, &obj) != nil && i >= 0 {
		_ = json.Unmarshal(trimmed[i+1:], &obj) // a stream's last line is its result
	}
	for _, k := range []string{"result", "response", "text", "output", "content", "message"} {
		if v, ok := obj[k].(string); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
	}
	return strings.TrimSpace(text)
}

// criticEvent is rd's findings as a catalog event: the session's, as its
// question is, naming the critic.
func criticEvent(rd *round, now time.Time) *loopv1.Event {
	rep := rd.rep
	detail := map[string]string{"critic": rd.critic.Name, "outcome": rep.Outcome, "exit_code": strconv.Itoa(rep.ExitCode),
		"duration": time.Duration(rep.Duration).String(), "round": rep.ID}
	if rd.critic.Harness != "" {
		detail["harness"] = rd.critic.Harness
	}
	if rd.critic.Model != "" {
		detail["model"] = rd.critic.Model
	}
	if rep.Error != "" {
		detail["error"] = rep.Error
	}
	return &loopv1.Event{
		Id:      rep.ID,
		Source:  catalog.SourceSession,
		Type:    string(catalog.CriticFindings),
		Subject: rd.ref,
		Time:    envelope.NewTime(now),
		Actor:   &loopv1.Actor{Name: "critic " + rd.critic.Name + " for agent session " + rd.sess.TmuxTarget},
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{
			Text: rep.Findings, Node: rep.Node, Artifact: rep.Artifact, Detail: detail}},
	}
}

// capped keeps at most max bytes of what is written to it: the first, or
// with tail the last.
type capped struct {
	b    bytes.Buffer
	max  int
	tail bool
}

func (c *capped) Write(p []byte) (int, error) {
	n := len(p)
	switch {
	case !c.tail:
		if room := c.max - c.b.Len(); room > 0 {
			c.b.Write(p[:min(room, len(p))])
		}
	default:
		c.b.Write(p)
		if over := c.b.Len() - c.max; over > 0 {
			rest := slices.Clone(c.b.Bytes()[over:])
			c.b.Reset()
			c.b.Write(rest)
		}
	}
	return n, nil
}

// clip keeps a value quoted in a refusal short.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// criticComment is the text a session is shown of a critic's findings.
func criticComment(n *loopv1.Notification) string {
	d := n.GetDetail()
	head := "Critic " + d["critic"]
	if n.GetArtifact() != "" {
		head += " on " + n.GetArtifact()
	}
	switch d["outcome"] {
	case sessionapi.CriticOK:
		head += ": its findings"
	default:
		head += ": the round " + d["outcome"]
		if d["error"] != "" {
			head += " (" + d["error"] + ")"
		}
	}
	if strings.TrimSpace(n.GetText()) == "" {
		return head + ". It printed nothing."
	}
	return head + ":\n\n" + n.GetText()
}
