package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
)

// TestGraphOverrideRefusedInSession: in an agent session's environment the
// escape hatch's verbs refuse at once, saying why, whatever the arguments.
func TestGraphOverrideRefusedInSession(t *testing.T) {
	for _, env := range []config.Env{
		{"LOOP_SESSION_URL": "http://127.0.0.1:1", "LOOP_SESSION_TOKEN": "lst_x"},
		{"LOOP_SESSION_TOKEN": "lst_x"},
	} {
		for _, args := range [][]string{
			{"advance", "github:octo/repo#15", "--to", "design", "--reason", "x"},
			{"skip", "github:octo/repo#15", "--reason", "x"},
			{"force", "github:octo/repo#15", "--to", "complete", "--reason", "x"},
			{"skip"},
		} {
			code, out, stderr := runVerb(t, env, append([]string{"graph"}, args...)...)
			if code != 1 || out != "" || !strings.Contains(stderr, "an agent session may not move its graph by hand") {
				t.Errorf("graph %v in a session: exit %d, stdout %q, stderr %q", args, code, out, stderr)
			}
		}
	}
}

// TestSessionEscalateIsTheSessions: in a session, escalate is the session's
// own verb (the session endpoint's), not the operator's hatch: it needs a
// reason, takes no --as, and names no other work item.
func TestSessionEscalateIsTheSessions(t *testing.T) {
	env := config.Env{"LOOP_SESSION_URL": "http://127.0.0.1:1", "LOOP_SESSION_TOKEN": "lst_x"}
	for _, args := range [][]string{
		{"escalate"},
		{"escalate", "--reason", "  "},
		{"escalate", "--reason", "x", "--as", "alice"},
		{"escalate", "github:octo/other#1", "--reason", "x"},
	} {
		code, _, stderr := runVerb(t, env, append([]string{"graph"}, args...)...)
		if code != 2 || strings.Contains(stderr, "may not move its graph by hand") {
			t.Errorf("graph %v in a session: exit %d, want a usage error: %s", args, code, stderr)
		}
	}
}

// TestGraphOverrideUsage: the reason is required, and --to exactly where
// the verb moves to a named node.
func TestGraphOverrideUsage(t *testing.T) {
	for _, args := range [][]string{
		{"skip", "github:octo/repo#15"},
		{"escalate", "github:octo/repo#15", "--reason", "  "},
		{"advance", "github:octo/repo#15", "--reason", "x"},
		{"force", "github:octo/repo#15", "--reason", "x"},
		{"skip", "github:octo/repo#15", "--to", "design", "--reason", "x"},
		{"skip", "octo/repo#15", "--reason", "x"},
	} {
		if code, _, stderr := runVerb(t, config.Env{}, append([]string{"graph"}, args...)...); code != 2 {
			t.Errorf("graph %v: exit %d, want a usage error: %s", args, code, stderr)
		}
	}
}

// TestGraphOverridePublishes runs `serve dispatcher` (its endpoint answers
// without tmux) and asks for the operator's moves: a skip of the agent node
// goes on the inbox as a graph.override naming the operator, and moves the
// graph refuses — no edge, a human gate, an unknown person — are refused
// before anything is published.
func TestGraphOverridePublishes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server and the dispatcher")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bus.DefaultTopology())
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("version: \"0.7.0\"\nrouting:\n  authorizedUsers:\n    - {github: alice, slack: U1, name: Alice}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env, stop := serveDispatcher(t, srv.URL(), cfgPath, "override-test")

	const ref = "github:octo/repo#15"
	g, _ := graph.Builtin(graph.WorkItemGraph)
	conn := srv.Connect(t, "override-test")
	store, err := graphstate.Open(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Mutate(context.Background(), ref, func(*graph.State) (*graph.State, error) {
		st, _, err := graph.New(g, ref, time.Now().UTC())
		if err == nil {
			_, err = st.Advance(g, graph.OutcomeExecute, time.Now().UTC())
		}
		return st, err
	}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, time.Minute, "the dispatcher's endpoint", func() bool {
		_, _, stderr := runVerb(t, env, "graph", "status", ref)
		return !strings.Contains(stderr, "no dispatcher answered")
	})

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"advance", ref, "--to", "review", "--reason", "x"}, `node "requirements" has no edge to "review"`},
		{[]string{"force", ref, "--to", "nowhere", "--reason", "x"}, `graph "work-item" has no node "nowhere"`},
		{[]string{"skip", ref, "--reason", "x", "--as", "mallory"}, "--as mallory: not in routing.authorizedUsers"},
	} {
		code, stdout, stderr := runVerb(t, env, append([]string{"graph"}, c.args...)...)
		if code != 1 || stdout != "" || !strings.Contains(stderr, c.want) {
			t.Errorf("graph %v: exit %d, stdout %q, stderr %q; want it refused with %q", c.args, code, stdout, stderr, c.want)
		}
	}
	if n := inboxCount(t, conn); n != 0 {
		t.Fatalf("%d messages on the inbox after refused moves", n)
	}

	code, stdout, stderr := runVerb(t, env, "graph", "skip", ref, "--reason", "the requirements are in the issue", "--as", "alice", "--wait", "0")
	if code != 0 || !strings.Contains(stdout, "requested skip of "+ref+" from requirements to requirements-approval as the operator (alice)") {
		t.Fatalf("graph skip: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	recent, err := conn.RecentMessages(context.Background(), bus.StreamInbox, 5)
	if err != nil || len(recent) != 1 {
		t.Fatalf("inbox after the skip: %+v, %v", recent, err)
	}
	m := recent[0]
	if m.Type != string(catalog.GraphOverride) || !strings.HasSuffix(m.Subject, "."+catalog.SubjectKey(ref)+".graph.override") ||
		!strings.Contains(stdout, m.ID) {
		t.Errorf("the skip on the inbox: %+v", m)
	}

	// Once the dispatcher applied it (here by hand: this dispatcher has
	// no tmux, so it consumes nothing), `graph status` shows who and why.
	if _, err := store.Mutate(context.Background(), ref, func(cur *graph.State) (*graph.State, error) {
		_, err := cur.Override(g, graph.OverrideRequest{Action: graph.ActionSkip, From: "requirements", By: "alice",
			Reason: "the requirements are in the issue", EventID: m.ID, At: time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)})
		return cur, err
	}); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runVerb(t, env, "graph", "status", ref)
	if want := "overrides:\n  2026-03-01T09:00:00Z  skip requirements → requirements-approval by the operator (alice): the requirements are in the issue\n"; code != 0 || !strings.Contains(stdout, want) {
		t.Errorf("graph status after the skip: exit %d, stderr %q, stdout:\n%s\nwant it to hold:\n%s", code, stderr, stdout, want)
	}

	stop()
}

func inboxCount(t *testing.T, conn *bus.Conn) int {
	t.Helper()
	recent, err := conn.RecentMessages(context.Background(), bus.StreamInbox, 10)
	if err != nil {
		t.Fatal(err)
	}
	return len(recent)
}
