package workspace

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// These tests run real git on bare repositories under t.TempDir(), reached
// through file:// URLs: no network, no fakes.

// isolated keeps the machine's git configuration out of every git command
// the tests and their managers run.
var isolated = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull}

func needGit(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git binary on PATH: the workspace tests run real git")
	}
}

// gitT runs git in dir as a person would (with an identity) and returns its
// trimmed stdout.
func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=Tester", "-c", "user.email=tester@example.invalid"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append(isolated, "GIT_TERMINAL_PROMPT=0")...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s in %s: %v\n%s", strings.Join(args, " "), dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// fixture is a directory of upstream repositories (<base>/<owner>/<repo>.git)
// and a manager whose URL template points at them.
type fixture struct {
	t    *testing.T
	base string
	m    *Manager
	cfg  Config
}

func newFixture(t *testing.T, mods ...func(*Config)) *fixture {
	t.Helper()
	needGit(t)
	t.Parallel()
	tmp := t.TempDir()
	f := &fixture{t: t, base: filepath.Join(tmp, "upstream")}
	f.cfg = Config{
		Root:        filepath.Join(tmp, "root"),
		URLTemplate: "file://" + f.base + "/{owner}/{repo}.git",
		Env:         isolated,
	}
	for _, mod := range mods {
		mod(&f.cfg)
	}
	m, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.m = m
	return f
}

// upstream creates owner/repo's bare upstream, with one commit on main
// holding files unless files is nil.
func (f *fixture) upstream(owner, repo string, files map[string]string) string {
	f.t.Helper()
	bare := filepath.Join(f.base, owner, repo+".git")
	if err := os.MkdirAll(filepath.Dir(bare), 0o755); err != nil {
		f.t.Fatal(err)
	}
	gitT(f.t, f.base, "-c", "init.defaultBranch=main", "init", "--quiet", "--bare", bare)
	if files != nil {
		f.commit(bare, "main", files)
	}
	return bare
}

// commit pushes a commit of files onto branch of bare (from main's tip, if
// main exists).
func (f *fixture) commit(bare, branch string, files map[string]string) {
	f.t.Helper()
	work := f.t.TempDir()
	gitT(f.t, work, "clone", "--quiet", bare, "w")
	w := filepath.Join(work, "w")
	if gitT(f.t, w, "branch", "--list", "--remotes", "origin/main") != "" {
		gitT(f.t, w, "checkout", "--quiet", "-B", branch, "origin/main")
	} else {
		gitT(f.t, w, "checkout", "--quiet", "--orphan", branch)
	}
	for name, body := range files {
		writeFile(f.t, filepath.Join(w, name), body)
	}
	gitT(f.t, w, "add", "--all")
	gitT(f.t, w, "commit", "--quiet", "-m", "seed "+branch)
	gitT(f.t, w, "push", "--quiet", "origin", "HEAD:refs/heads/"+branch)
}

func (f *fixture) ensure(item Item) *Workspace {
	f.t.Helper()
	ws, err := f.m.Ensure(context.Background(), item)
	if err != nil {
		f.t.Fatalf("Ensure(%+v): %v", item, err)
	}
	return ws
}

func (f *fixture) mirror(owner, repo string) string {
	return filepath.Join(f.cfg.Root, "mirrors", "github.com", owner, repo+".git")
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestTwoItemsOfOneRepositoryAtOnce: two goroutines ensure two items of one
// repository; each gets its own directory and branch, and what one commits
// the other does not see.
func TestTwoItemsOfOneRepositoryAtOnce(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"README.md": "hello\n"})

	refs := []string{"github:acme/api#15", "github:acme/api#16"}
	wss := make([]*Workspace, len(refs))
	errs := make([]error, len(refs))
	var wg sync.WaitGroup
	for i, ref := range refs {
		wg.Go(func() { wss[i], errs[i] = f.m.Ensure(context.Background(), Item{Ref: ref}) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	a, b := wss[0], wss[1]
	if a.Dir == b.Dir || a.Primary == b.Primary {
		t.Fatalf("both items in %s", a.Primary)
	}
	for i, ws := range wss {
		want := "the-loop/" + SpecID(refs[i])
		if got := gitT(t, ws.Primary, "symbolic-ref", "--short", "HEAD"); got != want || ws.Checkouts[0].Branch != want {
			t.Errorf("%s: on %q (reported %q), want %q", refs[i], got, ws.Checkouts[0].Branch, want)
		}
		if readFile(t, filepath.Join(ws.Primary, "README.md")) != "hello\n" {
			t.Errorf("%s: the checkout does not hold the upstream's main", refs[i])
		}
		if ws.SpecDir != filepath.Join(ws.Primary, "docs", "specs", SpecID(refs[i])) || !exists(ws.SpecDir) {
			t.Errorf("%s: spec dir %s", refs[i], ws.SpecDir)
		}
		if ws.Ref != refs[i] || ws.Primary != filepath.Join(ws.Dir, "acme", "api") {
			t.Errorf("%s: %+v", refs[i], ws)
		}
	}

	writeFile(t, filepath.Join(a.Primary, "only-a.txt"), "a\n")
	gitT(t, a.Primary, "add", "only-a.txt")
	gitT(t, a.Primary, "commit", "--quiet", "-m", "a's work")
	if exists(filepath.Join(b.Primary, "only-a.txt")) {
		t.Error("item 16's checkout holds item 15's file")
	}
	if log := gitT(t, b.Primary, "log", "--format=%s"); strings.Contains(log, "a's work") {
		t.Errorf("item 16's branch holds item 15's commit:\n%s", log)
	}
}

// TestTwoManagersShareARoot: two managers (as two dispatcher processes
// would) ensure items of one repository at once under one root.
func TestTwoManagersShareARoot(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"a": "a\n"})
	other, err := New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		m := f.m
		if i%2 == 1 {
			m = other
		}
		wg.Go(func() {
			_, errs[i] = m.Ensure(context.Background(), Item{Ref: "github:acme/api#" + string(rune('1'+i))})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	refs, err := f.m.List()
	if err != nil || len(refs) != len(errs) {
		t.Errorf("List = %v, %v", refs, err)
	}
}

// TestItemSpanningRepositories: an item's further repositories are checked
// out beside its own; ensuring again keeps uncommitted work and adds a
// repository named for the first time.
func TestItemSpanningRepositories(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"api.txt": "api\n"})
	f.upstream("acme", "web", map[string]string{"web.txt": "web\n"})
	f.upstream("tools", "lint", map[string]string{"lint.txt": "lint\n"})

	web := Repo{Owner: "acme", Name: "web"}
	ws := f.ensure(Item{Ref: "github:acme/api#7", Repos: []Repo{web, {Owner: "acme", Name: "api"}}})
	if len(ws.Checkouts) != 2 {
		t.Fatalf("checkouts %+v, want api and web", ws.Checkouts)
	}
	webDir := filepath.Join(ws.Dir, "acme", "web")
	if ws.Checkouts[1].Dir != webDir || !exists(filepath.Join(webDir, "web.txt")) {
		t.Fatalf("web checkout %+v", ws.Checkouts[1])
	}
	if got := gitT(t, webDir, "symbolic-ref", "--short", "HEAD"); got != "the-loop/acme+api+issue-7" {
		t.Errorf("web checkout on %q", got)
	}

	writeFile(t, filepath.Join(ws.Primary, "draft.txt"), "not committed\n")
	writeFile(t, filepath.Join(webDir, "web.txt"), "changed\n")
	again := f.ensure(Item{Ref: "github:acme/api#7", Repos: []Repo{web, {Owner: "tools", Name: "lint"}}})
	if again.Primary != ws.Primary || len(again.Checkouts) != 3 {
		t.Fatalf("second Ensure: %+v", again)
	}
	if readFile(t, filepath.Join(ws.Primary, "draft.txt")) != "not committed\n" || readFile(t, filepath.Join(webDir, "web.txt")) != "changed\n" {
		t.Error("uncommitted changes did not survive a second Ensure")
	}
	lint := again.Checkouts[2]
	if lint.Dir != filepath.Join(ws.Dir, "tools", "lint") || !exists(filepath.Join(lint.Dir, "lint.txt")) {
		t.Errorf("lint checkout %+v", lint)
	}
}

// TestResumesPushedBranch: a branch the-loop/issue-N on the upstream (pushed
// from another host) is what a fresh checkout starts from, tracking it.
func TestResumesPushedBranch(t *testing.T) {
	f := newFixture(t)
	bare := f.upstream("acme", "api", map[string]string{"a": "a\n"})
	f.commit(bare, "the-loop/issue-3", map[string]string{"progress.md": "half done\n"})

	ws := f.ensure(Item{Ref: "github:acme/api#3"})
	if readFile(t, filepath.Join(ws.Primary, "progress.md")) != "half done\n" {
		t.Fatal("the checkout did not start from the pushed branch")
	}
	if got, want := gitT(t, ws.Primary, "rev-parse", "HEAD"), gitT(t, bare, "rev-parse", "the-loop/issue-3"); got != want {
		t.Errorf("HEAD %s, want the upstream branch's %s", got, want)
	}
	if up := gitT(t, ws.Primary, "rev-parse", "--abbrev-ref", "@{upstream}"); up != "origin/the-loop/issue-3" {
		t.Errorf("upstream %q", up)
	}
}

// TestPushReachesTheUpstream: a plain `git push` from a checkout lands on
// the upstream repository, not only in the mirror.
func TestPushReachesTheUpstream(t *testing.T) {
	f := newFixture(t)
	bare := f.upstream("acme", "api", map[string]string{"a": "a\n"})
	ws := f.ensure(Item{Ref: "github:acme/api#4"})
	writeFile(t, filepath.Join(ws.Primary, "fix.go"), "package fix\n")
	gitT(t, ws.Primary, "add", "fix.go")
	gitT(t, ws.Primary, "commit", "--quiet", "-m", "fix")
	gitT(t, ws.Primary, "push", "--quiet")
	if got, want := gitT(t, bare, "rev-parse", "refs/heads/the-loop/issue-4"), gitT(t, ws.Primary, "rev-parse", "HEAD"); got != want {
		t.Errorf("upstream has %s, checkout %s", got, want)
	}
	if url := gitT(t, ws.Primary, "remote", "get-url", "--push", "origin"); url != "file://"+bare {
		t.Errorf("push URL %q", url)
	}
}

// TestRemove: worktrees leave the mirror, the item's directory goes, the
// mirror stays; a branch with unpushed commits stays and is picked up
// again by the next Ensure.
func TestRemove(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"a": "a\n"})
	f.upstream("acme", "web", map[string]string{"w": "w\n"})
	ctx := context.Background()
	ws := f.ensure(Item{Ref: "github:acme/api#5", Repos: []Repo{{Owner: "acme", Name: "web"}}})
	other := f.ensure(Item{Ref: "github:acme/api#6"})

	writeFile(t, filepath.Join(ws.Primary, "wip.txt"), "unpushed\n")
	gitT(t, ws.Primary, "add", "wip.txt")
	gitT(t, ws.Primary, "commit", "--quiet", "-m", "unpushed work")
	writeFile(t, filepath.Join(ws.Checkouts[1].Dir, "scratch"), "uncommitted\n")

	got, err := f.m.Remove(ctx, "github:acme/api#5")
	if err != nil {
		t.Fatal(err)
	}
	if exists(ws.Dir) || exists(ws.Dir+".lock") {
		t.Errorf("%s or its lock file is still there", ws.Dir)
	}
	for _, repo := range []string{"api", "web"} {
		mirror := f.mirror("acme", repo)
		if !exists(filepath.Join(mirror, "HEAD")) {
			t.Fatalf("mirror %s was removed", mirror)
		}
		if list := gitT(t, mirror, "worktree", "list"); strings.Contains(list, ws.Dir) {
			t.Errorf("%s still lists the item's worktree:\n%s", mirror, list)
		}
	}
	if list := gitT(t, f.mirror("acme", "api"), "worktree", "list"); !strings.Contains(list, other.Primary) {
		t.Errorf("the other item's worktree is gone:\n%s", list)
	}
	want := []KeptBranch{{Branch: "the-loop/issue-5", Checkout: ws.Primary, GitDir: f.mirror("acme", "api")}}
	if got.Kept || !slices.Equal(got.KeptBranches, want) {
		t.Errorf("Remove = %+v, want kept %+v", got, want)
	}
	if branches := gitT(t, f.mirror("acme", "web"), "branch", "--list", "the-loop/*"); branches != "" {
		t.Errorf("the web mirror kept %q", branches)
	}

	again := f.ensure(Item{Ref: "github:acme/api#5"})
	if readFile(t, filepath.Join(again.Primary, "wip.txt")) != "unpushed\n" {
		t.Error("the kept branch was not checked out again")
	}

	if r, err := f.m.Remove(ctx, "github:acme/api#404"); err != nil || r.Kept || len(r.KeptBranches) != 0 {
		t.Errorf("Remove of an unknown item = %+v, %v", r, err)
	}
	if p, _ := f.m.Path("github:acme/api#404"); exists(p) || exists(p+".lock") {
		t.Errorf("Remove of an unknown item made %s", p)
	}
	if _, err := f.m.Remove(ctx, "github:acme/api#6"); err != nil {
		t.Fatal(err)
	}
	if branches := gitT(t, f.mirror("acme", "api"), "branch", "--list", "the-loop/issue-6"); branches != "" {
		t.Errorf("a branch without commits of its own was kept: %q", branches)
	}
}

// TestRemoveRemovesReadOnlyFiles: a checkout holding read-only directories
// (a Go module cache, say) is removed all the same.
func TestRemoveRemovesReadOnlyFiles(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"a": "a\n"})
	ws := f.ensure(Item{Ref: "github:acme/api#8"})
	ro := filepath.Join(ws.Primary, "cache", "mod")
	writeFile(t, filepath.Join(ro, "f"), "x")
	if err := os.Chmod(ro, 0o555); err != nil {
		t.Fatal(err)
	}
	if _, err := f.m.Remove(context.Background(), "github:acme/api#8"); err != nil {
		t.Fatal(err)
	}
	if exists(ws.Dir) {
		t.Errorf("%s is still there", ws.Dir)
	}
}

func TestKeep(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Keep = true })
	f.upstream("acme", "api", map[string]string{"a": "a\n"})
	ws := f.ensure(Item{Ref: "github:acme/api#1"})
	r, err := f.m.Remove(context.Background(), "github:acme/api#1")
	if err != nil || !r.Kept {
		t.Errorf("Remove = %+v, %v; want Kept", r, err)
	}
	if !exists(filepath.Join(ws.Primary, "a")) {
		t.Error("Keep removed the checkout")
	}
}

// TestItemBranch: a pull request's head branch is checked out as it is, and
// one that is not on the upstream is refused.
func TestItemBranch(t *testing.T) {
	f := newFixture(t)
	bare := f.upstream("acme", "api", map[string]string{"a": "a\n"})
	f.commit(bare, "feature/login", map[string]string{"login.go": "package login\n"})
	ws := f.ensure(Item{Ref: "github:acme/api#20", Branch: "feature/login"})
	if ws.Checkouts[0].Branch != "feature/login" || !exists(filepath.Join(ws.Primary, "login.go")) {
		t.Errorf("checkout %+v", ws.Checkouts[0])
	}
	if up := gitT(t, ws.Primary, "rev-parse", "--abbrev-ref", "@{upstream}"); up != "origin/feature/login" {
		t.Errorf("upstream %q", up)
	}
	if _, err := f.m.Ensure(context.Background(), Item{Ref: "github:acme/api#21", Branch: "no/such"}); !errors.Is(err, ErrNoBranch) {
		t.Errorf("Ensure with a missing branch = %v, want ErrNoBranch", err)
	}
	if _, err := f.m.Ensure(context.Background(), Item{Ref: "github:acme/api#22", Branch: "feature/login"}); err == nil || !strings.Contains(err.Error(), "checked out in") {
		t.Errorf("a second item on one branch = %v, want it refused", err)
	}
	if _, err := f.m.Ensure(context.Background(), Item{Ref: "github:acme/api#23", Branch: "--upload-pack=x"}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Ensure with an option for a branch = %v, want ErrInvalid", err)
	}
}

func TestCloneStrategy(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Strategy = Clone })
	bare := f.upstream("acme", "api", map[string]string{"a": "a\n"})
	f.commit(bare, "the-loop/issue-2", map[string]string{"b": "b\n"})
	f.upstream("acme", "web", map[string]string{"w": "w\n"})

	one := f.ensure(Item{Ref: "github:acme/api#1", Repos: []Repo{{Owner: "acme", Name: "web"}}})
	two := f.ensure(Item{Ref: "github:acme/api#2"})
	if !exists(filepath.Join(one.Primary, ".git", "HEAD")) || exists(filepath.Join(f.cfg.Root, "mirrors")) {
		t.Fatal("not a clone of its own")
	}
	if one.Checkouts[0].Branch != "the-loop/issue-1" || one.Checkouts[1].Branch != "the-loop/acme+api+issue-1" {
		t.Errorf("branches %+v", one.Checkouts)
	}
	if !exists(filepath.Join(two.Primary, "b")) {
		t.Error("item 2 did not start from its pushed branch")
	}
	writeFile(t, filepath.Join(one.Primary, "x"), "x\n")
	gitT(t, one.Primary, "add", "x")
	gitT(t, one.Primary, "commit", "--quiet", "-m", "x")
	gitT(t, one.Primary, "push", "--quiet")
	if gitT(t, bare, "rev-parse", "the-loop/issue-1") != gitT(t, one.Primary, "rev-parse", "HEAD") {
		t.Error("the push did not reach the upstream")
	}
	again := f.ensure(Item{Ref: "github:acme/api#1"})
	if !exists(filepath.Join(again.Primary, "x")) {
		t.Error("Ensure again replaced the clone")
	}

	// Item 2 commits without pushing: Remove keeps that clone.
	writeFile(t, filepath.Join(two.Primary, "y"), "y\n")
	gitT(t, two.Primary, "add", "y")
	gitT(t, two.Primary, "commit", "--quiet", "-m", "y")
	for _, ref := range []string{"github:acme/api#1", "github:acme/api#2"} {
		if _, err := f.m.Remove(context.Background(), ref); err != nil {
			t.Fatal(err)
		}
	}
	if exists(one.Dir) {
		t.Errorf("%s is still there", one.Dir)
	}
	if !exists(filepath.Join(two.Primary, "y")) {
		t.Error("a clone with unpushed commits was removed")
	}
}

func TestDirStrategy(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Strategy = Dir; c.GitBinary = "no-such-git" })
	ws := f.ensure(Item{Ref: "github:ghe.example.com/acme/api#9", Repos: []Repo{{Owner: "acme", Name: "web"}}})
	if ws.Primary != filepath.Join(ws.Dir, "acme", "api") || !exists(ws.SpecDir) || exists(filepath.Join(ws.Primary, ".git")) {
		t.Errorf("%+v", ws)
	}
	if ws.Checkouts[1].Dir != filepath.Join(ws.Dir, "acme", "web") || !exists(ws.Checkouts[1].Dir) {
		t.Errorf("%+v", ws.Checkouts[1])
	}
	if filepath.Base(ws.Dir) != "ghe.example.com+acme+api+9" {
		t.Errorf("item dir %s", ws.Dir)
	}
	if _, err := f.m.Remove(context.Background(), ws.Ref); err != nil || exists(ws.Dir) {
		t.Errorf("Remove: %v", err)
	}
}

// TestEmptyUpstream: a repository without commits gives a checkout on an
// orphan branch, and its first push creates the branch upstream.
func TestEmptyUpstream(t *testing.T) {
	for _, s := range []Strategy{Worktree, Clone} {
		t.Run(string(s), func(t *testing.T) {
			f := newFixture(t, func(c *Config) { c.Strategy = s })
			bare := f.upstream("acme", "new", nil)
			ws := f.ensure(Item{Ref: "github:acme/new#1"})
			if got := gitT(t, ws.Primary, "symbolic-ref", "--short", "HEAD"); got != "the-loop/issue-1" {
				t.Errorf("on %q", got)
			}
			if log := gitT(t, ws.Primary, "log", "--all", "--oneline"); log != "" && s == Clone {
				t.Errorf("commits in an empty clone: %s", log)
			}
			writeFile(t, filepath.Join(ws.Primary, "first.txt"), "first\n")
			gitT(t, ws.Primary, "add", "first.txt")
			gitT(t, ws.Primary, "commit", "--quiet", "-m", "first")
			if n := gitT(t, ws.Primary, "rev-list", "--count", "HEAD"); n != "1" {
				t.Errorf("the first commit has %s commits under it", n)
			}
			gitT(t, ws.Primary, "push", "--quiet")
			if gitT(t, bare, "rev-parse", "the-loop/issue-1") != gitT(t, ws.Primary, "rev-parse", "HEAD") {
				t.Error("the push did not reach the upstream")
			}
			if _, err := f.m.Remove(context.Background(), ws.Ref); err != nil || exists(ws.Dir) {
				t.Errorf("Remove: %v", err)
			}
		})
	}
}

// TestHostileNamesCreateNothing: refs and repositories that would leave the
// root are refused before anything is created.
func TestHostileNamesCreateNothing(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"a": "a\n"})
	ctx := context.Background()
	for _, ref := range hostileRefs {
		if _, err := f.m.Ensure(ctx, Item{Ref: ref}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Ensure(%q) = %v, want ErrInvalid", ref, err)
		}
		if _, err := f.m.Path(ref); !errors.Is(err, ErrInvalid) {
			t.Errorf("Path(%q) = %v, want ErrInvalid", ref, err)
		}
		if _, err := f.m.Remove(ctx, ref); !errors.Is(err, ErrInvalid) {
			t.Errorf("Remove(%q) = %v, want ErrInvalid", ref, err)
		}
	}
	for _, r := range []Repo{
		{Owner: "..", Name: "x"}, {Owner: "a/b", Name: "x"}, {Owner: "o", Name: "../../x"},
		{Host: "..", Owner: "o", Name: "r"}, {Host: "a/../b", Owner: "o", Name: "r"}, {Owner: "o", Name: ""},
	} {
		if _, err := f.m.Ensure(ctx, Item{Ref: "github:acme/api#1", Repos: []Repo{r}}); !errors.Is(err, ErrInvalid) {
			t.Errorf("Ensure with repository %+v = %v, want ErrInvalid", r, err)
		}
	}
	if _, err := f.m.Ensure(ctx, Item{Ref: "github:acme/api#1", Repos: []Repo{{Host: "ghe.example.com", Owner: "acme", Name: "API"}}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("two hosts' acme/api in one item = %v, want ErrInvalid", err)
	}
	parent := filepath.Dir(f.cfg.Root)
	entries, _ := os.ReadDir(parent)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"upstream"}) {
		t.Errorf("beside the upstreams: %v; want nothing created", names)
	}
}

// TestCaseInsensitiveRefs: two spellings of one ref share one directory.
func TestCaseInsensitiveRefs(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"a": "a\n"})
	a := f.ensure(Item{Ref: "github:acme/api#1"})
	b := f.ensure(Item{Ref: "github:ACME/Api#1"})
	if a.Primary != b.Primary {
		t.Errorf("%s and %s", a.Primary, b.Primary)
	}
	p, err := f.m.Path("github:Acme/API#1")
	if err != nil || p != a.Dir {
		t.Errorf("Path = %s, %v", p, err)
	}
	refs, err := f.m.List()
	if err != nil || !slices.Equal(refs, []string{"github:acme/api#1"}) {
		t.Errorf("List = %v, %v", refs, err)
	}
}

func TestList(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Strategy = Dir })
	if refs, err := f.m.List(); err != nil || len(refs) != 0 {
		t.Errorf("List of an empty root = %v, %v", refs, err)
	}
	for _, ref := range []string{"github:o/r#2", "github:ghe.example.com/o/r#1", "github:o/r#10"} {
		f.ensure(Item{Ref: ref})
	}
	writeFile(t, filepath.Join(f.cfg.Root, "items", "stray"), "")
	if err := os.MkdirAll(filepath.Join(f.cfg.Root, "items", "not+a+slug"), 0o755); err != nil {
		t.Fatal(err)
	}
	refs, err := f.m.List()
	want := []string{"github:ghe.example.com/o/r#1", "github:o/r#10", "github:o/r#2"}
	if err != nil || !slices.Equal(refs, want) {
		t.Errorf("List = %v, %v; want %v", refs, err, want)
	}
}

// TestGitErrorsSayWhat: a failing git command's error names the command
// and carries git's reason.
func TestGitErrorsSayWhat(t *testing.T) {
	f := newFixture(t)
	_, err := f.m.Ensure(context.Background(), Item{Ref: "github:acme/missing#1"})
	if err == nil || !strings.Contains(err.Error(), "git fetch") || !strings.Contains(err.Error(), "fatal:") {
		t.Errorf("Ensure of a missing upstream = %v", err)
	}
	if p, _ := f.m.Path("github:acme/missing#1"); exists(p) || exists(p+".lock") {
		t.Errorf("a failed Ensure left %s behind", p)
	}
}

// TestCanceledEnsure: a cancelled context stops Ensure.
func TestCanceledEnsure(t *testing.T) {
	f := newFixture(t)
	f.upstream("acme", "api", map[string]string{"a": "a\n"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := f.m.Ensure(ctx, Item{Ref: "github:acme/api#1"}); !errors.Is(err, context.Canceled) {
		t.Errorf("Ensure = %v, want context.Canceled", err)
	}
}

// TestCredentialEnv: git with CredentialEnv answers from the store file, and
// only from it.
func TestCredentialEnv(t *testing.T) {
	needGit(t)
	t.Parallel()
	dir := t.TempDir()
	store := filepath.Join(dir, "agent's credentials")
	writeFile(t, store, "https://agent:s3cret@example.test\n")
	cmd := exec.Command("git", "credential", "fill")
	cmd.Env = append(gitEnv(isolated), CredentialEnv(store)...)
	cmd.Stdin = strings.NewReader("protocol=https\nhost=example.test\n\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git credential fill: %v\n%s", err, out)
	}
	for _, want := range []string{"username=agent\n", "password=s3cret\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("git credential fill said %q, want %q in it", out, want)
		}
	}
	cmd = exec.Command("git", "credential", "fill")
	cmd.Env = append(gitEnv(isolated), CredentialEnv(store)...)
	cmd.Stdin = strings.NewReader("protocol=https\nhost=other.test\n\n")
	if out, err := cmd.CombinedOutput(); err == nil {
		t.Errorf("a host the store does not hold was answered: %s", out)
	}
}

// TestNewBranchesAreFetched: a branch pushed after the mirror was made is
// seen by the next checkout.
func TestNewBranchesAreFetched(t *testing.T) {
	f := newFixture(t)
	bare := f.upstream("acme", "api", map[string]string{"a": "a\n"})
	f.ensure(Item{Ref: "github:acme/api#1"})
	f.commit(bare, "the-loop/issue-2", map[string]string{"later.md": "pushed later\n"})
	ws := f.ensure(Item{Ref: "github:acme/api#2"})
	if !exists(filepath.Join(ws.Primary, "later.md")) {
		t.Error("the second checkout did not start from the branch pushed after the mirror was made")
	}
}

// TestCheckoutDeletedByHand: a worktree whose directory was deleted is
// checked out again, on its branch moved up to what was pushed since.
func TestCheckoutDeletedByHand(t *testing.T) {
	f := newFixture(t)
	bare := f.upstream("acme", "api", map[string]string{"a": "a\n"})
	ws := f.ensure(Item{Ref: "github:acme/api#3"})
	writeFile(t, filepath.Join(ws.Primary, "mine"), "1\n")
	gitT(t, ws.Primary, "add", "mine")
	gitT(t, ws.Primary, "commit", "--quiet", "-m", "mine")
	gitT(t, ws.Primary, "push", "--quiet")
	if err := os.RemoveAll(ws.Dir); err != nil {
		t.Fatal(err)
	}
	// Another host goes on from there.
	work := t.TempDir()
	gitT(t, work, "clone", "--quiet", "--branch", "the-loop/issue-3", bare, "w")
	w := filepath.Join(work, "w")
	writeFile(t, filepath.Join(w, "theirs"), "2\n")
	gitT(t, w, "add", "theirs")
	gitT(t, w, "commit", "--quiet", "-m", "theirs")
	gitT(t, w, "push", "--quiet", "origin", "the-loop/issue-3")

	again := f.ensure(Item{Ref: "github:acme/api#3"})
	if !exists(filepath.Join(again.Primary, "mine")) || !exists(filepath.Join(again.Primary, "theirs")) {
		t.Error("the checkout is not at the upstream branch's tip")
	}
	if got, want := gitT(t, again.Primary, "rev-parse", "HEAD"), gitT(t, bare, "rev-parse", "the-loop/issue-3"); got != want {
		t.Errorf("HEAD %s, want %s", got, want)
	}
}
