package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNoBranch: Item.Branch is not a branch of the upstream.
var ErrNoBranch = errors.New("branch not on the upstream")

// checkout makes repository r's checkout exist at dir, working on branch
// want; onUpstream says want must already be a branch of the upstream
// (Item.Branch).
func (m *Manager) checkout(ctx context.Context, r Repo, dir, want string, onUpstream bool) (Checkout, error) {
	c := Checkout{Repo: r, Dir: dir}
	if m.cfg.Strategy == Dir {
		return c, os.MkdirAll(dir, dirMode)
	}
	ok, err := m.isCheckout(ctx, dir)
	if err != nil {
		return c, err
	}
	if ok {
		c.Branch, err = m.currentBranch(ctx, dir)
		return c, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), dirMode); err != nil {
		return c, err
	}
	if m.cfg.Strategy == Clone {
		err = m.clone(ctx, r, dir, want, onUpstream)
	} else {
		err = m.addWorktree(ctx, r, dir, want, onUpstream)
	}
	if err != nil {
		_ = os.Remove(filepath.Dir(dir)) // the owner's directory, if this made it and it stayed empty
		return c, err
	}
	c.Branch = want
	return c, nil
}

// isCheckout reports whether dir is a working tree already. A directory
// that is neither that nor empty is an error: it may hold someone's work,
// and nothing here overwrites it.
func (m *Manager) isCheckout(ctx context.Context, dir string) (bool, error) {
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, err
	case !fi.IsDir():
		return false, fmt.Errorf("%s exists and is not a directory", dir)
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err != nil {
		entries, rerr := os.ReadDir(dir)
		if rerr == nil && len(entries) == 0 {
			return false, nil
		}
		return false, fmt.Errorf("%s exists and is not a checkout", dir)
	}
	top, err := m.git(ctx, dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return false, fmt.Errorf("%s is a broken checkout (remove the work item to start over): %w", dir, err)
	}
	if !samePath(top, dir) {
		return false, fmt.Errorf("%s is a broken checkout: git places it in %s", dir, top)
	}
	return true, nil
}

// currentBranch is the branch checked out in dir, "" when HEAD is detached.
func (m *Manager) currentBranch(ctx context.Context, dir string) (string, error) {
	b, _, err := m.gitQuery(ctx, dir, "symbolic-ref", "-q", "--short", "HEAD")
	return b, err
}

// addWorktree adds a worktree of r's mirror at dir. The mirror is fetched
// first, so that branches pushed since are seen; everything happens under
// the mirror's lock, since worktrees and branches are the mirror's.
func (m *Manager) addWorktree(ctx context.Context, r Repo, dir, want string, onUpstream bool) error {
	mirror := m.mirrorDir(r)
	unlock, err := m.locks.lock(ctx, mirror+".lock")
	if err != nil {
		return err
	}
	defer unlock()
	if err := m.ensureMirror(ctx, r, mirror); err != nil {
		return err
	}
	if _, err := m.git(ctx, mirror, "fetch", "--prune", "--quiet", "origin"); err != nil {
		return err
	}
	// A worktree whose directory someone deleted still holds its branch.
	if _, err := m.git(ctx, mirror, "worktree", "prune"); err != nil {
		return err
	}
	// Git checks a branch out in one worktree at a time; say which.
	if at, err := m.checkedOut(ctx, mirror, want); err != nil || at != "" {
		if err == nil {
			err = fmt.Errorf("branch %s is checked out in %s already", want, at)
		}
		return err
	}
	p, err := m.plan(ctx, mirror, want, onUpstream, true)
	if err != nil {
		return err
	}
	// A worktree added but not finished goes again, so that the next
	// Ensure does not take it for a checkout.
	undo := func(err error) error {
		if err != nil {
			_, _ = m.git(context.WithoutCancel(ctx), mirror, "worktree", "remove", "--force", dir)
		}
		return err
	}
	switch {
	case p.local:
		if _, err := m.git(ctx, mirror, "worktree", "add", "--quiet", dir, want); err != nil {
			return err
		}
		if p.upstream {
			_, err = m.git(ctx, dir, "branch", "--quiet", "--set-upstream-to="+remoteRef(want))
		}
		return undo(err)
	case p.upstream:
		_, err = m.git(ctx, mirror, "worktree", "add", "--quiet", "--track", "-b", want, dir, remoteRef(want))
		return err
	case p.base != "":
		_, err = m.git(ctx, mirror, "worktree", "add", "--quiet", "--no-track", "-b", want, dir, p.base)
		return err
	}
	// An empty upstream: a worktree needs a commit to start from, so it
	// starts detached at a commit of the empty tree and leaves it for an
	// orphan branch, which has no commits until the agent makes one.
	tree, err := m.git(ctx, mirror, "mktree")
	if err != nil {
		return err
	}
	placeholder, err := m.git(ctx, mirror, "-c", "user.name=the-loop", "-c", "user.email=the-loop@invalid",
		"commit-tree", "-m", "placeholder for an empty repository", tree)
	if err != nil {
		return err
	}
	if _, err := m.git(ctx, mirror, "worktree", "add", "--quiet", "--detach", dir, placeholder); err != nil {
		return err
	}
	_, err = m.git(ctx, dir, "checkout", "--quiet", "--orphan", want)
	return undo(err)
}

// ensureMirror creates r's bare mirror unless it exists, and points its
// origin at r's URL (the template may have changed). It is built beside its
// place and renamed into it, so a mirror is never half made.
func (m *Manager) ensureMirror(ctx context.Context, r Repo, mirror string) error {
	if _, err := os.Stat(filepath.Join(mirror, "HEAD")); err == nil {
		_, err := m.git(ctx, mirror, "remote", "set-url", "origin", m.url(r))
		return err
	}
	parent := filepath.Dir(mirror)
	if err := os.MkdirAll(parent, dirMode); err != nil {
		return err
	}
	tmp := mirror + ".new"
	if err := removeAll(tmp); err != nil {
		return err
	}
	if _, err := m.git(ctx, parent, "-c", "init.defaultBranch=main", "init", "--quiet", "--bare", tmp); err != nil {
		return err
	}
	if _, err := m.git(ctx, tmp, "remote", "add", "origin", m.url(r)); err != nil {
		return err
	}
	if err := m.configurePush(ctx, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, mirror); err != nil {
		return fmt.Errorf("mirror %s: %w", r, err)
	}
	return nil
}

// configurePush sets what every checkout of gitDir shares: a plain `git
// push` pushes the current branch to its namesake on origin and tracks it
// (a branch starts untracked when the upstream has no namesake yet).
func (m *Manager) configurePush(ctx context.Context, gitDir string) error {
	for _, kv := range [][2]string{{"push.default", "current"}, {"push.autoSetupRemote", "true"}} {
		if _, err := m.git(ctx, gitDir, "config", kv[0], kv[1]); err != nil {
			return err
		}
	}
	return nil
}

// checkedOut is the worktree of mirror that has branch checked out, ""
// when none has.
func (m *Manager) checkedOut(ctx context.Context, mirror, branch string) (string, error) {
	out, err := m.git(ctx, mirror, "worktree", "list", "--porcelain")
	if err != nil {
		return "", err
	}
	var at string
	for _, line := range strings.Split(out, "\n") {
		if w, ok := strings.CutPrefix(line, "worktree "); ok {
			at = w
		} else if line == "branch refs/heads/"+branch {
			return at, nil
		}
	}
	return "", nil
}

// clone makes a full clone of r at dir. It clones beside dir and renames
// the clone into place once its branch is set, so that a clone cut off
// half way is never taken for a checkout.
func (m *Manager) clone(ctx context.Context, r Repo, dir, want string, onUpstream bool) (err error) {
	tmp := filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".clone")
	if err := removeAll(tmp); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = removeAll(tmp)
		}
	}()
	if _, err := m.git(ctx, filepath.Dir(dir), "clone", "--quiet", "--origin", "origin", "--", m.url(r), tmp); err != nil {
		return err
	}
	if err := m.configurePush(ctx, tmp); err != nil {
		return err
	}
	p, err := m.plan(ctx, tmp, want, onUpstream, false)
	if err != nil {
		return err
	}
	switch {
	case p.local:
		_, err = m.git(ctx, tmp, "checkout", "--quiet", want)
		if err == nil && p.upstream {
			_, err = m.git(ctx, tmp, "branch", "--quiet", "--set-upstream-to="+remoteRef(want))
		}
	case p.upstream:
		_, err = m.git(ctx, tmp, "checkout", "--quiet", "--track", "-b", want, remoteRef(want))
	case p.base != "":
		_, err = m.git(ctx, tmp, "checkout", "--quiet", "--no-track", "-b", want, p.base)
	default: // an empty upstream: the clone's HEAD is unborn already
		_, err = m.git(ctx, tmp, "symbolic-ref", "HEAD", "refs/heads/"+want)
	}
	if err != nil {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return fmt.Errorf("clone %s: %w", r, err)
	}
	return nil
}

// startPlan is where a checkout's branch comes from.
type startPlan struct {
	local    bool   // the branch exists locally: check it out
	upstream bool   // the upstream has a namesake: start from (or track) it
	base     string // else start from this (the default branch); "" is an empty upstream
}

// plan decides where branch want starts in gitDir, a mirror or a clone
// whose remote branches are fresh. askUpstream says origin/HEAD may need
// asking the upstream for (a mirror; a clone sets it itself).
func (m *Manager) plan(ctx context.Context, gitDir, want string, onUpstream, askUpstream bool) (startPlan, error) {
	local, hasLocal, err := m.gitQuery(ctx, gitDir, "rev-parse", "--verify", "--quiet", "refs/heads/"+want+"^{commit}")
	if err != nil {
		return startPlan{}, err
	}
	remote, hasRemote, err := m.gitQuery(ctx, gitDir, "rev-parse", "--verify", "--quiet", remoteRef(want)+"^{commit}")
	if err != nil {
		return startPlan{}, err
	}
	p := startPlan{local: hasLocal, upstream: hasRemote}
	switch {
	case onUpstream && !hasLocal && !hasRemote:
		return p, fmt.Errorf("%w: %s", ErrNoBranch, want)
	case hasLocal && hasRemote:
		// A branch kept from an earlier checkout moves up to what was
		// pushed since, unless it holds commits of its own.
		behind, err := m.gitOK(ctx, gitDir, "merge-base", "--is-ancestor", local, remote)
		if err != nil {
			return p, err
		}
		if behind && local != remote {
			_, err = m.git(ctx, gitDir, "update-ref", "-m", "the-loop: fast-forward to the upstream", "refs/heads/"+want, remote, local)
		}
		return p, err
	case hasLocal || hasRemote:
		return p, nil
	}
	p.base, err = m.defaultBranch(ctx, gitDir, askUpstream)
	return p, err
}

// defaultBranch is the upstream's default branch as a remote-tracking ref:
// origin/HEAD, or the one branch there is (main or master if there are
// several and origin/HEAD cannot tell); "" when the upstream has none.
func (m *Manager) defaultBranch(ctx context.Context, gitDir string, askUpstream bool) (string, error) {
	if askUpstream {
		// Fails for an empty upstream, or one whose HEAD names no branch:
		// the branches below decide then.
		if _, err := m.git(ctx, gitDir, "remote", "set-head", "origin", "--auto"); err != nil && ctx.Err() != nil {
			return "", err
		}
	}
	if head, ok, err := m.gitQuery(ctx, gitDir, "symbolic-ref", "-q", "refs/remotes/origin/HEAD"); err != nil {
		return "", err
	} else if ok {
		if ok, err := m.gitOK(ctx, gitDir, "rev-parse", "--verify", "--quiet", head+"^{commit}"); err != nil || ok {
			return head, err
		}
	}
	out, err := m.git(ctx, gitDir, "for-each-ref", "--format=%(refname)", "refs/remotes/origin/")
	if err != nil {
		return "", err
	}
	var branches []string
	for _, b := range strings.Fields(out) {
		if b != "refs/remotes/origin/HEAD" {
			branches = append(branches, b)
		}
	}
	switch {
	case len(branches) == 0:
		return "", nil
	case len(branches) == 1:
		return branches[0], nil
	}
	for _, b := range []string{"main", "master"} {
		if slices.Contains(branches, remoteRef(b)) {
			return remoteRef(b), nil
		}
	}
	return "", fmt.Errorf("the upstream has %d branches and no default branch", len(branches))
}

func remoteRef(branch string) string { return "refs/remotes/origin/" + branch }

// gitQuery runs a command whose exit status 1 means "no" (rev-parse
// --verify, symbolic-ref -q): ok is false then, and err is for a command
// that could not answer.
func (m *Manager) gitQuery(ctx context.Context, dir string, args ...string) (out string, ok bool, err error) {
	out, err = m.git(ctx, dir, args...)
	if err == nil {
		return out, true, nil
	}
	if ctx.Err() == nil && exitCode(err) == 1 {
		return "", false, nil
	}
	return "", false, err
}

// gitOK is gitQuery without the output.
func (m *Manager) gitOK(ctx context.Context, dir string, args ...string) (bool, error) {
	_, ok, err := m.gitQuery(ctx, dir, args...)
	return ok, err
}

// samePath reports whether a and b name one directory.
func samePath(a, b string) bool {
	ra, err1 := filepath.EvalSymlinks(a)
	rb, err2 := filepath.EvalSymlinks(b)
	if err1 != nil || err2 != nil {
		return filepath.Clean(a) == filepath.Clean(b)
	}
	return ra == rb
}

// removeAll is os.RemoveAll that also removes read-only directories (a Go
// module cache in a checkout, for one), making them writable first.
func removeAll(path string) error {
	err := os.RemoveAll(path)
	if err == nil {
		return nil
	}
	_ = filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(path)
}
