// Package workspace gives each work item its own directory and its own git
// checkouts, so that agent sessions of different work items never share a
// working tree or a branch. The dispatcher ensures an item's workspace when
// it spawns or resumes its session (Ensure, which is idempotent and
// incremental) and removes it at cleanup or completion (Remove).
//
// Layout under Config.Root:
//
//	mirrors/<host>/<owner>/<repo>.git    bare mirror of a repository, shared by every item (Worktree)
//	mirrors/<host>/<owner>/<repo>.git.lock
//	items/<host>+<owner>+<repo>+<N>/     one work item's directory (see Path)
//	    <owner>/<repo>/                  one checkout per repository the item touches; the
//	                                     item's own repository's is where its session starts
//	        docs/specs/issue-<N>/        the item's artifacts (SpecID)
//	items/<host>+<owner>+<repo>+<N>.lock
//
// Names on disk are lowercase, since GitHub ignores case: two spellings of
// one ref share one directory. Refs and repository names may come from
// event payloads, so every part is checked before it names a path
// (ParseRef), and nothing is created outside the root.
//
// Each checkout works on a branch of its own, the-loop/issue-<N> in the
// item's own repository (see Ensure). Pushing from a checkout goes to the
// repository's upstream URL, with the credentials the operator grants to
// agents (CredentialEnv), never the loop's own.
//
// The package runs git and touches the file system only; it imports nothing
// of this module, and the dispatcher decides when to call it.
package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// dirMode is the mode directories are made with, before the process's
// umask: 0755 under the usual 022, group-writable under 0002, which a
// dispatcher sets when its sessions run as another user of its group
// (LOOP_WORKSPACE_SHARED).
const dirMode = 0o777

// Strategy is how a work item's repositories are laid out.
type Strategy string

// Strategies.
const (
	// Worktree: one bare mirror per repository under the root, and a git
	// worktree of it per work item; a checkout costs no second copy of the
	// history.
	Worktree Strategy = "worktree"
	// Clone: a full clone per work item and repository, sharing nothing.
	Clone Strategy = "clone"
	// Dir: an empty directory per work item and repository and no git, for
	// hosts and demos without repositories.
	Dir Strategy = "dir"
)

// DefaultURLTemplate is the upstream of a repository unless
// Config.URLTemplate says otherwise.
const DefaultURLTemplate = "https://{host}/{owner}/{repo}.git"

// Config configures a Manager.
type Config struct {
	// Root holds the mirrors and the items' directories (see the package
	// documentation). Required.
	Root string
	// Strategy defaults to Worktree.
	Strategy Strategy
	// GitBinary defaults to "git" on PATH.
	GitBinary string
	// URLTemplate is a repository's upstream URL with {host}, {owner} and
	// {repo} replaced; defaults to DefaultURLTemplate. It must not hold
	// credentials: a checkout's remote URL is readable by its agent, so
	// credentials come from CredentialEnv.
	URLTemplate string
	// Env is added to every git command's environment, after the few
	// variables it inherits from the process (PATH, HOME, proxies, the SSH
	// agent, TLS roots; nothing else), e.g. CredentialEnv's entries.
	Env []string
	// Keep makes Remove leave everything in place, for an operator who
	// looks at what a session left behind.
	Keep bool
}

// Validate reports what makes c unusable.
func (c Config) Validate() error {
	var errs []error
	if c.Root == "" {
		errs = append(errs, errors.New("workspace root is empty"))
	}
	switch c.Strategy {
	case "", Worktree, Clone, Dir:
	default:
		errs = append(errs, fmt.Errorf("workspace strategy %q is not %s, %s or %s", c.Strategy, Worktree, Clone, Dir))
	}
	if c.URLTemplate != "" {
		if err := checkURLTemplate(c.URLTemplate); err != nil {
			errs = append(errs, err)
		}
	}
	for _, e := range c.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("workspace env entry %q is not KEY=value", stripUserinfo(e)))
		}
	}
	return errors.Join(errs...)
}

// checkURLTemplate refuses a template without {repo} (every repository
// would share one URL) and one with credentials in it: a password on any
// URL, and any user on http(s), where a user name alone can be a token. An
// SSH user (ssh://git@host/…, git@host:…) is no credential.
func checkURLTemplate(t string) error {
	if !strings.Contains(t, "{repo}") {
		return fmt.Errorf("workspace URL template %q has no {repo}", stripUserinfo(t))
	}
	for _, m := range userinfo.FindAllStringSubmatch(t, -1) {
		scheme := strings.ToLower(strings.TrimSuffix(m[1], "://"))
		if strings.Contains(m[2], ":") || scheme == "http" || scheme == "https" {
			return fmt.Errorf("workspace URL template %q holds credentials; give agents theirs with CredentialEnv", stripUserinfo(t))
		}
	}
	return nil
}

// Manager creates and removes work items' workspaces under one root. It is
// safe for concurrent use, and several processes may share a root.
type Manager struct {
	cfg   Config
	env   []string
	locks locks
}

// New returns a Manager for cfg, with defaults filled in and Root made
// absolute. It checks that git can be run unless the strategy is Dir.
func New(cfg Config) (*Manager, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Strategy == "" {
		cfg.Strategy = Worktree
	}
	if cfg.GitBinary == "" {
		cfg.GitBinary = "git"
	}
	if cfg.URLTemplate == "" {
		cfg.URLTemplate = DefaultURLTemplate
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("workspace root %s: %w", cfg.Root, err)
	}
	cfg.Root = root
	cfg.Env = slices.Clone(cfg.Env)
	if cfg.Strategy != Dir {
		if _, err := exec.LookPath(cfg.GitBinary); err != nil {
			return nil, fmt.Errorf("workspace strategy %s needs git: %w", cfg.Strategy, err)
		}
	}
	return &Manager{cfg: cfg, env: gitEnv(cfg.Env)}, nil
}

// Item is a work item whose workspace Ensure prepares.
type Item struct {
	// Ref is the work item, github:[host/]owner/repo#N.
	Ref string
	// Repos are further repositories the item touches, besides its own.
	Repos []Repo
	// Branch, when set, is an existing branch of the item's own repository
	// (a pull request's head) that its checkout works on instead of
	// the-loop/issue-<N>. It counts only when that checkout is created.
	Branch string
}

// Workspace is a work item's directory and checkouts.
type Workspace struct {
	// Ref is the item's ref as ingress-github writes it.
	Ref string
	// Dir is the item's own directory; its checkouts are inside.
	Dir string
	// Primary is the checkout of the item's own repository: where its
	// session starts.
	Primary string
	// Checkouts are the primary's, then those of Item.Repos in order (a
	// checkout an earlier call made for a repository not named this time
	// stays, unlisted).
	Checkouts []Checkout
	// SpecDir is Primary/docs/specs/<SpecID>, created by Ensure.
	SpecDir string
}

// Checkout is one repository's working tree in a workspace.
type Checkout struct {
	Repo Repo
	Dir  string
	// Branch is the branch checked out, "" for the Dir strategy or a
	// detached HEAD.
	Branch string
}

// Path is the directory of ref's work item, whether or not it exists.
func (m *Manager) Path(ref string) (string, error) {
	r, n, err := ParseRef(ref)
	if err != nil {
		return "", err
	}
	return m.itemDir(r, n), nil
}

// List returns the refs of the work items that have a directory under the
// root, sorted: for cleaning up what no session owns any more. The refs are
// lowercase, as the directories are.
func (m *Manager) List() ([]string, error) {
	entries, err := os.ReadDir(m.itemsDir())
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list work items: %w", err)
	}
	var refs []string
	for _, e := range entries {
		if !e.IsDir() {
			continue // lock files
		}
		if r, n, ok := parseSlug(e.Name()); ok {
			refs = append(refs, refString(r, n))
		}
	}
	slices.Sort(refs)
	return refs, nil
}

// Ensure makes item's workspace exist and returns it. It is idempotent and
// incremental: a checkout already there is reused as it is (uncommitted
// changes and all), and only repositories without one are checked out.
//
// A new checkout works on a local branch of its own, the-loop/issue-<N> in
// the item's repository (Item.Branch instead, if set) and
// the-loop/<owner>+<repo>+issue-<N> in the others (see workBranch). An
// existing local branch of that name is reused; else the branch starts from
// the upstream's branch of the same name, so that work pushed from another
// host resumes; else from the upstream's default branch. An empty upstream
// gives a branch with no commits yet.
func (m *Manager) Ensure(ctx context.Context, item Item) (*Workspace, error) {
	primary, n, err := ParseRef(item.Ref)
	if err != nil {
		return nil, err
	}
	repos, err := itemRepos(primary, item.Repos)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", item.Ref, err)
	}
	if item.Branch != "" {
		if err := checkBranch(item.Branch); err != nil {
			return nil, fmt.Errorf("%s: %w", item.Ref, err)
		}
	}
	ref := refString(primary, n)
	dir := m.itemDir(primary, n)
	lockFile := dir + ".lock"
	unlock, err := m.locks.lock(ctx, lockFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	defer unlock()

	ws := &Workspace{Ref: ref, Dir: dir}
	for i, r := range repos {
		want := workBranch(primary, n, r)
		if i == 0 && item.Branch != "" {
			want = item.Branch
		}
		c, err := m.checkout(ctx, r, m.checkoutDir(dir, r), want, i == 0 && item.Branch != "")
		if err != nil {
			// An item that got nothing leaves nothing behind.
			if os.Remove(dir) == nil {
				_ = os.Remove(lockFile)
			}
			return nil, fmt.Errorf("%s: %s: %w", ref, r, err)
		}
		ws.Checkouts = append(ws.Checkouts, c)
	}
	ws.Primary = ws.Checkouts[0].Dir
	ws.SpecDir = filepath.Join(ws.Primary, "docs", "specs", SpecID(ref))
	if err := os.MkdirAll(ws.SpecDir, dirMode); err != nil {
		return nil, fmt.Errorf("%s: %w", ref, err)
	}
	return ws, nil
}

// itemRepos is the item's own repository, then the others, checked, each
// once. Two repositories whose checkouts would share <owner>/<repo> (one
// name on two hosts) are refused.
func itemRepos(primary Repo, more []Repo) ([]Repo, error) {
	repos := []Repo{primary}
	byDir := map[[2]string]Repo{{primary.key().Owner, primary.key().Name}: primary}
	for _, r := range more {
		r, err := r.normalize()
		if err != nil {
			return nil, err
		}
		k := r.key()
		if o, ok := byDir[[2]string{k.Owner, k.Name}]; ok {
			if o.key() == k {
				continue
			}
			return nil, fmt.Errorf("%w: %s and %s would share one checkout directory", ErrInvalid, o, r)
		}
		byDir[[2]string{k.Owner, k.Name}] = r
		repos = append(repos, r)
	}
	return repos, nil
}

func (m *Manager) itemsDir() string { return filepath.Join(m.cfg.Root, "items") }

func (m *Manager) itemDir(r Repo, n int64) string {
	return filepath.Join(m.itemsDir(), slug(r, n))
}

func (m *Manager) checkoutDir(itemDir string, r Repo) string {
	k := r.key()
	return filepath.Join(itemDir, k.Owner, k.Name)
}

func (m *Manager) mirrorsDir() string { return filepath.Join(m.cfg.Root, "mirrors") }

func (m *Manager) mirrorDir(r Repo) string {
	k := r.key()
	return filepath.Join(m.mirrorsDir(), k.Host, k.Owner, k.Name+".git")
}

// url is r's upstream URL.
func (m *Manager) url(r Repo) string {
	return strings.NewReplacer("{host}", r.Host, "{owner}", r.Owner, "{repo}", r.Name).Replace(m.cfg.URLTemplate)
}

// GitDirs are the directories outside c's own directory that git working
// in c needs, for a session confined to its workspace
// (docs/decisions/097-sessions-under-landlock.md): with the Worktree
// strategy, write holds the worktree's own administrative directory in its
// mirror and the mirror's objects, refs and logs (which GitDirs makes, as
// git would at the first reflog it writes); read holds the mirror, whose
// configuration, hooks and packed refs git reads and a session must not
// change — they are every work item's. The others strategies keep
// everything in c's directory: nothing.
//
// The worktree's directory is read from c's .git file, which the session
// can write, so it is taken only when it lies in the mirror's worktrees/
// directory; otherwise git in c gets nothing beyond c.
func (m *Manager) GitDirs(c Checkout) (write, read []string) {
	if m.cfg.Strategy != Worktree {
		return nil, nil
	}
	mirror := m.mirrorDir(c.Repo)
	read = []string{mirror}
	write = []string{filepath.Join(mirror, "objects"), filepath.Join(mirror, "refs"), filepath.Join(mirror, "logs")}
	_ = os.MkdirAll(filepath.Join(mirror, "logs"), dirMode)
	b, err := os.ReadFile(filepath.Join(c.Dir, ".git"))
	if err != nil {
		return write, read
	}
	gitDir, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir: ")
	if !ok {
		return write, read
	}
	if !filepath.IsAbs(gitDir) {
		gitDir = filepath.Join(c.Dir, gitDir)
	}
	gitDir = filepath.Clean(gitDir)
	if samePath(filepath.Dir(gitDir), filepath.Join(mirror, "worktrees")) {
		write = append(write, gitDir)
	}
	return write, read
}
