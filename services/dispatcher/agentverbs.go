package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/links"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"github.com/the-loop/bus/services/dispatcher/internal/repoinfo"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// The agent's verbs on the session endpoint beyond ask and complete
// (docs/agents.md): each answers about the session's own work item only,
// reads the session's own checkout when it reads files, and moves nothing a
// person decides.

// checkReport is where ref stands for its session sess: the verdict the
// Stop hook and `the-loop check` read.
func (gs *gates) checkReport(ctx context.Context, ref string, sess *sessions.Session) (sessionapi.CheckReport, error) {
	rep := sessionapi.CheckReport{Ref: ref, Status: sessionapi.CheckOK, SpecDir: specDirOf(sess), Nodes: []sessionapi.NodeCheck{}}
	store, err := gs.open(ctx)
	if err != nil {
		return rep, fmt.Errorf("graph state: %w", err)
	}
	st, _, err := store.Get(ctx, ref)
	if err != nil {
		return rep, err
	}
	if st == nil {
		rep.Messages = []string{"no process graph has started for this work item: nothing to check"}
		return rep, nil
	}
	rep.Graph, rep.CurrentNode = st.Graph, st.Current
	g, ok := gs.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		rep.Messages = []string{fmt.Sprintf("the work item follows graph %q, which this dispatcher's configuration does not hold: nothing to check", st.Graph)}
		return rep, nil
	}
	for i, h := range st.History {
		n := g.Node(h.Node)
		nc := sessionapi.NodeCheck{Node: h.Node, Status: sessionapi.CheckOK}
		if n != nil {
			nc.Phase, nc.Actor = n.Phase, string(n.Actor)
		}
		if h.Skipped {
			nc.Status = sessionapi.CheckSkipped
		}
		if i == len(st.History)-1 && h.Node == st.Current {
			nc.Status, nc.Messages = currentVerdict(st, n, sess, rep.SpecDir)
			if nc.Status == sessionapi.CheckBlock && len(n.Exit) > 0 {
				nc.Messages = append(hookMessages(st, g, n, sess), nc.Messages...)
			}
			rep.Phase, rep.Status, rep.Messages = nc.Phase, nc.Status, nc.Messages
		}
		rep.Nodes = append(rep.Nodes, nc)
	}
	return rep, nil
}

// currentVerdict judges the node the work item stands at. An agent's node
// is open until the agent completes it: the Stop hook keeps the agent
// working on it, unless it asked a person and waits for the answer.
func currentVerdict(st *graph.State, n *graph.Node, sess *sessions.Session, specDir string) (string, []string) {
	switch {
	case n == nil:
		return sessionapi.CheckOK, []string{fmt.Sprintf("node %q is not in the graph: nothing to check", st.Current)}
	case st.Terminal() || n.Terminal:
		return sessionapi.CheckDone, []string{fmt.Sprintf("the work item has ended at %s", n.Name)}
	case n.IsGate():
		return sessionapi.CheckWait, []string{fmt.Sprintf("waiting at %s for a person: an authorized person's comment on the work item decides it, never the session", n.Name)}
	case sess != nil && strings.HasPrefix(sess.AwaitingInput, criticAwaiting):
		return sessionapi.CheckWait, []string{"a critic round this session asked for has not reported yet: stop and wait; its findings arrive as a new prompt"}
	case sess != nil && sess.AwaitingInput != "":
		return sessionapi.CheckWait, []string{"a question this session asked has no answer yet: stop and wait; the answer arrives as a new prompt"}
	}
	var msgs []string
	if n.Artifact != "" {
		dir := ""
		if sess != nil {
			dir = sess.ArtifactDir()
		}
		alts := n.Artifacts()
		for i, a := range alts {
			alts[i] = filepath.ToSlash(filepath.Join(specDir, a))
		}
		if name, _, err := flow.ReadArtifact(dir, n.Artifact); err != nil {
			msgs = append(msgs, fmt.Sprintf("the node's artifact is not written yet: write %s", strings.Join(alts, " or ")))
		} else {
			msgs = append(msgs, fmt.Sprintf("the node's artifact %s is written", filepath.ToSlash(filepath.Join(specDir, name))))
		}
	}
	msgs = append(msgs, fmt.Sprintf("node %s (%s) is this session's and still open: finish its work, then run `the-loop graph complete`; to ask a person, run `the-loop ask` and stop", n.Name, n.Phase))
	return sessionapi.CheckBlock, msgs
}

// hookMessages say what n's exit hooks hold against completing it now: the
// artifacts' findings, checked afresh, and the last refusal's reason (a
// failed test run, which is not run again here).
func hookMessages(st *graph.State, g *graph.Graph, n *graph.Node, sess *sessions.Session) []string {
	var msgs []string
	for _, f := range artifactFindings(st, g, n, sess) {
		msgs = append(msgs, "not done yet: "+f)
	}
	if st.Reason != "" && strings.Contains(st.Reason, "verify-tests") {
		msgs = append(msgs, "the last `the-loop graph complete` was refused: "+st.Reason)
	}
	if len(n.ExitHooks(graph.HookVerifyTests)) > 0 {
		msgs = append(msgs, "`the-loop graph complete` runs the tests before it accepts the node")
	}
	return msgs
}

// specDirOf is sess's spec directory relative to its checkout.
func specDirOf(sess *sessions.Session) string {
	if sess == nil || sess.SpecDir == "" || sess.Cwd == "" {
		return ""
	}
	rel, err := filepath.Rel(sess.Cwd, sess.SpecDir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	return filepath.ToSlash(rel)
}

// check answers sessionapi.PathCheck.
func (ep *sessionEndpoint) check(ctx context.Context, _ *http.Request, ref string, sess *sessions.Session, _ string) (int, any) {
	rep, err := ep.gates.checkReport(ctx, ref, sess)
	if err != nil {
		ep.log.Warn("dispatcher: session check", "work_item", ref, "err", err)
		return http.StatusServiceUnavailable, map[string]string{"error": "the work item's graph state could not be read"}
	}
	return http.StatusOK, rep
}

// graphView answers sessionapi.PathGraph.
func (ep *sessionEndpoint) graphView(ctx context.Context, _ *http.Request, ref string, sess *sessions.Session, _ string) (int, any) {
	store, err := ep.gates.open(ctx)
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"error": "graph state unavailable"}
	}
	st, _, err := store.Get(ctx, ref)
	switch {
	case errors.Is(err, graphstate.ErrOtherRef), err != nil:
		return http.StatusServiceUnavailable, map[string]string{"error": "the work item's graph state could not be read"}
	case st == nil:
		return http.StatusNotFound, map[string]string{"error": ref + " has no graph state: no session has started its graph"}
	}
	v := sessionapi.GraphView{Ref: ref, Graph: st.Graph, CurrentNode: st.Current, Status: string(st.Status),
		SpecDir: specDirOf(sess), State: st, Nodes: []sessionapi.GraphNode{}}
	g, ok := ep.gates.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		return http.StatusOK, v
	}
	v.Description = g.Description
	for _, n := range g.Nodes {
		gn := sessionapi.GraphNode{Name: n.Name, Actor: string(n.Actor), Phase: n.Phase, Artifact: n.Artifact,
			Gate: string(n.Gate), Terminal: n.Terminal, Current: n.Name == st.Current,
			Skipped: slices.Contains(st.Skips, n.Name), Instructions: n.Instructions}
		for _, h := range n.Exit {
			gn.Checks = append(gn.Checks, h.Summary())
		}
		if len(n.On) > 0 {
			gn.On = map[string]string{}
			for o, to := range n.On {
				gn.On[string(o)] = to
			}
		}
		v.Nodes = append(v.Nodes, gn)
	}
	return http.StatusOK, v
}

// register answers sessionapi.PathRegister: the harness's own conversation
// id, for a harness that picks it itself, so a respawn resumes it.
func (ep *sessionEndpoint) register(ctx context.Context, r *http.Request, ref string, sess *sessions.Session, _ string) (int, any) {
	var req sessionapi.RegisterRequest
	if status, e, ok := readOwn(r, &req, `{"harnessSessionId": "…"}`, ref); !ok {
		return status, e
	}
	if !agent.ValidSessionID(req.HarnessSessionID) {
		return http.StatusBadRequest, refusal{refusedBadRequest, "harnessSessionId must be 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit"}
	}
	store := ep.sessions.Load()
	rec, err := store.Mutate(ctx, ref, func(rec *sessions.Record) error {
		if !rec.Session.Live() || rec.Session.TokenHash != sess.TokenHash {
			return errNotOwn
		}
		if rec.Session.HarnessSessionID == req.HarnessSessionID {
			return sessions.ErrNoChange
		}
		rec.Session.HarnessSessionID = req.HarnessSessionID
		return nil
	})
	switch {
	case errors.Is(err, errNotOwn):
		return http.StatusConflict, refusal{refusedNoSession, "the session was replaced meanwhile"}
	case err != nil:
		return http.StatusServiceUnavailable, map[string]string{"error": "the session registry is unavailable"}
	}
	ep.events.Emit(ctx, "session.registered", slog.String("work_item", ref),
		slog.String("harness", rec.Session.Harness), slog.String("harness_session_id", req.HarnessSessionID))
	return http.StatusOK, sessionapi.Registered{Ref: ref, Harness: rec.Session.Harness, HarnessSessionID: req.HarnessSessionID}
}

// errNotOwn: the registry's session is not the one asking any more.
var errNotOwn = errors.New("not the asking session")

// linkPR answers sessionapi.PathLinkPR: the pull request is recorded on the
// work item and in the links ingress-github routes by.
func (ep *sessionEndpoint) linkPR(ctx context.Context, r *http.Request, ref string, _ *sessions.Session, _ string) (int, any) {
	var req sessionapi.LinkPRRequest
	if status, e, ok := readOwn(r, &req, `{"pullRequest": "16 | github:owner/repo#16"}`, ref); !ok {
		return status, e
	}
	pr, err := pullRequestRef(ref, req.PullRequest)
	if err != nil {
		return http.StatusBadRequest, refusal{refusedBadRequest, err.Error()}
	}
	ls, err := links.Open(ctx, ep.conn)
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"error": "the links are unavailable"}
	}
	already, err := ls.Add(ctx, pr, ref)
	switch {
	case errors.Is(err, links.ErrTooMany):
		return http.StatusConflict, refusal{refusedBadRequest, err.Error()}
	case err != nil:
		ep.log.Warn("dispatcher: link-pr", "work_item", ref, "pull_request", pr, "err", err)
		return http.StatusServiceUnavailable, map[string]string{"error": "the link could not be written"}
	}
	if _, err := ep.sessions.Load().Mutate(ctx, ref, func(rec *sessions.Record) error {
		for _, p := range rec.PullRequests {
			if p == pr {
				return sessions.ErrNoChange
			}
		}
		rec.PullRequests = append(rec.PullRequests, pr)
		return nil
	}); err != nil {
		ep.log.Warn("dispatcher: link-pr: the work item's record", "work_item", ref, "pull_request", pr, "err", err)
	}
	ep.events.Emit(ctx, "session.pr_linked", slog.String("work_item", ref), slog.String("pull_request", pr),
		slog.Bool("already", already))
	return http.StatusOK, sessionapi.LinkedPR{Ref: ref, PullRequest: pr, Already: already}
}

// pullRequestRef reads a link-pr argument: N or #N in ref's repository, or
// a ref. A work item is never linked to itself.
func pullRequestRef(ref, arg string) (string, error) {
	arg = strings.TrimSpace(arg)
	pr := arg
	if n, err := strconv.ParseInt(strings.TrimPrefix(arg, "#"), 10, 64); err == nil {
		if n <= 0 {
			return "", fmt.Errorf("pull request %q: a number is positive", arg)
		}
		repo, _, _ := strings.Cut(ref, "#")
		pr = repo + "#" + strconv.FormatInt(n, 10)
	}
	if graphstate.WorkItemURL(pr) == "" {
		return "", fmt.Errorf("pull request %q: want its number (16, #16) or a ref like github:owner/repo#16", arg)
	}
	if strings.EqualFold(pr, ref) {
		return "", fmt.Errorf("pull request %s is the work item itself", pr)
	}
	return pr, nil
}

// instructions answers sessionapi.PathInstructions from the session's
// checkout.
func (ep *sessionEndpoint) instructions(ctx context.Context, _ *http.Request, ref string, sess *sessions.Session, _ string) (int, any) {
	node, phase := ep.gates.position(ctx, ref)
	in, err := repoinfo.Instructions(sess.Cwd, node, phase)
	if err != nil {
		return http.StatusServiceUnavailable, map[string]string{"error": "the session's checkout cannot be read: " + err.Error()}
	}
	in.Ref = ref
	return http.StatusOK, in
}

// scenarios answers sessionapi.PathScenarios from the session's checkout.
func (ep *sessionEndpoint) scenarios(ctx context.Context, r *http.Request, ref string, sess *sessions.Session, _ string) (int, any) {
	sc, err := repoinfo.Scenarios(ctx, sess.Cwd, r.URL.Query()["glob"])
	switch {
	case errors.Is(err, repoinfo.ErrBadGlob):
		return http.StatusBadRequest, refusal{refusedBadRequest, err.Error()}
	case err != nil:
		return http.StatusServiceUnavailable, map[string]string{"error": "the session's checkout cannot be read: " + err.Error()}
	}
	sc.Ref = ref
	return http.StatusOK, sc
}

// position is ref's current node and its phase ("" when unknown).
func (gs *gates) position(ctx context.Context, ref string) (node, phase string) {
	store, err := gs.open(ctx)
	if err != nil {
		return "", ""
	}
	st, _, err := store.Get(ctx, ref)
	if err != nil || st == nil {
		return "", ""
	}
	if g, ok := gs.config().Graphs.Registry().Get(st.Graph); ok {
		if n := g.Node(st.Current); n != nil {
			phase = n.Phase
		}
	}
	return st.Current, phase
}
