//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/agent/plugin"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
)

// The agent's side under `the-loop up`, as a team would run it: a real tmux
// session in the work item's own git worktree (of a local bare repository:
// no network), the loop's plugin installed by up and handed to the
// harness, and a stand-in harness that loads that plugin as Claude Code
// does — it resolves the boot prompt's first command to the installed
// plugin's file, runs its SessionStart hook at start and its Stop hook
// whenever it tries to finish a turn.

const agentRepo = "octo/agent"

// agentUp is one `the-loop up` with a stand-in harness. Its sessions run
// in up's session sandbox (LOOP_SESSION_SANDBOX defaults to landlock under
// up on Linux), so the harness and its records live where a session may
// reach them: the harness (a copy of this test binary and its wrapper) in
// a directory of its own, which the sandbox lets a session run, the
// records in the sessions' TMPDIR.
type agentUp struct {
	t       *testing.T
	gh      *ghfake.Server
	webhook string
	standIn string
	root    string
	client  *http.Client
	seq     int
	// store is up's store; harness the harness's directory; tmp the
	// sessions' TMPDIR; natsAddr the bus's address; tmuxDir the
	// directory of the sessions' tmux servers' sockets.
	store, harness, tmp, natsAddr, tmuxDir string
	// pid is up's process.
	pid int
	// home is the sessions' HOME.
	home string
	// admin is up's admin address; label the auto-execute label the
	// issues carry.
	admin, label string
}

func startAgentUp(t *testing.T) *agentUp {
	t.Helper()
	return startAgentUpWith(t, nil)
}

// startAgentUpWith is startAgentUp with env set last, over the test's own
// settings (the README's, in TestReadmeFirstHour).
func startAgentUpWith(t *testing.T, env []string) *agentUp {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (package tmux): sessions run in it")
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed: work items' workspaces are git worktrees")
	}
	loop, _ := binaries(t)
	dir := t.TempDir()
	a := &agentUp{t: t, root: filepath.Join(dir, "workspaces"), client: &http.Client{Timeout: 30 * time.Second}, label: "the-loop: auto-execute",
		store: filepath.Join(dir, "store"), harness: filepath.Join(dir, "harness"), tmp: filepath.Join(dir, "tmp"),
		natsAddr: fmt.Sprintf("127.0.0.1:%d", freePortTB(t)), tmuxDir: newTmuxDir(t)}
	a.standIn = filepath.Join(a.tmp, "standin")
	a.home = filepath.Join(dir, "home")
	a.gh = ghfake.New(t, ghfake.WithPrimaryLimit(0), ghfake.WithSecondaryLimits(0, 0))
	a.gh.AddRepo(agentRepo)
	a.gh.AddToken(ledgerToken, ledgerLogin)

	// The repository the work item's checkout is made from.
	upstreams := filepath.Join(dir, "upstreams")
	bare := filepath.Join(upstreams, agentRepo+".git")
	seed := filepath.Join(dir, "seed")
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"init", "-q", "-b", "main", seed},
	} {
		runGit(t, "", args...)
	}
	if err := os.WriteFile(filepath.Join(seed, "README.md"), []byte("# agent\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	runGit(t, seed, "add", ".")
	runGit(t, seed, "-c", "user.name=seed", "-c", "user.email=seed@example.test", "commit", "-q", "-m", "seed")
	runGit(t, seed, "push", "-q", bare, "main")

	cfg := filepath.Join(dir, "the-loop.yaml")
	if err := os.WriteFile(cfg, []byte("version: \"0.7.0\"\nrouting:\n  authorizedUsers:\n    - {github: "+alice+", name: Alice}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{a.standIn, a.harness} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(a.harness, "e2e.test")
	if err := os.WriteFile(exe, b, 0o700); err != nil {
		t.Fatal(err)
	}
	// The stand-in is this test binary (TestMain), obedient: it runs what
	// a prompt marks, as a prompt-injected agent would.
	wrapper := filepath.Join(a.harness, "claude")
	script := fmt.Sprintf("#!/bin/sh\n%s=1 %s=%q exec %q \"$@\"\n", standin.EnvObey, tmuxtest.EnvDir, a.standIn, exe)
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	hook := freePortTB(t)
	admin := fmt.Sprintf("127.0.0.1:%d", freePortTB(t))
	a.admin = admin
	a.webhook = fmt.Sprintf("http://127.0.0.1:%d/gh-webhook", hook)
	own := append(baseEnv(),
		"LOOP_STORE_DIR="+a.store,
		"LOOP_NATS_LISTEN="+a.natsAddr,
		"LOOP_ADMIN_ADDR="+admin,
		fmt.Sprintf("LOOP_GITHUB_WEBHOOK_ADDR=127.0.0.1:%d", hook),
		"LOOP_GITHUB_WEBHOOK_SECRET="+webhookSecret,
		"LOOP_GITHUB_TOKEN="+ledgerToken,
		"LOOP_GITHUB_API_URL="+a.gh.URL(),
		"LOOP_GITHUB_LOGIN="+ledgerLogin,
		"LOOP_CONFIG="+cfg,
		fmt.Sprintf("LOOP_SLACK_EVENTS_ADDR=127.0.0.1:%d", freePortTB(t)),
		fmt.Sprintf("LOOP_SESSION_ADDR=127.0.0.1:%d", freePortTB(t)),
		"LOOP_TMUX_DIR="+a.tmuxDir,
		"LOOP_HARNESS_BINARY="+wrapper,
		"LOOP_WORKSPACE_ROOT="+a.root,
		// The sessions' HOME, where up answers Claude Code's first-run
		// questions: the test's own, never the user's.
		"HOME="+a.home,
		// The sessions' TMPDIR, which their sandbox lets them write: not
		// the directory that holds the store.
		"TMPDIR="+a.tmp,
		"LOOP_WORKSPACE_GIT_URL=file://"+upstreams+"/{owner}/{repo}.git",
	)
	a.pid = launchUp(t, loop, append(own, env...), filepath.Join(dir, "up.log"), "http://"+admin+"/readyz", a.client)
	return a
}

func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// post delivers one signed webhook of event with payload.
func (a *agentUp) post(event string, payload map[string]any) {
	a.t.Helper()
	body, err := json.Marshal(payload)
	if err != nil {
		a.t.Fatal(err)
	}
	a.seq++
	req, err := http.NewRequest(http.MethodPost, a.webhook, bytes.NewReader(body))
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("00000000-0000-4000-8000-%012d", a.seq))
	req.Header.Set("X-Hub-Signature-256", githubSignature(webhookSecret, body))
	resp, err := a.client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		a.t.Fatalf("%s delivery answered %d: %s", event, resp.StatusCode, b)
	}
}

func (a *agentUp) issuePayload(n int) map[string]any {
	return map[string]any{"number": n, "title": "Agent work", "state": "open", "html_url": fmt.Sprintf("https://github.com/%s/issues/%d", agentRepo, n),
		"user": map[string]any{"login": alice}, "labels": []any{map[string]any{"name": a.label}}}
}

func (a *agentUp) repository() map[string]any {
	return map[string]any{"id": 1, "full_name": agentRepo, "html_url": "https://github.com/" + agentRepo}
}

// comment stores Alice's comment on the fake and delivers it.
func (a *agentUp) comment(n int, body string) {
	cm := a.gh.AddComment(agentRepo, n, alice, body)
	a.post("issue_comment", map[string]any{"action": "created", "issue": a.issuePayload(n),
		"comment": map[string]any{"id": cm.ID, "html_url": cm.HTMLURL, "body": cm.Body, "user": map[string]any{"login": alice},
			"author_association": "MEMBER", "created_at": cm.CreatedAt.UTC().Format(time.RFC3339)},
		"repository": a.repository(), "sender": map[string]any{"login": alice}})
}

// stops are the Stop hook runs of the session's turn.
func (a *agentUp) stops(sessionID string, turn int) []standin.Hooked {
	hs, _ := standin.ReadHooks(a.standIn)
	var out []standin.Hooked
	for _, h := range hs {
		if h.SessionID == sessionID && h.Event == "Stop" && h.Turn == turn {
			out = append(out, h)
		}
	}
	return out
}

// turnEnded waits until the turn's stop was let through and returns its
// Stop hook runs.
func (a *agentUp) turnEnded(what, sessionID string, turn int) []standin.Hooked {
	a.t.Helper()
	var runs []standin.Hooked
	testkit.WaitFor(a.t, what, func() bool {
		runs = a.stops(sessionID, turn)
		return len(runs) > 0 && !runs[len(runs)-1].Blocked
	})
	return runs
}

// TestAgentSideUnderUp: a labelled, started work item's session runs in
// tmux in its own worktree; the first command its boot prompt names is a
// file of the plugin up installed; its SessionStart hook says where the
// work item stands; its Stop hook lets it stop at a human gate, keeps it
// working at its own open node (three times, the bound, then lets it go
// with a word), and lets it stop at once after it completed the node.
func TestAgentSideUnderUp(t *testing.T) {
	a := startAgentUp(t)
	is := a.gh.AddIssue(agentRepo, alice, "Agent work", "Please do the thing.")
	n := is.Number
	wantRef := fmt.Sprintf("github:%s#%d", agentRepo, n)
	a.post("issues", map[string]any{"action": "labeled", "label": map[string]any{"name": "the-loop: auto-execute"},
		"issue": a.issuePayload(n), "repository": a.repository(), "sender": map[string]any{"login": alice}})
	a.comment(n, "the-loop start")

	var boot standin.Boot
	testkit.WaitFor(t, "the session's boot", func() bool {
		bs, _ := standin.ReadBoots(a.standIn)
		if len(bs) == 0 {
			return false
		}
		boot = bs[0]
		return true
	})
	// Its own worktree, on its own branch.
	if got := runGit(t, boot.Dir, "branch", "--show-current"); got != fmt.Sprintf("the-loop/issue-%d", n) {
		t.Errorf("the session works on branch %q in %s", got, boot.Dir)
	}
	if !strings.HasPrefix(boot.Dir, a.root+string(filepath.Separator)) {
		t.Errorf("the session works in %s, outside the workspace root %s", boot.Dir, a.root)
	}
	// The plugin up installed, loaded by the harness.
	if len(boot.Plugins) != 1 || boot.Plugins[0].Name != plugin.Name || boot.Plugins[0].Error != "" {
		t.Fatalf("plugins loaded: %+v (args %v)", boot.Plugins, boot.Args)
	}
	pdir := boot.Plugins[0].Dir
	if !strings.HasPrefix(pdir, a.root) {
		t.Errorf("the plugin is loaded from %s, not where up installed it", pdir)
	}
	var first *standin.Command
	for i := range boot.Commands {
		if boot.Commands[i].Slash == "/the-loop:work-on" {
			first = &boot.Commands[i]
		}
	}
	if first == nil || !first.Found || first.File != filepath.Join(pdir, "commands", "work-on.md") {
		t.Fatalf("the boot prompt's first command resolved to %+v (commands %+v)", first, boot.Commands)
	}
	t.Logf("session %s works in %s; plugin %s from %s; %s resolved to %s", boot.SessionID, boot.Dir,
		boot.Plugins[0].Version, pdir, first.Slash, first.File)
	installed, err := os.ReadFile(first.File)
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := fs.ReadFile(plugin.FS(), "commands/work-on.md")
	if err != nil || !bytes.Equal(installed, shipped) {
		t.Errorf("the installed work-on command is not the one the-loop ships (%v)", err)
	}
	hs, _ := standin.ReadHooks(a.standIn)
	var started bool
	for _, h := range hs {
		if h.SessionID == boot.SessionID && h.Event == "SessionStart" {
			started = h.Exit == 0 && strings.Contains(h.Stdout, wantRef) && strings.Contains(h.Stdout, "phase-selection")
			if !started {
				t.Errorf("SessionStart hook: exit %d\nstdout: %s\nstderr: %s", h.Exit, h.Stdout, h.Stderr)
			}
		}
	}
	if !started {
		t.Errorf("no SessionStart hook ran: %+v", hs)
	}

	// At phase selection, a person's gate: the agent may stop.
	if runs := a.turnEnded("the boot turn's stop", boot.SessionID, 0); len(runs) != 1 || runs[0].Blocked {
		t.Errorf("at a human gate the stop was blocked: %+v", runs)
	}

	// Execute: the work item is at the agent's requirements node, which
	// is open — the stop is blocked up to the bound, then let through.
	a.comment(n, "the-loop execute")
	runs := a.turnEnded("the execute turn's stop", boot.SessionID, 1)
	if len(runs) != 4 {
		t.Fatalf("the execute turn's stop ran %d times, want 3 blocked and 1 let through: %+v", len(runs), runs)
	}
	for i, r := range runs[:3] {
		if !r.Blocked || r.Exit != 2 || !strings.Contains(r.Stderr, "requirements") || !strings.Contains(r.Stderr, fmt.Sprintf("%d of 3", i+1)) {
			t.Errorf("stop attempt %d: blocked %v, exit %d, stderr %q", i+1, r.Blocked, r.Exit, r.Stderr)
		}
	}
	t.Logf("at requirements the stop was blocked %d times (%q), then let through: %q", 3, firstLine(runs[0].Stderr), firstLine(runs[3].Stderr))
	if last := runs[3]; last.Blocked || last.Exit != 0 || !strings.Contains(last.Stderr, "3 attempts") {
		t.Errorf("the fourth stop: blocked %v, exit %d, stderr %q; want it let through with a word", last.Blocked, last.Exit, last.Stderr)
	}

	// The agent completes its node: its stop goes through at once.
	a.comment(n, standin.RunMarker+"the-loop graph complete #")
	runs = a.turnEnded("the completing turn's stop", boot.SessionID, 2)
	if len(runs) != 1 || runs[0].Blocked {
		t.Errorf("after completing its node the stop ran %d times: %+v", len(runs), runs)
	}
	ran, _ := standin.ReadRuns(a.standIn)
	if len(ran) != 1 || ran[0].Exit != 0 || !strings.Contains(ran[0].Output, "requirements-approval") {
		t.Errorf("the-loop graph complete in the session: %+v", ran)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
