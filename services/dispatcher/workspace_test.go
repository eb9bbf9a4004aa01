package dispatcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
)

// Work items' sessions in workspaces of their own, against real git: the
// upstream repositories are local bare repositories served over file://,
// so nothing leaves the machine.

// bareRepo makes a bare upstream repository root/owner/repo.git with one
// commit on main.
func bareRepo(t *testing.T, root, owner, repo string) string {
	t.Helper()
	bare := filepath.Join(root, owner, repo+".git")
	seed := t.TempDir()
	for _, args := range [][]string{
		{"init", "-q", "--bare", "-b", "main", bare},
		{"-C", seed, "init", "-q", "-b", "main"},
	} {
		gitRun(t, args...)
	}
	if err := os.WriteFile(filepath.Join(seed, "README.md"), []byte("# "+repo+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, "-C", seed, "add", ".")
	gitRun(t, "-C", seed, "-c", "user.name=seed", "-c", "user.email=seed@example.test", "commit", "-q", "-m", "seed")
	gitRun(t, "-C", seed, "push", "-q", bare, "main")
	return bare
}

func gitRun(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestWorkspacePerWorkItem: two work items of one repository run at once,
// each session in its own worktree on its own branch, each with its own
// docs/specs/issue-N, neither seeing the other's changes; a third work item
// whose pull request lives in another repository gets a checkout of both;
// cleanup and the work item's close remove their worktrees.
func TestWorkspacePerWorkItem(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	upstreams := t.TempDir()
	bareRepo(t, upstreams, "octo", "repo")
	bareRepo(t, upstreams, "octo", "lib")
	var root string
	e := newEnv(t, func(s *Settings) {
		root = s.Workdir
		s.Workspace = WorkspaceConfig{Strategy: WorkspaceWorktree, URLTemplate: "file://" + upstreams + "/{owner}/{repo}.git"}
	})
	const a, b, c = "github:octo/repo#101", "github:octo/repo#102", "github:octo/repo#103"
	e.publish(labeled(a, "lab-a"), labeled(b, "lab-b"), comment(a, 10001, alice, "the-loop start"), comment(b, 10002, alice, "the-loop start"))
	e.waitRecord("session.spawned", map[string]any{"work_item": a})
	e.waitRecord("session.spawned", map[string]any{"work_item": b})
	sa, sb := e.record(a).Session, e.record(b).Session
	testkit.WaitFor(t, "both sessions booted", func() bool {
		return len(e.bootsOf(sa.HarnessSessionID)) > 0 && len(e.bootsOf(sb.HarnessSessionID)) > 0
	})
	for _, x := range []struct {
		ref, dir, spec, branch string
		bootDir                string
	}{
		{a, sa.Cwd, sa.SpecDir, "the-loop/issue-101", e.bootsOf(sa.HarnessSessionID)[0].Dir},
		{b, sb.Cwd, sb.SpecDir, "the-loop/issue-102", e.bootsOf(sb.HarnessSessionID)[0].Dir},
	} {
		if !strings.HasPrefix(x.dir, root+string(filepath.Separator)) {
			t.Errorf("%s works in %s, outside the workspace root %s", x.ref, x.dir, root)
		}
		if x.bootDir != x.dir {
			t.Errorf("%s's harness started in %s, its record says %s", x.ref, x.bootDir, x.dir)
		}
		if got := gitRun(t, "-C", x.dir, "branch", "--show-current"); got != x.branch {
			t.Errorf("%s's checkout is on %q, want %s", x.ref, got, x.branch)
		}
		if want := filepath.Join(x.dir, "docs", "specs", "issue-"+x.ref[strings.LastIndex(x.ref, "#")+1:]); x.spec != want {
			t.Errorf("%s's artifacts go to %s, want %s", x.ref, x.spec, want)
		}
		if _, err := os.Stat(filepath.Join(x.dir, "README.md")); err != nil {
			t.Errorf("%s's checkout lacks the repository's files: %v", x.ref, err)
		}
	}
	if sa.Cwd == sb.Cwd || sa.Workspace == sb.Workspace {
		t.Fatalf("two work items share a directory: %s", sa.Cwd)
	}
	// What one session writes, the other does not see.
	if err := os.MkdirAll(sa.SpecDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sa.SpecDir, "requirements.md"), []byte("# A\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, "-C", sa.Cwd, "add", ".")
	gitRun(t, "-C", sa.Cwd, "-c", "user.name=agent", "-c", "user.email=agent@example.test", "commit", "-q", "-m", "requirements of 101")
	if _, err := os.Stat(filepath.Join(sb.Cwd, "docs", "specs", "issue-101", "requirements.md")); !os.IsNotExist(err) {
		t.Errorf("B's checkout sees A's artifact: %v", err)
	}
	if log := gitRun(t, "-C", sb.Cwd, "log", "--oneline"); strings.Contains(log, "requirements of 101") {
		t.Errorf("B's branch has A's commit:\n%s", log)
	}

	// C's first event is a pull request in octo/lib that closes it: its
	// workspace holds both repositories.
	pr := activity(c, "pr-lib", "pull_request", "opened", map[string]any{
		"pull_request": map[string]any{"number": 7, "head": map[string]any{"ref": "fix", "repo": map[string]any{"full_name": "octo/lib"}}},
		"label":        map[string]any{"name": DefaultLabel},
		"issue":        map[string]any{"labels": []any{map[string]any{"name": DefaultLabel}}},
	})
	pr.GetGithubActivity().Payload = []byte(strings.Replace(string(pr.GetGithubActivity().GetPayload()), `"full_name":"octo/repo"`, `"full_name":"octo/lib"`, 1))
	e.publish(labeled(c, "lab-c"), comment(c, 10003, alice, "the-loop start"))
	e.waitRecord("session.spawned", map[string]any{"work_item": c})
	e.publish(pr)
	sc := e.record(c).Session
	lib := filepath.Join(sc.Workspace, "octo", "lib")
	testkit.WaitFor(t, "a checkout of octo/lib in C's workspace", func() bool {
		_, err := os.Stat(filepath.Join(lib, "README.md"))
		return err == nil
	})
	if sc.Cwd != filepath.Join(sc.Workspace, "octo", "repo") {
		t.Errorf("C's session works in %s, want its own repository's checkout", sc.Cwd)
	}

	// Cleanup removes A's worktree; B's work item closing removes B's.
	e.publish(comment(a, 10004, alice, "the-loop cleanup"))
	e.waitRecord("session.workspace_removed", map[string]any{"work_item": a})
	e.publish(closed(b, "close-b", 102))
	e.waitRecord("session.workspace_removed", map[string]any{"work_item": b})
	for _, dir := range []string{sa.Workspace, sb.Workspace} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", dir, err)
		}
	}
	mirror := filepath.Join(root, "mirrors", "github.com", "octo", "repo.git")
	wt := gitRun(t, "--git-dir", mirror, "worktree", "list")
	if strings.Contains(wt, "issue-101") || strings.Contains(wt, "issue-102") || !strings.Contains(wt, "issue-103") {
		t.Errorf("the mirror's worktrees after cleanup and close:\n%s", wt)
	}
	// A's commit was pushed nowhere: its branch is kept for a person.
	if branches := gitRun(t, "--git-dir", mirror, "branch", "--list", "the-loop/issue-101"); branches == "" {
		t.Error("A's unpushed branch was deleted with its worktree")
	}
}

// TestSessionsPushWithTheAgentsCredentials: with LOOP_AGENT_GIT_CREDENTIALS
// a session's git takes its credentials from that store and from nothing
// else: `git credential fill` in the session's environment answers the
// agents' password.
func TestSessionsPushWithTheAgentsCredentials(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	store := filepath.Join(t.TempDir(), "agent-credentials")
	if err := os.WriteFile(store, []byte("https://agent-bot:agent-s3cret@git.example.test\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(s *Settings) { s.AgentGitCredentials = store })
	sess := e.start("github:octo/repo#111", 10100)
	env := e.bootEnv(sess.HarnessSessionID, 0)
	cmd := exec.Command("git", "credential", "fill")
	cmd.Stdin = strings.NewReader("protocol=https\nhost=git.example.test\n\n")
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=" + os.Getenv("PATH"), "GIT_TERMINAL_PROMPT=0"}
	for k, v := range env {
		if strings.HasPrefix(k, "GIT_CONFIG_") {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "password=agent-s3cret") || !strings.Contains(string(out), "username=agent-bot") {
		t.Errorf("git credential fill in the session's environment: %v\n%s", err, out)
	}
}
