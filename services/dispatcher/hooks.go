package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"github.com/the-loop/bus/services/dispatcher/internal/repoinfo"
)

// Node hooks (docs/decisions/113-node-hooks.md). When a session says its
// agent node is done, the node's exit hooks are checked before the work item
// moves: validate-artifacts reads the artifacts in the session's spec
// directory, at once; verify-tests runs the test command (the graph's, else
// the repository's testing.command) in the session's checkout, under the
// session's sandbox, in the background, and the session's client asks again
// until the run has finished. A failed check keeps the node open: the
// session's complete is refused with every finding, and the state's reason
// keeps a short form of them, which `the-loop check` and the graph context
// show. An operator's `the-loop graph complete` outside a session is the
// operator's act and is not checked, as advance and force are not.

// defaultTestTimeout bounds a verify-tests run whose hook names no timeout.
const defaultTestTimeout = 15 * time.Minute

// maxTestOutput is how much of a failed run's output the session is shown
// (its end, where a test runner says what failed).
const maxTestOutput = 4 << 10

// testRunner runs argv in sess's checkout, confined as sess is, within
// timeout; it returns the run's combined output and an error when the
// command failed or could not run.
type testRunner func(ctx context.Context, sess *sessions.Session, argv []string, timeout time.Duration) (string, error)

// testRun is one verify-tests run of one visit of a node.
type testRun struct {
	node    string
	visit   int
	argv    []string
	done    chan struct{}
	failure string // "" once passed
	output  string
}

// testRuns are the runs in flight or finished and not yet collected, one
// per work item. A dispatcher answers only its own host's sessions, so they
// are kept in memory.
type testRuns struct {
	mu   sync.Mutex
	runs map[string]*testRun
}

// completeVerdict is what the checks of a session's complete found.
type completeVerdict struct {
	// findings keep the node open.
	findings []string
	// detail is shown to the session only (a failed run's output).
	detail string
	// running: a test run is in flight; ask again.
	running string
}

// checkComplete checks the exit hooks of the node ref stands at for its
// session sess. A node that is not an agent's, or has no hooks, passes: the
// move itself refuses what must be refused.
func (gs *gates) checkComplete(ctx context.Context, ref string, sess *sessions.Session) (completeVerdict, string, error) {
	store, err := gs.open(ctx)
	if err != nil {
		return completeVerdict{}, "", err
	}
	st, _, err := store.Get(ctx, ref)
	if err != nil || st == nil {
		return completeVerdict{}, "", err
	}
	g, ok := gs.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		return completeVerdict{}, "", nil
	}
	n := g.Node(st.Current)
	if n == nil || n.Actor != graph.Agent || n.Terminal || st.Terminal() || len(n.Exit) == 0 {
		return completeVerdict{}, "", nil
	}
	if f := artifactFindings(st, g, n, sess); len(f) > 0 {
		gs.hold(ctx, ref, n.Name, f)
		return completeVerdict{findings: f}, n.Name, nil
	}
	for _, h := range n.ExitHooks(graph.HookVerifyTests) {
		v := gs.verifyTests(ctx, ref, st, n, h, sess)
		if len(v.findings) > 0 {
			gs.hold(ctx, ref, n.Name, v.findings)
		}
		if len(v.findings) > 0 || v.running != "" {
			return v, n.Name, nil
		}
	}
	return completeVerdict{}, n.Name, nil
}

// artifactFindings are what n's validate-artifacts hooks find in sess's
// spec directory. An artifact whose own step the phase selection skipped is
// a planned absence and passes; a hook with onlyWhenSkipped applies only
// when that absence is planned.
func artifactFindings(st *graph.State, g *graph.Graph, n *graph.Node, sess *sessions.Session) []string {
	dir := ""
	if sess != nil {
		dir = sess.ArtifactDir()
	}
	var out []string
	for _, h := range n.ExitHooks(graph.HookValidateArtifacts) {
		if h.OnlyWhenSkipped != "" && !plannedAbsence(st, g, h.OnlyWhenSkipped) {
			continue
		}
		if h.OnlyWhenSkipped == "" && plannedAbsence(st, g, h.Artifact) {
			continue
		}
		name, text, err := flow.ReadArtifact(dir, h.Artifact)
		if err != nil {
			alts := strings.Split(h.Artifact, "|")
			for i, a := range alts {
				alts[i] = filepath.ToSlash(filepath.Join(specDirOf(sess), a))
			}
			out = append(out, fmt.Sprintf("%s is not written (validate-artifacts)", strings.Join(alts, " or ")))
			continue
		}
		out = append(out, h.CheckArtifact(name, text)...)
	}
	return out
}

// plannedAbsence reports whether the phase selection skipped a node of g
// that produces artifact (one of its alternatives).
func plannedAbsence(st *graph.State, g *graph.Graph, artifact string) bool {
	want := strings.Split(artifact, "|")
	for _, h := range st.History {
		if !h.Skipped {
			continue
		}
		n := g.Node(h.Node)
		if n == nil || n.Actor != graph.Agent {
			continue
		}
		for _, a := range n.Artifacts() {
			for _, w := range want {
				if a == w {
					return true
				}
			}
		}
	}
	return false
}

// verifyTests is one verify-tests hook of n: the graph's command, else the
// repository's; none at all passes (there is nothing bound to run, as in
// the original). The first ask starts the run and answers running; an ask
// after it finished collects its verdict.
func (gs *gates) verifyTests(ctx context.Context, ref string, st *graph.State, n *graph.Node, h graph.Hook, sess *sessions.Session) completeVerdict {
	argv := h.Command
	if len(argv) == 0 {
		cwd := ""
		if sess != nil {
			cwd = sess.Cwd
		}
		repo, err := repoinfo.TestCommand(cwd)
		switch {
		case errors.Is(err, repoinfo.ErrNoWorkspace):
			return completeVerdict{findings: []string{"verify-tests: the session's checkout cannot be read"}}
		case err != nil:
			return completeVerdict{findings: []string{"verify-tests: " + err.Error()}}
		}
		argv = repo
	}
	if len(argv) == 0 {
		return completeVerdict{}
	}
	if gs.tests == nil {
		return completeVerdict{findings: []string{"verify-tests: this dispatcher cannot run tests"}}
	}
	timeout := defaultTestTimeout
	if h.TimeoutSeconds > 0 {
		timeout = time.Duration(h.TimeoutSeconds) * time.Second
	}
	visit := graphstate.Attempt(st, n.Name)
	cmd := strings.Join(argv, " ")
	gs.runs.mu.Lock()
	defer gs.runs.mu.Unlock()
	if gs.runs.runs == nil {
		gs.runs.runs = map[string]*testRun{}
	}
	if r := gs.runs.runs[ref]; r != nil && r.node == n.Name && r.visit == visit && strings.Join(r.argv, " ") == cmd {
		select {
		case <-r.done:
			delete(gs.runs.runs, ref)
			if r.failure == "" {
				return completeVerdict{}
			}
			return completeVerdict{findings: []string{r.failure}, detail: r.output}
		default:
			return completeVerdict{running: fmt.Sprintf("the tests (%s) are running; the node completes when they pass", cmd)}
		}
	}
	r := &testRun{node: n.Name, visit: visit, argv: argv, done: make(chan struct{})}
	gs.runs.runs[ref] = r
	base := gs.runCtx
	if base == nil {
		base = context.Background()
	}
	go func() {
		defer close(r.done)
		rctx, cancel := context.WithTimeout(base, timeout)
		defer cancel()
		start := time.Now()
		out, err := gs.tests(rctx, sess, argv, timeout)
		switch {
		case errors.Is(rctx.Err(), context.DeadlineExceeded):
			r.failure = fmt.Sprintf("verify-tests: `%s` did not finish within %s", cmd, timeout)
		case err != nil:
			r.failure = fmt.Sprintf("verify-tests: `%s` failed: %v", cmd, err)
		}
		r.output = tail(out, maxTestOutput)
		gs.events.Emit(base, "graph.tests", slog.String("work_item", ref), slog.String("node", n.Name),
			slog.Bool("passed", r.failure == ""), slog.Duration("took", time.Since(start)))
	}()
	return completeVerdict{running: fmt.Sprintf("the tests (%s) started; the node completes when they pass", cmd)}
}

// tail is the last max bytes of s, cut at a line.
func tail(s string, max int) string {
	if len(s) <= max {
		return s
	}
	s = s[len(s)-max:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "…\n" + s
}

// maxReason bounds the state's reason: it is a summary, not a report.
const maxReason = 600

// hold keeps ref at node with why it is not done as the state's reason, so
// that `the-loop check` and the graph context say it. Best effort: the
// session was told in its answer already.
func (gs *gates) hold(ctx context.Context, ref, node string, findings []string) {
	store, err := gs.open(ctx)
	if err != nil {
		return
	}
	reason := "not done: " + strings.Join(findings, "; ")
	if len(reason) > maxReason {
		reason = strings.ToValidUTF8(reason[:maxReason], "") + "…"
	}
	if _, err := store.Mutate(ctx, ref, func(cur *graph.State) (*graph.State, error) {
		if cur == nil || cur.Current != node || cur.Reason == reason {
			return nil, graphstate.ErrNoChange
		}
		cur.Reason = reason
		cur.Version++
		return cur, nil
	}); err != nil && !errors.Is(err, graphstate.ErrNoChange) {
		gs.log.Warn("dispatcher: why a node stays open was not recorded", "work_item", ref, "node", node, "err", err)
	}
}
