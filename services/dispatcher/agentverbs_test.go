package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/links"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// The agent's verbs on the session endpoint, against a real JetStream, real
// tmux and the stand-in harness: what `the-loop check` (and the Stop hook
// behind it) is told at each kind of node, the graph the session follows,
// the conversation id it registers and the pull requests it links — each on
// its own work item only.

// TestSessionCheck follows one work item through its graph and checks the
// verdict at each node: a human gate is a wait, the agent's open node
// blocks (naming the artifact still to write, then the one written), a
// question asked and not yet answered is a wait, and an answer puts the
// node back in the agent's hands.
func TestSessionCheck(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#81"
	sess := e.start(ref, 9800)
	e.waitNode(ref, "phase-selection")
	agent := e.agent(sess.HarnessSessionID, 0)
	ctx := context.Background()

	check := func(what, status string, says ...string) sessionapi.CheckReport {
		t.Helper()
		rep, err := agent.Check(ctx)
		if err != nil {
			t.Fatalf("%s: check: %v", what, err)
		}
		if rep.Ref != ref || rep.Status != status || rep.Blocking() != (status == sessionapi.CheckBlock) {
			t.Errorf("%s: check = %+v, want status %s", what, rep, status)
		}
		msgs := strings.Join(rep.Messages, "\n")
		for _, s := range says {
			if !strings.Contains(msgs, s) {
				t.Errorf("%s: the messages do not say %q:\n%s", what, s, msgs)
			}
		}
		if n := len(rep.Nodes); n == 0 || rep.Nodes[n-1].Node != rep.CurrentNode || rep.Nodes[n-1].Status != status {
			t.Errorf("%s: the visited nodes %+v do not end at the current one", what, rep.Nodes)
		}
		return rep
	}

	check("at phase selection", sessionapi.CheckWait, "phase-selection", "a person")
	e.publish(comment(ref, 9801, alice, "the-loop execute"))
	e.waitNode(ref, "requirements")
	testkit.WaitFor(t, "the execute comment typed", func() bool { return len(e.inputsOf(sess.HarnessSessionID)) == 1 })
	rep := check("at requirements, nothing written", sessionapi.CheckBlock, "requirements.md or", "bugfix.md", "the-loop graph complete")
	if len(rep.Nodes) != 2 || rep.Nodes[0].Node != "phase-selection" || rep.Nodes[0].Status != sessionapi.CheckOK {
		t.Errorf("visited nodes = %+v, want phase-selection ok then requirements", rep.Nodes)
	}

	// The artifact written where the session keeps them.
	rec := e.record(ref)
	if err := os.MkdirAll(rec.Session.ArtifactDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rec.Session.ArtifactDir(), "bugfix.md"), []byte("# Bugfix\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	check("at requirements, written", sessionapi.CheckBlock, "bugfix.md is written", "the-loop graph complete")

	// A question asked: the session waits on a person until an answer
	// reaches it.
	if _, err := agent.Ask(ctx, "", "Which format?", time.Nanosecond); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, "the question marked as awaiting its answer", func() bool { return e.record(ref).Session.AwaitingInput != "" })
	check("with a question asked", sessionapi.CheckWait, "no answer yet")
	e.publish(comment(ref, 9802, alice, "Markdown, please."))
	testkit.WaitFor(t, "the answer clearing the wait", func() bool { return e.record(ref).Session.AwaitingInput == "" })
	check("answered", sessionapi.CheckBlock, "the-loop graph complete")

	var moved GraphCompleted
	if err := agent.Complete(ctx, "", &moved); err != nil {
		t.Fatal(err)
	}
	check("at the approval gate", sessionapi.CheckWait, "requirements-approval", "never the session")
}

// TestSessionGraphView: the session reads its own graph node by node, with
// where it stands.
func TestSessionGraphView(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#82"
	sess := e.start(ref, 9810)
	e.waitNode(ref, "phase-selection")
	v, err := e.agent(sess.HarnessSessionID, 0).Graph(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if v.Ref != ref || v.Graph != "work-item" || v.CurrentNode != "phase-selection" || v.State == nil {
		t.Errorf("graph view = %+v", v)
	}
	var current []string
	byName := map[string]sessionapi.GraphNode{}
	for _, n := range v.Nodes {
		byName[n.Name] = n
		if n.Current {
			current = append(current, n.Name)
		}
	}
	if !slices.Equal(current, []string{"phase-selection"}) {
		t.Errorf("current nodes %v", current)
	}
	if n := byName["requirements"]; n.Actor != "agent" || n.Artifact != "requirements.md|bugfix.md" || n.On["done"] != "requirements-approval" {
		t.Errorf("requirements = %+v", n)
	}
	if n := byName["review"]; n.Actor != "human" || n.Gate != "feedback" {
		t.Errorf("review = %+v", n)
	}
}

// TestSessionRegister: a harness that picks its own conversation id
// records it, and the registry keeps it for a respawn's resume; an id that
// could not safely stand on a command line is refused.
func TestSessionRegister(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#83"
	sess := e.start(ref, 9820)
	agent := e.agent(sess.HarnessSessionID, 0)
	r, err := agent.Register(context.Background(), "", "chat-1f2e3d")
	if err != nil {
		t.Fatal(err)
	}
	if r.Ref != ref || r.HarnessSessionID != "chat-1f2e3d" || r.Harness == "" {
		t.Errorf("register = %+v", r)
	}
	if got := e.record(ref).Session.HarnessSessionID; got != "chat-1f2e3d" {
		t.Errorf("registry holds %q", got)
	}
	e.waitRecord("session.registered", map[string]any{"work_item": ref, "harness_session_id": "chat-1f2e3d"})
	for _, bad := range []string{"", "-rf", "a b", "x;rm -rf /", strings.Repeat("a", 200)} {
		_, err := agent.Register(context.Background(), "", bad)
		var refused *sessionapi.Error
		if !errors.As(err, &refused) || refused.Status != http.StatusBadRequest {
			t.Errorf("register %q: %v, want 400", bad, err)
		}
	}
	if got := e.record(ref).Session.HarnessSessionID; got != "chat-1f2e3d" {
		t.Errorf("a refused id changed the registry: %q", got)
	}
}

// TestSessionLinkPR: a linked pull request is written where ingress-github
// routes by and on the work item's record, once; a link to the work item
// itself, or a malformed one, is refused.
func TestSessionLinkPR(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#84"
	sess := e.start(ref, 9830)
	agent := e.agent(sess.HarnessSessionID, 0)
	ctx := context.Background()
	l, err := agent.LinkPR(ctx, "", "#90")
	if err != nil {
		t.Fatal(err)
	}
	if l.Ref != ref || l.PullRequest != "github:octo/repo#90" || l.Already {
		t.Errorf("link = %+v", l)
	}
	if l, err = agent.LinkPR(ctx, ref, "github:octo/other#7"); err != nil || l.PullRequest != "github:octo/other#7" {
		t.Errorf("link in another repository = %+v, %v", l, err)
	}
	if l, err = agent.LinkPR(ctx, "", "90"); err != nil || !l.Already {
		t.Errorf("the same link again = %+v, %v; want already", l, err)
	}
	ls, err := links.Open(ctx, e.pub)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range []string{"github:octo/repo#90", "github:octo/other#7"} {
		if items, err := ls.WorkItems(ctx, pr); err != nil || !slices.Equal(items, []string{ref}) {
			t.Errorf("%s delivers %v, %v; want [%s]", pr, items, err, ref)
		}
	}
	if got := e.record(ref).PullRequests; !slices.Equal(got, []string{"github:octo/repo#90", "github:octo/other#7"}) {
		t.Errorf("the work item's record lists %v", got)
	}
	for _, bad := range []string{"#84", "github:octo/repo#84", "0", "pull 90", "https://evil.example/x", ""} {
		_, err := agent.LinkPR(ctx, "", bad)
		var refused *sessionapi.Error
		if !errors.As(err, &refused) || refused.Status != http.StatusBadRequest {
			t.Errorf("link %q: %v, want 400", bad, err)
		}
	}
}

// TestAgentVerbsOwnWorkItemOnly: every verb refuses a request without a
// session token, and a session naming another work item than its own.
func TestAgentVerbsOwnWorkItemOnly(t *testing.T) {
	e := newEnv(t, nil)
	const refA, refB = "github:octo/repo#85", "github:octo/repo#86"
	a := e.agent(e.start(refA, 9840).HarnessSessionID, 0)
	e.start(refB, 9850)
	e.waitNode(refB, "phase-selection")
	type verb struct {
		method, path string
		body         func(ref string) []byte
	}
	verbs := []verb{
		{http.MethodGet, sessionapi.PathCheck, nil},
		{http.MethodGet, sessionapi.PathGraph, nil},
		{http.MethodGet, sessionapi.PathInstructions, nil},
		{http.MethodGet, sessionapi.PathScenarios, nil},
		{http.MethodPost, sessionapi.PathRegister, func(ref string) []byte {
			return mustJSON(t, sessionapi.RegisterRequest{Ref: ref, HarnessSessionID: "abc"})
		}},
		{http.MethodPost, sessionapi.PathLinkPR, func(ref string) []byte {
			return mustJSON(t, sessionapi.LinkPRRequest{Ref: ref, PullRequest: "99"})
		}},
	}
	for _, v := range verbs {
		path, body := v.path, []byte(nil)
		if v.body != nil {
			body = v.body("")
		}
		e.wantRefused(v.path+" without a token", http.StatusUnauthorized, refusedNoToken, "", v.path,
			func() (int, []byte) { return e.call(a.URL, v.method, path, "", body) })
		if v.body != nil {
			body = v.body(refB)
		} else {
			path += "?ref=" + strings.ReplaceAll(refB, "#", "%23")
		}
		e.wantRefused(v.path+" on another work item", http.StatusForbidden, refusedOtherItem, refA, v.path,
			func() (int, []byte) { return e.call(a.URL, v.method, path, bearer(a.Token), body) })
	}
	// Nothing of B's changed: no link, no registered id.
	if rec := e.record(refB); rec.Session.HarnessSessionID == "abc" || len(rec.PullRequests) != 0 {
		t.Errorf("B's record changed: %+v", rec)
	}
	kv, err := e.pub.KV(context.Background(), bus.BucketLinks)
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := kv.Keys(context.Background()); len(keys) != 0 {
		t.Errorf("links written: %v", keys)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
