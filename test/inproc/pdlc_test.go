package inproc

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// The original's work-item loop (docs/decisions/112-the-originals-graphs.md,
// 113-node-hooks.md, 114-phase-selection-checklist.md), walked end to end
// through every service against the GitHub and Slack fakes.

// pdlcWorld is a world whose work items follow the original's loop, with
// the security sign-off subscribed in the Slack channel.
func pdlcWorld(t *testing.T) *world {
	return newWorld(t, func(c *config.Config) {
		c.Graphs.WorkItem = graph.PDLCWorkItemGraph
		c.Channels.Slack.Subscribe = append(c.Channels.Slack.Subscribe, catalog.SecuritySignOffPending)
	})
}

// checkout is where work item r's session works: its repository checkout.
func (w *world) checkout(r string) string {
	w.t.Helper()
	store, err := sessions.Open(context.Background(), w.conn)
	if err != nil {
		w.t.Fatal(err)
	}
	rec, _, err := store.Get(context.Background(), r)
	if err != nil || rec.Session == nil || rec.Session.Cwd == "" {
		w.t.Fatalf("%s has no session with a checkout (%v)", r, err)
	}
	return rec.Session.Cwd
}

// completeRefused is the agent's `the-loop graph complete` when the node's
// checks keep it open: the refusal's message.
func (w *world) completeRefused(r string) string {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	err := w.agentSession(r).Complete(ctx, r, nil)
	var e *sessionapi.Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict {
		w.t.Fatalf("graph complete %s: %v, want the node kept open (409)", r, err)
	}
	return e.Message
}

const (
	brainstormDoc = "---\nstatus: approved\n---\n# Problem / opportunity\n\nWidgets are slow.\n\n# Open questions\n\nHow slow?\n"
	designDoc     = "---\nstatus: approved\n---\n# Architecture\n\nA cache.\n\n# Security design\n\nNo new inputs.\n\n# Testing strategy\n\nUnit tests.\n"
	planDoc       = "---\nstatus: approved\n---\n# Test matrix\n\n- [x] the cache hits\n\n# Verification environment\n\nCI.\n\n" +
		"# Evidence plan\n\nThe test log.\n\n# Verification results\n\nAll green.\n"
	logDoc = "---\nstatus: in-progress\n---\n# Design critic review\n\nOne round, no findings.\n\n# Review cycles\n\nTwo rounds.\n\n" +
		"# Security review (gate)\n\nNo findings.\n\n# Final validation evidence\n\nThe CI run.\n\n# Capability docs\n\nUpdated.\n\n" +
		"# Documentation\n\nUpdated.\n\n# Pull requests\n\n- #1\n"
	pdlcRequirements = "---\nstatus: approved\n---\n# Requirements\n\nThe widget SHALL be fast.\n\n# Security considerations\n\nNone new.\n"
)

// TestOriginalWorkItemLoopEndToEnd: a work item runs the whole work-item
// loop. The phase selection's ping carries the checklist, and the execute
// comment's ticks are what runs (the opt-in critic review of the design
// ticked on); an invalid artifact keeps its node open with the reason told
// to the session and shown by `the-loop check`; a failing test command
// blocks implementation until it passes; the critic review's round of the
// operator's critic is recorded on the work item and its findings typed
// into the session; the security review raises security-sign-off-pending,
// rendered in Slack, and a person's approval passes it; the operator skips
// capability-docs with a reason, recorded on GitHub first; the one
// loop:<phase> label follows the phases; the work item completes. (The
// pull request's own loop: TestPRLoopForTheOriginalsWorkItem.)
func TestOriginalWorkItemLoopEndToEnd(t *testing.T) {
	reviewer := critic(t, t.TempDir(), "reviewer", `echo "1. e2e-critic-finding: the cache is never invalidated."
`)
	w := newWorld(t, func(c *config.Config) {
		c.Graphs.WorkItem = graph.PDLCWorkItemGraph
		c.Channels.Slack.Subscribe = append(c.Channels.Slack.Subscribe, catalog.SecuritySignOffPending)
		c.Routing.Critics = []config.Critic{{Name: "reviewer", Command: reviewer, Args: []string{"{prompt}"}, Timeout: wait, Enabled: true}}
	})
	g, _ := graph.Builtin(graph.PDLCWorkItemGraph)
	var number int
	// labelled waits for the one loop:<phase> label to be node's
	// phase: the label follows the work item as it moves.
	labelled := func(node string) {
		t.Helper()
		want := "loop:" + g.Node(node).Phase
		testkit.WaitWithin(t, wait, "the label "+want, func() bool {
			var loops []string
			for _, l := range w.labels(number) {
				if strings.HasPrefix(l, "loop:") {
					loops = append(loops, l)
				}
			}
			return len(loops) == 1 && loops[0] == want
		})
	}
	number, r := w.start("The full loop")
	labelled("phase-selection")
	root := w.thread(r)
	w.waitSlack("", string(catalog.DecisionPending), "- [x] brainstorming", "- [ ] design-critic-review")

	w.comment(number, alice, "- [x] design-critic-review\n\nthe-loop execute")
	w.waitNode(r, "brainstorming")
	if st := w.state(r); len(st.Skips) != 0 {
		t.Fatalf("skips = %v, want none (the opt-in phase was ticked)", st.Skips)
	}

	// An invalid artifact keeps its node open, the reason told.
	w.writeArtifact(r, "brainstorm.md", "# Problem / opportunity\n\nWidgets are slow.\n")
	msg := w.completeRefused(r)
	for _, want := range []string{"brainstorm.md", "front matter has no status", `"Open questions" is missing`} {
		if !strings.Contains(msg, want) {
			t.Errorf("the refusal does not say %q: %s", want, msg)
		}
	}
	w.waitLog("graph.held", map[string]any{"work_item": r, "node": "brainstorming"})
	if st := w.state(r); st.Current != "brainstorming" || !strings.Contains(st.Reason, "Open questions") {
		t.Errorf("after the refusal: at %s, reason %q", st.Current, st.Reason)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	rep, err := w.agentSession(r).Check(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Status != sessionapi.CheckBlock || !strings.Contains(strings.Join(rep.Messages, "\n"), `"Open questions" is missing`) {
		t.Errorf("check = %s %v, want block naming the missing section", rep.Status, rep.Messages)
	}
	w.writeArtifact(r, "brainstorm.md", brainstormDoc)
	w.complete(r)
	w.waitNode(r, "requirements-definition")

	labelled("requirements-definition")
	w.writeArtifact(r, "requirements.md", pdlcRequirements)
	w.complete(r)
	w.waitNode(r, "requirements-approval")
	w.waitSlack(root, string(catalog.PhaseApprovalPending), "The widget SHALL be fast")
	w.comment(number, alice, "LGTM")
	w.waitNode(r, "design")

	labelled("design")
	w.writeArtifact(r, "design.md", designDoc)
	w.complete(r)
	w.waitNode(r, "design-critic-review")
	w.writeArtifact(r, "execution-log.md", logDoc)
	w.complete(r)
	w.waitNode(r, "test-planning")
	w.writeArtifact(r, "testing-plan.md", planDoc)
	w.complete(r)
	w.waitNode(r, "design-approval")
	w.comment(number, alice, "LGTM, and the matrix looks right")
	w.waitNode(r, "tasks-breakdown")
	// record-feedback: the deciding words travel with both documents.
	for _, name := range []string{"design.md", "testing-plan.md"} {
		if !testkit.Poll(wait, func() bool {
			doc := w.readArtifact(r, name)
			return strings.Contains(doc, "## Feedback at design-approval (approved") && strings.Contains(doc, "> LGTM, and the matrix looks right")
		}) {
			t.Errorf("the design gate's feedback is not in %s:\n%s", name, w.readArtifact(r, name))
		}
	}
	w.writeArtifact(r, "tasks.md", "---\nstatus: approved\n---\n# Task list\n\n- [ ] add the cache\n")
	w.complete(r)
	w.waitNode(r, "implementation")

	// Implementation: an unticked task, then failing tests, keep it open.
	if msg := w.completeRefused(r); !strings.Contains(msg, "unticked") {
		t.Errorf("an unticked task did not keep implementation open: %s", msg)
	}
	w.writeArtifact(r, "tasks.md", "---\nstatus: approved\n---\n# Task list\n\n- [x] add the cache\n")
	co := w.checkout(r)
	if err := os.MkdirAll(filepath.Join(co, ".the-loop"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := "testing:\n  command: [sh, -c, 'echo the cache test failed; test -f tests-pass']\n"
	if err := os.WriteFile(filepath.Join(co, ".the-loop", "harness-config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	msg = w.completeRefused(r)
	if !strings.Contains(msg, "verify-tests") || !strings.Contains(msg, "exit status 1") || !strings.Contains(msg, "the cache test failed") {
		t.Errorf("failing tests: the refusal does not say why: %s", msg)
	}
	if st := w.state(r); st.Current != "implementation" || !strings.Contains(st.Reason, "verify-tests") {
		t.Errorf("failing tests moved the work item or left no reason: at %s, %q", st.Current, st.Reason)
	}
	w.waitLog("graph.tests", map[string]any{"work_item": r, "node": "implementation", "passed": false})
	if err := os.WriteFile(filepath.Join(co, "tests-pass"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.complete(r)
	w.waitNode(r, "verification")
	labelled("verification")
	w.complete(r)
	w.waitNode(r, "self-review")
	w.complete(r)

	// The critic review: a round of the operator's critic, its findings
	// recorded on the work item and typed into the session.
	w.waitNode(r, "critic-review")
	ctx2, cancel2 := context.WithTimeout(context.Background(), 2*wait)
	defer cancel2()
	round, err := w.agentSession(r).CriticRun(ctx2, sessionapi.CriticRunRequest{Critic: "reviewer", Node: "implementation", Wait: sessionapi.Duration(wait)})
	if err != nil || round.Outcome != sessionapi.CriticOK || !strings.Contains(round.Findings, "e2e-critic-finding") {
		t.Fatalf("the critic round: %+v (%v)", round, err)
	}
	if c := w.recorded(number, "e2e-critic-finding"); c.HTMLURL != round.URL {
		t.Errorf("the findings' record is %s, the round says %s", c.HTMLURL, round.URL)
	}
	w.typed("critic.findings", "e2e-critic-finding")
	w.complete(r)
	w.waitNode(r, "security-review")
	w.complete(r)

	// The security review raises the sign-off, a human gate.
	w.waitNode(r, "security-sign-off")
	w.waitSlack(root, string(catalog.SecuritySignOffPending))
	w.comment(number, alice, "LGTM, signed off")
	w.waitNode(r, "evidence")
	w.complete(r)

	// The operator skips one node, with the reason, recorded on GitHub
	// before the graph moves.
	w.waitNode(r, "capability-docs")
	skip := dispatcher.OverrideEvent(r, graph.PDLCWorkItemGraph, graph.ActionSkip, "capability-docs", "",
		"No capability changed: the cache is internal.", &loopv1.Actor{Github: alice, Slack: aliceSlack, Name: "Alice"}, time.Now())
	if err := w.override(w.conn, skip); err != nil {
		t.Fatal(err)
	}
	if rec := w.overrideRecord(number, skip.GetId()); !strings.Contains(rec.Body, "No capability changed: the cache is internal.") {
		t.Errorf("the skip's record does not carry its reason:\n%s", rec.Body)
	}
	w.waitNode(r, "reviewer-briefing")
	w.complete(r)
	w.waitNode(r, "human-approval")
	labelled("human-approval")
	w.waitSlack(root, string(catalog.PRReviewPending))
	w.comment(number, alice, "LGTM")
	st := w.waitNode(r, "complete")
	if st.Status != graph.StatusComplete {
		t.Errorf("status = %s", st.Status)
	}
	w.waitSlack(root, string(catalog.WorkItemComplete))
	var walked []string
	for _, h := range st.History {
		if h.Skipped {
			t.Errorf("%s was skipped", h.Node)
		}
		walked = append(walked, h.Node)
	}
	for _, n := range g.Nodes {
		if n.Name != "escalated" && !strings.Contains(" "+strings.Join(walked, " ")+" ", " "+n.Name+" ") {
			t.Errorf("%s was never walked: %v", n.Name, walked)
		}
	}
}

// TestSessionEscalatesItsNode: a session hands its own agent node to a
// person; the work item reaches the escalated end and conflict-escalated,
// carrying the session's reason scrubbed of its token, is rendered in Slack.
// A human gate is not the session's to escalate, and the declared skips
// route the work item around the phases the person unticked.
func TestSessionEscalatesItsNode(t *testing.T) {
	w := pdlcWorld(t)
	number, r := w.start("Escalate")
	root := w.thread(r)
	c := w.agentSession(r)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()

	err := c.Escalate(ctx, r, "stuck at the gate", nil)
	var e *sessionapi.Error
	if !errors.As(err, &e) || e.Status != http.StatusConflict || w.state(r).Current != "phase-selection" {
		t.Fatalf("escalating the phase selection (a human gate): %v, at %s", err, w.state(r).Current)
	}
	if err := c.Escalate(ctx, r, "   ", nil); !errors.As(err, &e) || e.Status != http.StatusBadRequest {
		t.Errorf("an empty reason: %v", err)
	}

	w.comment(number, alice, "- [ ] spec-chain\n- [ ] review-chain\n\nthe-loop execute")
	st := w.waitNode(r, "implementation")
	if len(st.Skips) != 15 {
		t.Errorf("skips = %v, want the spec chain, the review chain and the opt-in critic review", st.Skips)
	}
	if err := c.Escalate(ctx, r, "The API needs a product decision. my token is "+c.Token, nil); err != nil {
		t.Fatal(err)
	}
	st = w.waitNode(r, "escalated")
	if st.Status != graph.StatusEscalated {
		t.Errorf("status = %s", st.Status)
	}
	m := w.waitSlack(root, string(catalog.ConflictEscalated), "by its agent session: The API needs a product decision")
	if text := messageText(m); strings.Contains(text, c.Token) {
		t.Errorf("the session's token reached Slack:\n%s", text)
	}
	testkit.WaitWithin(t, wait, "the escalation logged", func() bool {
		return len(w.loopLog.find("graph.advanced", map[string]any{"work_item": r, "outcome": "escalate", "source": catalog.SourceSession})) > 0
	})
}
