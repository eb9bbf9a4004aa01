package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// runHook runs `the-loop hook args…` with stdin, as run would: the exit
// code, stdout and stderr.
func runHook(t *testing.T, env config.Env, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	err := cmdHookWith(context.Background(), args, env, strings.NewReader(stdin), &out, &errb)
	var exit *exitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.code
		fmt.Fprintln(&errb, exit.msg)
	default:
		code = 1
		fmt.Fprintln(&errb, err)
	}
	return code, out.String(), errb.String()
}

const (
	stopInput  = `{"session_id":"S1","transcript_path":"/t.jsonl","cwd":"/w","hook_event_name":"Stop","stop_hook_active":false}`
	startInput = `{"session_id":"S1","transcript_path":"/t.jsonl","cwd":"/w","hook_event_name":"SessionStart","source":"startup"}`
)

// Outside a loop session both hooks do nothing, whatever they are given.
func TestHookOutsideASession(t *testing.T) {
	for _, args := range [][]string{
		{"hook", "session-start", "--harness", "claude"},
		{"hook", "stop", "--harness", "claude"},
		{"hook", "stop", "--harness", "cursor"},
	} {
		for _, env := range []config.Env{{}, {"LOOP_SESSION_URL": "http://127.0.0.1:1"}, {"LOOP_SESSION_TOKEN": testSessionToken}} {
			code, out, stderr := runVerb(t, env, args...)
			if code != 0 || out != "" || stderr != "" {
				t.Errorf("%v in %v: exit %d, stdout %q, stderr %q", args, env, code, out, stderr)
			}
		}
	}
}

func TestHookSessionStart(t *testing.T) {
	e := newCheckEndpoint(t, report("requirements", sessionapi.CheckBlock, "no requirements.md or bugfix.md in docs/specs/issue-1"))
	code, out, stderr := runHook(t, e.env(), startInput, "session-start", "--harness", "claude")
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, want := range []string{
		"github:o/r#1", "(graph work-item)", "Current node: requirements; status: block.",
		"· no requirements.md or bugfix.md in docs/specs/issue-1", "docs/specs/issue-1/ of this checkout",
		"never approve your own work", "`the-loop ask`", "`the-loop graph complete <work item>`",
		"untrusted data", "never print the environment", "/the-loop:<name>", "/the-loop:work-on",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("session-start lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, e.token) {
		t.Error("the token is in the session's context")
	}

	// Resumed: says so. Cursor: the same text as additional_context.
	_, out, _ = runHook(t, e.env(), strings.Replace(startInput, "startup", "resume", 1), "session-start")
	if !strings.Contains(out, "resumed") {
		t.Errorf("resume:\n%s", out)
	}
	code, out, _ = runHook(t, e.env(), startInput, "session-start", "--harness", "cursor")
	var cursor map[string]string
	if code != 0 || json.Unmarshal([]byte(out), &cursor) != nil || !strings.Contains(cursor["additional_context"], "Current node: requirements") {
		t.Errorf("cursor session-start: %d %q", code, out)
	}

	// The endpoint down: the rules anyway, exit 0.
	e.Close()
	code, out, _ = runHook(t, e.env(), startInput, "session-start", "--harness", "claude")
	if code != 0 || !strings.Contains(out, "could not be asked") || !strings.Contains(out, "never approve your own work") {
		t.Errorf("endpoint down: exit %d\n%s", code, out)
	}
}

// A blocking node blocks the stop max times in a row, with the reason and
// the attempt; then the stop is allowed and the count starts over. A node
// that is not blocking allows the stop and resets the count.
func TestHookStopBound(t *testing.T) {
	tmp := t.TempDir()
	e := newCheckEndpoint(t, report("requirements", sessionapi.CheckBlock, "no requirements.md or bugfix.md in docs/specs/issue-1"))
	env := e.env("TMPDIR", tmp, "LOOP_STOP_MAX_ATTEMPTS", "2")
	stop := func() (int, string, string) { return runHook(t, env, stopInput, "stop", "--harness", "claude") }
	for k := 1; k <= 2; k++ {
		code, out, stderr := stop()
		if code != 2 || out != "" {
			t.Fatalf("attempt %d: exit %d, stdout %q", k, code, out)
		}
		for _, want := range []string{"github:o/r#1 is at node requirements", "· no requirements.md or bugfix.md in docs/specs/issue-1", fmt.Sprintf("(attempt %d of 2)", k), "the-loop graph complete github:o/r#1", "the-loop ask"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("attempt %d: stderr lacks %q:\n%s", k, want, stderr)
			}
		}
	}
	code, out, stderr := stop()
	if code != 0 || out != "" || !strings.Contains(stderr, "still incomplete after 2 attempts") || !strings.Contains(stderr, "the-loop check") {
		t.Errorf("past the bound: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if code, _, stderr := stop(); code != 2 || !strings.Contains(stderr, "(attempt 1 of 2)") {
		t.Errorf("after the reset: exit %d, %q", code, stderr)
	}

	counter := stopCounterPath(env, e.token)
	st, err := os.Lstat(counter)
	if err != nil || st.Mode().Perm() != 0o600 || filepath.Dir(counter) != tmp || strings.Contains(counter, e.token) || strings.Contains(counter, sessionapi.Hash(e.token)) {
		t.Errorf("counter %s: %v %v", counter, st.Mode(), err)
	}

	// Waiting on a person: the stop is allowed and the count reset.
	e.set(report("requirements-approval", sessionapi.CheckWait))
	if code, out, stderr := stop(); code != 0 || out != "" || stderr != "" {
		t.Errorf("wait: exit %d, %q, %q", code, out, stderr)
	}
	if _, err := os.Lstat(counter); !os.IsNotExist(err) {
		t.Errorf("the count was not reset: %v", err)
	}
	for _, s := range []string{sessionapi.CheckOK, sessionapi.CheckDone} {
		e.set(report("x", s))
		if code, _, _ := stop(); code != 0 {
			t.Errorf("%s: exit %d", s, code)
		}
	}
	e.set(report("requirements", sessionapi.CheckBlock))
	if code, _, stderr := stop(); code != 2 || !strings.Contains(stderr, "(attempt 1 of 2)") || !strings.Contains(stderr, "reports it incomplete") {
		t.Errorf("after a wait: exit %d, %q", code, stderr)
	}
}

func TestHookStopMaxAttempts(t *testing.T) {
	for v, want := range map[string]int{"": 3, "5": 5, "0": 1, "-2": 1, "many": 3, " 4 ": 4} {
		if got := stopMaxAttempts(config.Env{envStopMaxAttempts: v}); got != want {
			t.Errorf("%q: %d, want %d", v, got, want)
		}
	}
}

// Cursor cannot refuse a stop: the reason is a follow-up message and the
// exit code is 0; the bound holds the same.
func TestHookStopCursor(t *testing.T) {
	e := newCheckEndpoint(t, report("design", sessionapi.CheckBlock, "no design.md in docs/specs/issue-1"))
	env := e.env("TMPDIR", t.TempDir(), "LOOP_STOP_MAX_ATTEMPTS", "1")
	code, out, stderr := runHook(t, env, `{"status":"completed","loop_count":0}`, "stop", "--harness", "cursor")
	var msg map[string]string
	if code != 0 || stderr != "" || json.Unmarshal([]byte(out), &msg) != nil || !strings.Contains(msg["followup_message"], "no design.md") || !strings.Contains(msg["followup_message"], "(attempt 1 of 1)") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = runHook(t, env, "", "stop", "--harness", "cursor")
	if code != 0 || out != "" || !strings.Contains(stderr, "still incomplete after 1 attempts") {
		t.Errorf("past the bound: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

// The endpoint down, or refusing: the stop is allowed, with one line.
func TestHookStopEndpointDown(t *testing.T) {
	e := newCheckEndpoint(t, report("requirements", sessionapi.CheckBlock))
	env := e.env("TMPDIR", t.TempDir())
	env["LOOP_SESSION_TOKEN"] = "lst1.not-the-token"
	code, out, stderr := runHook(t, env, stopInput, "stop")
	if code != 0 || out != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "letting the session stop") {
		t.Errorf("refused: exit %d, %q, %q", code, out, stderr)
	}
	e.Close()
	code, out, stderr = runHook(t, e.env("TMPDIR", t.TempDir()), stopInput, "stop")
	if code != 0 || out != "" || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "could not ask the loop") {
		t.Errorf("down: exit %d, %q, %q", code, out, stderr)
	}
}

// A link planted where the count lives is replaced, never written
// through; a count that is not a number is none.
func TestHookStopCounterFile(t *testing.T) {
	tmp := t.TempDir()
	e := newCheckEndpoint(t, report("requirements", sessionapi.CheckBlock))
	env := e.env("TMPDIR", tmp)
	counter := stopCounterPath(env, e.token)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, counter); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runHook(t, env, stopInput, "stop"); code != 2 || !strings.Contains(stderr, "attempt 1 of 3") {
		t.Errorf("exit %d, %q", code, stderr)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep me" {
		t.Errorf("the hook wrote through a link: %q", b)
	}
	if st, err := os.Lstat(counter); err != nil || !st.Mode().IsRegular() {
		t.Errorf("counter: %v %v", st, err)
	}
	if err := os.WriteFile(counter, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runHook(t, env, stopInput, "stop"); code != 2 || !strings.Contains(stderr, "attempt 1 of 3") {
		t.Errorf("garbage count: exit %d, %q", code, stderr)
	}
	// Two sessions keep two counts.
	if stopCounterPath(env, e.token+"x") == counter {
		t.Error("two tokens, one counter")
	}
}

// Whatever the harness sends, or fails to, the hook answers.
func TestHookInputTolerant(t *testing.T) {
	e := newCheckEndpoint(t, report("requirements", sessionapi.CheckOK))
	for _, in := range []string{"", "not json", `{"session_id": 7}`, strings.Repeat("x", 3<<20)} {
		if code, _, stderr := runHook(t, e.env("TMPDIR", t.TempDir()), in, "stop"); code != 0 {
			t.Errorf("input %.20q: exit %d, %q", in, code, stderr)
		}
	}
	if in := readHookInput(strings.NewReader(stopInput)); in.SessionID != "S1" || in.HookEventName != "Stop" {
		t.Errorf("parsed %+v", in)
	}
}

// A usage error exits 1, never 2 (a Stop hook's 2 would block the stop).
func TestHookUsage(t *testing.T) {
	e := newCheckEndpoint(t, report("requirements", sessionapi.CheckBlock))
	for _, args := range [][]string{nil, {"nope"}, {"stop", "--harness", "vim"}, {"stop", "extra"}, {"stop", "--bogus"}} {
		code, _, stderr := runHook(t, e.env("TMPDIR", t.TempDir()), "", args...)
		if code != 1 || !strings.Contains(stderr, "usage: hook session-start|stop") {
			t.Errorf("%q: exit %d, %q", args, code, stderr)
		}
	}
}
