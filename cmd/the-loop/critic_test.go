package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// criticEndpoint stands where the dispatcher's session endpoint is: it
// keeps the body of each critic run it is sent and answers with round
// (or status and an error, when status is set).
type criticEndpoint struct {
	*httptest.Server
	mu     sync.Mutex
	bodies []map[string]any
	round  sessionapi.CriticRound
	status int
}

func newCriticEndpoint(t *testing.T) *criticEndpoint {
	t.Helper()
	e := &criticEndpoint{}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if req.Header.Get("Authorization") != "Bearer "+testSessionToken {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		switch {
		case req.Method == http.MethodGet && req.URL.Path == sessionapi.PathCritics:
			_ = json.NewEncoder(w).Encode(sessionapi.Critics{Ref: "github:o/r#1", Critics: []sessionapi.Critic{
				{Name: "cursor-gpt", Harness: "cursor", Model: "gpt-5.5", Command: "cursor-agent", Available: true, Enabled: true, Timeout: sessionapi.Duration(15 * 60e9)}}})
		case req.Method == http.MethodPost && req.URL.Path == sessionapi.PathCriticRun:
			b, _ := io.ReadAll(req.Body)
			var m map[string]any
			_ = json.Unmarshal(b, &m)
			e.bodies = append(e.bodies, m)
			if e.status != 0 {
				w.WriteHeader(e.status)
				_ = json.NewEncoder(w).Encode(map[string]string{"error": "no critic named \"nope\" in the operator's routing.critics"})
				return
			}
			_ = json.NewEncoder(w).Encode(e.round)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *criticEndpoint) env() config.Env {
	return config.Env{"LOOP_SESSION_URL": e.URL, "LOOP_SESSION_TOKEN": testSessionToken}
}

// TestCriticVerbs: `critic run` sends the critic's name, the node, the
// brief and the wait, and nothing that could become a command; it prints
// the round and exits 0 when it succeeded or goes on, 1 when it failed,
// 2 when it could not be asked for. `critic list` prints the critics.
func TestCriticVerbs(t *testing.T) {
	e := newCriticEndpoint(t)
	brief := filepath.Join(t.TempDir(), "brief.md")
	if err := os.WriteFile(brief, []byte("Look at the retry policy."), 0o644); err != nil {
		t.Fatal(err)
	}

	e.round = sessionapi.CriticRound{ID: "loop:critic:1", Ref: "github:o/r#1", Critic: "cursor-gpt", Node: "design", Artifact: "docs/specs/issue-1/design.md",
		Outcome: sessionapi.CriticOK, Findings: "1. The retry is unbounded.", URL: "https://github.com/o/r/issues/1#issuecomment-9"}
	code, out, stderr := runVerb(t, e.env(), "critic", "run", "cursor-gpt", "--node", "design", "--brief-file", brief, "--wait", "5m")
	if code != 0 || !strings.Contains(out, "critic cursor-gpt on docs/specs/issue-1/design.md: ok") || !strings.Contains(out, "1. The retry is unbounded.") ||
		!strings.Contains(out, "recorded: https://github.com/o/r/issues/1#issuecomment-9") {
		t.Errorf("run: exit %d\n%s%s", code, out, stderr)
	}
	want := map[string]any{"critic": "cursor-gpt", "node": "design", "brief": "Look at the retry policy.", "wait": "5m0s"}
	if got := e.bodies[len(e.bodies)-1]; len(got) != len(want) || got["critic"] != want["critic"] || got["node"] != want["node"] ||
		got["brief"] != want["brief"] || got["wait"] != want["wait"] {
		t.Errorf("the request = %v, want %v", got, want)
	}

	e.round = sessionapi.CriticRound{ID: "loop:critic:2", Critic: "cursor-gpt", Running: true, Ref: "github:o/r#1"}
	if code, out, _ := runVerb(t, e.env(), "critic", "run", "cursor-gpt"); code != 0 || !strings.Contains(out, "stop and wait") {
		t.Errorf("a running round: exit %d\n%s", code, out)
	}

	e.round = sessionapi.CriticRound{Critic: "cursor-gpt", Outcome: sessionapi.CriticTimedOut, Error: "no answer within its timeout of 15m0s", Findings: "1. half"}
	if code, out, stderr := runVerb(t, e.env(), "critic", "run", "cursor-gpt", "--wait", "1s"); code != 1 || !strings.Contains(out, "why: no answer within") ||
		!strings.Contains(out, "1. half") || !strings.Contains(stderr, "timed out") {
		t.Errorf("a timed-out round: exit %d\n%s%s", code, out, stderr)
	}

	e.status = http.StatusNotFound
	if code, _, stderr := runVerb(t, e.env(), "critic", "run", "nope"); code != 2 || !strings.Contains(stderr, `no critic named "nope"`) {
		t.Errorf("an unknown critic: exit %d %s", code, stderr)
	}
	if code, _, stderr := runVerb(t, config.Env{}, "critic", "run", "cursor-gpt"); code != 2 || !strings.Contains(stderr, "inside an agent session") {
		t.Errorf("outside a session: exit %d %s", code, stderr)
	}
	for _, args := range [][]string{{"critic"}, {"critic", "run"}, {"critic", "run", "a", "b"}, {"critic", "bogus"},
		{"critic", "run", "a", "--brief", "x", "--brief-file", brief}} {
		if code, _, _ := runVerb(t, e.env(), args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}

	code, out, stderr = runVerb(t, e.env(), "critic", "list")
	if code != 0 || !strings.Contains(out, "cursor-gpt") || !strings.Contains(out, "cursor-agent") || !strings.Contains(out, "15m0s") {
		t.Errorf("list: exit %d\n%s%s", code, out, stderr)
	}
}
