package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// checkEndpoint is a session endpoint that answers PathCheck with the
// report it holds, as the dispatcher's does: the session's token as a
// Bearer token, 401 without it.
type checkEndpoint struct {
	*httptest.Server
	token string

	mu     sync.Mutex
	report sessionapi.CheckReport
	calls  int
}

const testSessionToken = "lst1.Z2l0aHViOm8vciMx.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"

func newCheckEndpoint(t *testing.T, r sessionapi.CheckReport) *checkEndpoint {
	t.Helper()
	e := &checkEndpoint{token: testSessionToken, report: r}
	e.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if req.Header.Get("Authorization") != "Bearer "+e.token {
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "a session token is required (LOOP_SESSION_TOKEN)"})
			return
		}
		if req.Method != http.MethodGet || req.URL.Path != sessionapi.PathCheck {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(map[string]string{"error": "not found"})
			return
		}
		e.mu.Lock()
		rep := e.report
		e.calls++
		e.mu.Unlock()
		_ = json.NewEncoder(w).Encode(rep)
	}))
	t.Cleanup(e.Close)
	return e
}

func (e *checkEndpoint) set(r sessionapi.CheckReport) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.report = r
}

// env is a session's environment reaching e.
func (e *checkEndpoint) env(extra ...string) config.Env {
	env := config.Env{"LOOP_SESSION_URL": e.URL, "LOOP_SESSION_TOKEN": e.token}
	for i := 0; i+1 < len(extra); i += 2 {
		env[extra[i]] = extra[i+1]
	}
	return env
}

// report is a check report of github:o/r#1 at node with status.
func report(node, status string, messages ...string) sessionapi.CheckReport {
	return sessionapi.CheckReport{
		Ref: "github:o/r#1", Graph: "work-item", CurrentNode: node, Phase: node, Status: status,
		SpecDir: "docs/specs/issue-1", Messages: messages,
		Nodes: []sessionapi.NodeCheck{
			{Node: "phase-selection", Phase: "selection", Actor: "human", Status: sessionapi.CheckOK},
			{Node: node, Phase: node, Actor: "agent", Status: status, Messages: messages},
		},
	}
}

func TestCheckExitCodes(t *testing.T) {
	e := newCheckEndpoint(t, sessionapi.CheckReport{})
	for _, c := range []struct {
		status string
		failOn string
		want   int
	}{
		{sessionapi.CheckOK, "", 0},
		{sessionapi.CheckBlock, "", 1},
		{sessionapi.CheckWait, "", 0},
		{sessionapi.CheckDone, "", 0},
		{sessionapi.CheckOK, "unmet", 0},
		{sessionapi.CheckBlock, "unmet", 1},
		{sessionapi.CheckWait, "unmet", 1},
		{sessionapi.CheckDone, "unmet", 0},
		{"something-new", "unmet", 1},
		{"something-new", "block", 0},
	} {
		e.set(report("requirements", c.status, "no requirements.md or bugfix.md in docs/specs/issue-1"))
		args := []string{"check"}
		if c.failOn != "" {
			args = append(args, "--fail-on", c.failOn)
		}
		code, out, stderr := runVerb(t, e.env(), args...)
		if code != c.want {
			t.Errorf("%s, --fail-on %q: exit %d, want %d\n%s%s", c.status, c.failOn, code, c.want, out, stderr)
		}
		if code == 1 && !strings.Contains(stderr, "github:o/r#1: "+c.status+" at requirements") {
			t.Errorf("%s: stderr %q", c.status, stderr)
		}
	}
}

func TestCheckTable(t *testing.T) {
	r := report("requirements", sessionapi.CheckBlock, "no requirements.md or bugfix.md in docs/specs/issue-1", "a line\x1b[2Jwith\nescapes")
	e := newCheckEndpoint(t, r)
	code, out, _ := runVerb(t, e.env(), "check")
	if code != 1 {
		t.Errorf("exit %d", code)
	}
	for _, want := range []string{
		"work item  github:o/r#1", "graph      work-item", "node       requirements", "status     block",
		"· no requirements.md or bugfix.md in docs/specs/issue-1", "specs      docs/specs/issue-1",
		"NODE", "phase-selection  human  ok", "requirements     agent  block",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "escapes\n\n") || !strings.Contains(out, "a line [2Jwith escapes") {
		t.Errorf("a message's control characters reached the terminal:\n%q", out)
	}
}

func TestCheckJSON(t *testing.T) {
	r := report("design", sessionapi.CheckWait)
	e := newCheckEndpoint(t, r)
	code, out, stderr := runVerb(t, e.env(), "check", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var got sessionapi.CheckReport
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(got, r) {
		t.Errorf("JSON = %+v\nwant   %+v", got, r)
	}
	if code, _, _ := runVerb(t, e.env(), "check", "--json", "--fail-on", "unmet"); code != 1 {
		t.Errorf("wait with --fail-on unmet: exit %d", code)
	}
}

// Could not run: not a session, no endpoint, a refusal, a usage error.
func TestCheckCannotRun(t *testing.T) {
	e := newCheckEndpoint(t, report("requirements", sessionapi.CheckOK))
	down := httptest.NewServer(http.NotFoundHandler())
	down.Close()
	for name, c := range map[string]struct {
		env  config.Env
		args []string
		want string
	}{
		"no session":      {config.Env{}, nil, "LOOP_SESSION_URL"},
		"url only":        {config.Env{"LOOP_SESSION_URL": e.URL}, nil, "LOOP_SESSION_TOKEN"},
		"unreachable":     {config.Env{"LOOP_SESSION_URL": down.URL, "LOOP_SESSION_TOKEN": e.token}, nil, "could not run: session endpoint"},
		"refused":         {config.Env{"LOOP_SESSION_URL": e.URL, "LOOP_SESSION_TOKEN": "lst1.other"}, nil, "refused: a session token is required (LOOP_SESSION_TOKEN) (401)"},
		"bad --fail-on":   {e.env(), []string{"--fail-on", "wait"}, "--fail-on is block or unmet"},
		"an argument":     {e.env(), []string{"github:o/r#1"}, "unexpected"},
		"an unknown flag": {e.env(), []string{"--format", "json"}, "flag provided but not defined"},
	} {
		code, out, stderr := runVerb(t, c.env, append([]string{"check"}, c.args...)...)
		if code != 2 || !strings.Contains(stderr, c.want) || strings.TrimSpace(out) != "" && !strings.HasPrefix(out, "Usage") {
			t.Errorf("%s: exit %d, stdout %q, stderr %q (want 2 and %q)", name, code, out, stderr, c.want)
		}
		if strings.Contains(stderr, e.token) {
			t.Errorf("%s: the token reached stderr", name)
		}
	}
}

func TestCheckUsage(t *testing.T) {
	code, out, _ := runVerb(t, config.Env{}, "help", "check")
	if code != 0 || !strings.Contains(out, "--fail-on block|unmet") || !strings.Contains(out, "2 could not ask") {
		t.Errorf("help check: %d\n%s", code, out)
	}
	code, out, _ = runVerb(t, config.Env{}, "hook", "--help")
	if code != 0 || !strings.Contains(out, "hook session-start|stop --harness claude|cursor") {
		t.Errorf("hook --help: %d\n%s", code, out)
	}
}
