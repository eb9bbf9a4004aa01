package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// TestPRLoopForTheOriginalsWorkItem: beside the original's work-item loop,
// a pull request's own session follows the original's pull-request loop
// (docs/decisions/112-the-originals-graphs.md): its agent steps complete as
// their hooks pass (self-review keeps its node open until execution-log.md
// has its section, the reason told), and its security review raises the
// security sign-off, a human gate the session can neither complete nor
// escalate.
func TestPRLoopForTheOriginalsWorkItem(t *testing.T) {
	e := newEnv(t, func(s *Settings) { s.SessionPerPR = true })
	cfg := *e.cfg.Load()
	cfg.Graphs.WorkItem = graph.PDLCWorkItemGraph
	e.cfg.Store(&cfg)
	box := e.inbox()
	const issue, pr = "github:octo/repo#91", "github:octo/repo#92"
	e.start(issue, 9900)
	if st := e.waitNode(issue, "phase-selection"); st.Graph != graph.PDLCWorkItemGraph {
		t.Fatalf("the work item's graph = %s", st.Graph)
	}
	e.publish(prCopies(issue, pr, "pr-open-1", "pull_request", "opened", prPayload(92, "the-loop/issue-91"))...)
	e.waitRecord("session.spawned", map[string]any{"work_item": pr})
	if st := e.waitNode(pr, "implementation"); st.Graph != graph.PDLCPRGraph {
		t.Fatalf("the pull request's graph = %s, want %s", st.Graph, graph.PDLCPRGraph)
	}
	sess := e.record(pr).Session
	c := e.agent(sess.HarnessSessionID, 0)
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	for _, n := range []string{"implementation", "verification"} {
		if err := c.Complete(ctx, pr, nil); err != nil {
			t.Fatalf("complete %s: %v", n, err)
		}
	}
	e.waitNode(pr, "self-review")
	v, err := c.Graph(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range v.Nodes {
		if n.Current && (n.Name != "self-review" || len(n.Checks) != 1 || !strings.Contains(n.Checks[0], "execution-log.md has front matter status; Review cycles")) {
			t.Errorf("graph show's current node = %+v", n)
		}
	}
	err = c.Complete(ctx, pr, nil)
	var se *sessionapi.Error
	if !errors.As(err, &se) || se.Status != http.StatusConflict || !strings.Contains(se.Message, "execution-log.md is not written") {
		t.Fatalf("self-review without its log: %v", err)
	}
	if err := os.MkdirAll(sess.SpecDir, 0o755); err != nil {
		t.Fatal(err)
	}
	log := "---\nstatus: in-progress\n---\n# Review cycles\n\nOne.\n\n# Security review (gate)\n\nClean.\n\n# Pull requests\n\n- #92\n"
	if err := os.WriteFile(filepath.Join(sess.SpecDir, "execution-log.md"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"self-review", "critic-review", "security-review"} {
		e.waitNode(pr, n)
		if err := c.Complete(ctx, pr, nil); err != nil {
			t.Fatalf("complete %s: %v", n, err)
		}
	}
	e.waitNode(pr, "security-sign-off")
	e.waitNotification(box, pr, "security-sign-off", 1, catalog.SecuritySignOffPending)
	if err := c.Complete(ctx, pr, nil); !errors.As(err, &se) || se.Status != http.StatusConflict {
		t.Errorf("the session completed the security sign-off: %v", err)
	}
	if err := c.Escalate(ctx, pr, "let me past", nil); !errors.As(err, &se) || se.Status != http.StatusConflict {
		t.Errorf("the session escalated the security sign-off: %v", err)
	}
	if st := e.graphState(pr); st.Current != "security-sign-off" {
		t.Errorf("the session moved the human gate to %s", st.Current)
	}
}
