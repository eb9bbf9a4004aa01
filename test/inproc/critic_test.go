package inproc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// Critic rounds (docs/decisions/120-critics.md): a session asks for a
// round of a critic the operator configured; the dispatcher runs it in the
// session's checkout and the findings — or why there are none — are
// recorded on the work item through the ledger and reach the session as a
// new prompt. The critics here are small scripts: they stand where a
// harness CLI would, at the edge.

// critic writes an executable script into dir and returns its path.
func critic(t *testing.T, dir, name, body string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// atRequirements starts a work item and drives it to its requirements
// node, the agent's, with requirements.md written; it returns the issue
// number, the ref and the session's checkout.
func (w *world) atRequirements(title, artifact string) (int, string, string) {
	w.t.Helper()
	number, r := w.start(title)
	w.comment(number, alice, "the-loop execute")
	w.waitNode(r, "requirements")
	w.writeArtifact(r, "requirements.md", artifact)
	store, err := sessions.Open(context.Background(), w.conn)
	if err != nil {
		w.t.Fatal(err)
	}
	rec, _, err := store.Get(context.Background(), r)
	if err != nil || rec.Session == nil || rec.Session.Cwd == "" {
		w.t.Fatalf("%s has no session with a checkout (%v)", r, err)
	}
	return number, r, rec.Session.Cwd
}

// recorded waits for the one comment on issue number holding probe and
// returns it.
func (w *world) recorded(number int, probe string) ghfake.Comment {
	w.t.Helper()
	var got []ghfake.Comment
	testkit.WaitWithin(w.t, wait, "the comment holding "+probe, func() bool {
		got = got[:0]
		for _, c := range w.gh.Comments(repo, number) {
			if strings.Contains(c.Body, probe) {
				got = append(got, c)
			}
		}
		return len(got) > 0
	})
	if len(got) != 1 {
		w.t.Fatalf("%d comments hold %s, want one", len(got), probe)
	}
	return got[0]
}

// typed waits for a prompt typed into the sessions holding every part.
func (w *world) typed(parts ...string) string {
	w.t.Helper()
	var hit string
	testkit.WaitWithin(w.t, wait, "a prompt holding "+strings.Join(parts, ", "), func() bool {
		for _, in := range w.inputs() {
			all := true
			for _, p := range parts {
				all = all && strings.Contains(in, p)
			}
			if all {
				hit = in
				return true
			}
		}
		return false
	})
	return hit
}

// TestCriticRound: a round's findings are recorded on the work item (one
// marker-stamped comment, whose URL the round answers) and reach the
// session; the critic ran in the session's checkout, on the node's
// artifact, without the session's token. A critic that fails, and one that
// runs past its timeout, are reported as such, and what they printed
// before is recorded and delivered all the same.
func TestCriticRound(t *testing.T) {
	bin := t.TempDir()
	ok := critic(t, bin, "ok-critic", `echo "1. critic-probe-finding: the requirements never say who may retry."
[ -e checkout-probe ] && echo "cwd=the checkout"
case "$1" in "$(pwd)"/docs/specs/*/requirements.md) grep -q "Retry on failure" "$1" && echo "artifact=requirements.md, read";; esac
echo "token=${LOOP_SESSION_TOKEN:-none}"
head -c 200 "$2" | grep -q "You are a critic" && echo "prompt-file=read"
`)
	broken := critic(t, bin, "broken-critic", `echo "partial-probe-finding before the crash"
echo "boom: the model is unreachable" >&2
exit 3
`)
	slow := critic(t, bin, "slow-critic", `echo "slow-probe-finding so far"
exec sleep 600
`)
	release := filepath.Join(bin, "release")
	gated := critic(t, bin, "gated-critic", `while [ ! -e '`+release+`' ]; do sleep 0.05; done
echo "gated-probe-finding"
`)
	w := newWorld(t, func(c *config.Config) {
		c.Routing.Critics = []config.Critic{
			{Name: "probe", Harness: "script", Command: ok, Args: []string{"{artifact}", "{promptFile}"}, Timeout: wait, Enabled: true},
			{Name: "broken", Command: broken, Args: []string{"{prompt}"}, Timeout: wait, Enabled: true},
			{Name: "slow", Command: slow, Args: []string{"{prompt}"}, Timeout: 5 * time.Second, Enabled: true},
			{Name: "gated", Command: gated, Args: []string{"{prompt}"}, Timeout: 2 * wait, Enabled: true},
		}
	})
	number, r, cwd := w.atRequirements("Critic", "# Requirements\n\n1. Retry on failure.\n")
	// The critic's output names no path (they are scrubbed from what is
	// recorded): it looks for this file where it runs instead.
	if err := os.WriteFile(filepath.Join(cwd, "checkout-probe"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	agent := w.agentSession(r)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()

	cs, err := agent.Critics(ctx)
	if err != nil || len(cs.Critics) != 4 || cs.Critics[0].Name != "probe" || !cs.Critics[0].Available || cs.Critics[0].Command != ok {
		t.Fatalf("critics = %+v (%v)", cs, err)
	}

	round, err := agent.CriticRun(ctx, sessionapi.CriticRunRequest{Critic: "probe", Wait: sessionapi.Duration(wait)})
	if err != nil {
		t.Fatal(err)
	}
	if round.Outcome != sessionapi.CriticOK || round.Node != "requirements" || !strings.HasSuffix(round.Artifact, "/requirements.md") ||
		!strings.Contains(round.Findings, "critic-probe-finding") || round.URL == "" {
		t.Fatalf("round = %+v", round)
	}
	for _, want := range []string{"cwd=the checkout", "artifact=requirements.md, read", "token=none", "prompt-file=read"} {
		if !strings.Contains(round.Findings, want) {
			t.Errorf("the critic did not print %q:\n%s", want, round.Findings)
		}
	}
	c := w.recorded(number, "critic-probe-finding")
	if c.HTMLURL != round.URL || !strings.Contains(c.Body, "<!-- the-loop:agent-comment -->") || !strings.Contains(c.Body, "`probe`") ||
		!strings.Contains(c.Body, "requirements.md") {
		t.Errorf("the findings' record (%s, the round says %s):\n%s", c.HTMLURL, round.URL, c.Body)
	}
	w.typed("critic.findings", "critic-probe-finding")

	// A round not waited for: the session is told to stop and wait, no
	// second round starts meanwhile, and the findings arrive as a prompt,
	// after which the node is the agent's again.
	round, err = agent.CriticRun(ctx, sessionapi.CriticRunRequest{Critic: "gated"})
	if err != nil || !round.Running || round.Outcome != "" {
		t.Fatalf("gated round = %+v (%v), want it running", round, err)
	}
	rep, err := agent.Check(ctx)
	if err != nil || rep.Status != sessionapi.CheckWait || !strings.Contains(strings.Join(rep.Messages, " "), "critic round") {
		t.Errorf("check while the critic runs = %+v (%v), want wait", rep, err)
	}
	_, err = agent.CriticRun(ctx, sessionapi.CriticRunRequest{Critic: "probe"})
	var busy *sessionapi.Error
	if !errors.As(err, &busy) || busy.Status != 409 || !strings.Contains(busy.Message, "a round of critic gated is running") {
		t.Errorf("a second round meanwhile: %v, want 409", err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	w.recorded(number, "gated-probe-finding")
	w.typed("critic.findings", "gated-probe-finding")
	testkit.WaitWithin(t, wait, "the node the agent's again", func() bool {
		rep, err := agent.Check(ctx)
		return err == nil && rep.Status == sessionapi.CheckBlock
	})

	// A critic that fails: its exit, its error and what it printed first.
	round, err = agent.CriticRun(ctx, sessionapi.CriticRunRequest{Critic: "broken", Wait: sessionapi.Duration(wait)})
	if err != nil {
		t.Fatal(err)
	}
	if round.Outcome != sessionapi.CriticFailed || round.ExitCode != 3 || !strings.Contains(round.Error, "exited 3: boom") ||
		!strings.Contains(round.Findings, "partial-probe-finding") {
		t.Errorf("broken round = %+v", round)
	}
	c = w.recorded(number, "partial-probe-finding")
	if !strings.Contains(c.Body, "the round **failed**") || !strings.Contains(c.Body, "boom") {
		t.Errorf("the failed round's record:\n%s", c.Body)
	}
	w.typed("critic.findings", "the round failed", "partial-probe-finding")

	// A critic past its timeout: stopped, and reported as timed out.
	round, err = agent.CriticRun(ctx, sessionapi.CriticRunRequest{Critic: "slow", Wait: sessionapi.Duration(wait)})
	if err != nil {
		t.Fatal(err)
	}
	if round.Outcome != sessionapi.CriticTimedOut || !strings.Contains(round.Error, "timeout of 5s") || !strings.Contains(round.Findings, "slow-probe-finding") {
		t.Errorf("slow round = %+v", round)
	}
	c = w.recorded(number, "slow-probe-finding")
	if !strings.Contains(c.Body, "the round **timed out**") {
		t.Errorf("the timed-out round's record:\n%s", c.Body)
	}
	w.typed("critic.findings", "the round timed out", "slow-probe-finding")
}

// TestCriticHostile: what a session sends names a critic, a node and a
// brief, and nothing else reaches the critic's command line or where it
// runs — not fields of its own in the request, not a brief that reads like
// a shell command or a flag, not critics its repository's own configuration
// names. A critic nobody configured, or a node the graph lacks, is refused
// with a clear error.
func TestCriticHostile(t *testing.T) {
	bin := t.TempDir()
	args := critic(t, bin, "args-critic", `echo "argc=$#"
for a in "$@"; do printf 'arg=%.40s\n' "$a" | head -n 1; done
[ -e checkout-probe ] && echo "cwd=the checkout"
`)
	w := newWorld(t, func(c *config.Config) {
		c.Routing.Critics = []config.Critic{{Name: "args", Command: args, Args: []string{"--review", "{prompt}"}, Timeout: wait, Enabled: true}}
	})
	_, r, cwd := w.atRequirements("Hostile critic", "# Requirements\n")
	// The repository's own configuration names a critic of its own, as the
	// original's did: it is never read.
	if err := os.MkdirAll(filepath.Join(cwd, ".the-loop"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, ".the-loop", "harness-config.yaml"),
		[]byte("reviews:\n  critics:\n    - {name: evil, command: /bin/sh, args: [-c, \"touch pwned {prompt}\"]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cwd, "checkout-probe"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	agent := w.agentSession(r)
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()

	refused := func(what string, req sessionapi.CriticRunRequest, status int, says string) {
		t.Helper()
		_, err := agent.CriticRun(ctx, req)
		var e *sessionapi.Error
		if !errors.As(err, &e) || e.Status != status || !strings.Contains(e.Message, says) {
			t.Errorf("%s: %v, want %d saying %q", what, err, status, says)
		}
	}
	if cs, err := agent.Critics(ctx); err != nil || len(cs.Critics) != 1 || cs.Critics[0].Name != "args" || len(cs.RepoCritics) != 1 || cs.RepoCritics[0] != "evil" {
		t.Errorf("critics = %+v (%v): want the operator's, and the repository's named as not run", cs, err)
	}
	refused("the repository's critic", sessionapi.CriticRunRequest{Critic: "evil"}, 404, `no critic named "evil" in the operator's routing.critics; the critics are args`)
	refused("a node the graph lacks", sessionapi.CriticRunRequest{Critic: "args", Node: "../../etc"}, 400, `node "../../etc" is not in graph`)
	refused("another work item", sessionapi.CriticRunRequest{Critic: "args", Ref: ref(9999)}, 403, "its own work item")
	refused("an artifact not written", sessionapi.CriticRunRequest{Critic: "args", Node: "design"}, 409, "the artifact of node design (design.md) cannot be read: write it first")

	// A node without an artifact: the critic reviews the checkout.
	whole, err := agent.CriticRun(ctx, sessionapi.CriticRunRequest{Critic: "args", Node: "phase-selection", Wait: sessionapi.Duration(wait)})
	if err != nil || whole.Outcome != sessionapi.CriticOK || whole.Node != "phase-selection" || whole.Artifact != "" ||
		!strings.Contains(whole.Findings, "cwd=the checkout") {
		t.Errorf("a round on the checkout = %+v (%v)", whole, err)
	}
	w.typed("critic.findings", "Critic args: its findings")

	// The request carries a command, arguments and a directory of its
	// own, and a brief that reads like a command line: the critic runs as
	// configured, the brief one part of its one prompt argument.
	var round sessionapi.CriticRound
	err = rawCriticRun(ctx, agent, `{"critic": "args", "command": "/bin/sh", "args": ["-c", "touch pwned"], "cwd": "/", "argv": ["x"],
		"brief": "--dangerously-skip-permissions\"; touch pwned; echo \"$(id)", "wait": "`+wait.String()+`"}`, &round)
	if err != nil {
		t.Fatal(err)
	}
	if round.Outcome != sessionapi.CriticOK || !strings.Contains(round.Findings, "argc=2\narg=--review\narg=You are a critic.") ||
		!strings.Contains(round.Findings, "cwd=the checkout") || strings.Contains(round.Findings, "arg=--dangerously") {
		t.Errorf("round = %+v", round)
	}
	for _, dir := range []string{cwd, "/"} {
		if _, err := os.Stat(filepath.Join(dir, "pwned")); err == nil {
			t.Errorf("something ran the brief or the repository's critic: %s/pwned exists", dir)
		}
	}
}

// rawCriticRun posts body, as written, to the session endpoint's critic
// run with the session's token.
func rawCriticRun(ctx context.Context, c sessionapi.Client, body string, out *sessionapi.CriticRound) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+sessionapi.PathCriticRun, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("critic run answered %d: %s", resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}
