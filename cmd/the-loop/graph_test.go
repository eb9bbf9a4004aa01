package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/services/dispatcher"
)

// TestGraphVerbWithoutDispatcher: with NATS up but no dispatcher, the verb
// says so at once instead of timing out.
func TestGraphVerbWithoutDispatcher(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	env := config.Env{"LOOP_NATS_URL": srv.URL()}
	for verb, subject := range map[string]string{"status": dispatcher.SubjectGraphStatus, "complete": dispatcher.SubjectGraphComplete} {
		code, out, stderr := runVerb(t, env, "graph", verb, "github:octo/repo#15")
		if code != 1 || out != "" || !strings.Contains(stderr, "no dispatcher answered on "+subject+" — is the dispatcher running?") {
			t.Errorf("graph %s without a dispatcher: exit %d, stdout %q, stderr %q", verb, code, out, stderr)
		}
	}
	if code, _, stderr := runVerb(t, env, "graph", "status", "octo/repo#15"); code != 2 || !strings.Contains(stderr, "not a ref like") {
		t.Errorf("a malformed ref: exit %d %s", code, stderr)
	}
}

// releaseGraph is an operator graph the config names; the dispatcher judges
// the work item by it.
var releaseGraph = testkit.ReadRepoFile("docs/examples/release-graph.yaml")

// TestGraphVerbAsksTheDispatcher runs `serve dispatcher` (without tmux: the
// endpoint answers whether or not sessions can run) with an operator graph
// in its config, and drives a work item on that graph through the verb.
func TestGraphVerbAsksTheDispatcher(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server and the dispatcher")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bus.DefaultTopology())
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "release.yaml"), []byte(releaseGraph), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte("version: 0.7.0\ngraphs:\n  files: [release.yaml]\n  workItem: release\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env, stop := serveDispatcher(t, srv.URL(), cfgPath, "graph-test") // provisioned and serving

	// The work item's state, as the dispatcher writes it when a session
	// spawns on the release graph.
	const ref = "github:octo/repo#15"
	cfg, _, err := config.LoadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := cfg.Graphs.Registry().Get("release")
	conn := srv.Connect(t, "graph-test")
	store, err := graphstate.Open(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Mutate(context.Background(), ref, func(*graph.State) (*graph.State, error) {
		st, _, err := graph.New(g, ref, time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
		return st, err
	}); err != nil {
		t.Fatal(err)
	}

	var code int
	var stdout, stderr string
	testkit.WaitWithin(t, time.Minute, "the dispatcher's endpoint", func() bool {
		code, stdout, stderr = runVerb(t, env, "graph", "status", ref)
		return !strings.Contains(stderr, "no dispatcher answered")
	})
	if code != 0 {
		t.Fatalf("graph status: exit %d: %s", code, stderr)
	}
	for _, want := range []string{
		"work item:  github:octo/repo#15 (https://github.com/octo/repo/issues/15)",
		"graph:      release (revision ", "node:       build (phase: build)", "status:     active", "human gate: false",
		"2026-03-01T09:00:00Z  build",
	} {
		if !strings.Contains(stdout, want) {
			t.Errorf("graph status does not show %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = runVerb(t, env, "graph", "complete", ref)
	if code != 0 || stdout != ref+": build done; now at sign-off (waiting)\n" {
		t.Fatalf("graph complete: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	code, stdout, stderr = runVerb(t, env, "graph", "status", "--json", ref)
	var st graph.State
	if code != 0 || json.Unmarshal([]byte(stdout), &st) != nil || st.Current != "sign-off" || st.Graph != "release" || st.Ref != ref {
		t.Fatalf("graph status --json: exit %d, %s %s", code, stdout, stderr)
	}
	if code, _, stderr := runVerb(t, env, "graph", "status", ref); code != 0 {
		t.Errorf("graph status at the gate: %d %s", code, stderr)
	}
	code, _, stderr = runVerb(t, env, "graph", "complete", ref)
	if code != 1 || !strings.Contains(stderr, "is at the human gate sign-off: only an authorized person's comment decides it") {
		t.Errorf("graph complete at a human gate: exit %d %s", code, stderr)
	}
	code, _, stderr = runVerb(t, env, "graph", "status", "github:octo/repo#16")
	if code != 1 || !strings.Contains(stderr, "github:octo/repo#16 has no graph state") {
		t.Errorf("graph status of a work item without a graph: exit %d %s", code, stderr)
	}

	stop()
	if code, _, stderr := runVerb(t, env, "graph", "status", ref); code != 1 || !strings.Contains(stderr, "no dispatcher answered") {
		t.Errorf("after the dispatcher stopped: exit %d %s", code, stderr)
	}
}

// serveDispatcher runs `serve dispatcher` on the bus at natsURL with the
// operator config at cfgPath and no tmux (its endpoint answers whether or
// not sessions can run), as host, until it serves. It returns the
// environment the verbs reach it with, and stop, which stops it and fails
// the test unless it exits 0 within a minute.
func serveDispatcher(t *testing.T, natsURL, cfgPath, host string) (config.Env, func()) {
	t.Helper()
	env := config.Env{
		"LOOP_NATS_URL":        natsURL,
		"LOOP_ADMIN_ADDR":      "127.0.0.1:0",
		"LOOP_CONFIG":          cfgPath,
		"LOOP_TMUX_BINARY":     filepath.Join(t.TempDir(), "no-tmux-here"),
		"LOOP_DISPATCHER_HOST": host,
	}
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "dispatcher"}, env, &out, &errb) }()
	t.Cleanup(cancel)
	adminURL(t, &out)
	return env, func() {
		t.Helper()
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Fatalf("serve exited %d: %s", code, errb.String())
			}
		case <-time.After(time.Minute):
			t.Fatal("serve did not stop")
		}
	}
}
