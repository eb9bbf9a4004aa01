package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Removed says what Remove left in place on purpose.
type Removed struct {
	// Kept is true when Config.Keep left the whole workspace in place.
	Kept bool
	// KeptBranches are branches that hold commits on no upstream branch:
	// Remove keeps them rather than lose work nobody pushed.
	KeptBranches []KeptBranch
}

// KeptBranch is a branch Remove kept.
type KeptBranch struct {
	Branch string
	// Checkout was its checkout's directory.
	Checkout string
	// GitDir holds the branch now: the mirror (Worktree), or the clone
	// itself, left in place (Clone).
	GitDir string
}

// Remove removes ref's workspace: every worktree of the item (from its
// mirror too) and its directory, and the item's local branches. Mirrors
// stay, for the next item. A branch with commits on no upstream branch is
// kept, and so is a clone holding one (see Removed); uncommitted changes
// are not kept. Removing a workspace that does not exist is not an error.
func (m *Manager) Remove(ctx context.Context, ref string) (Removed, error) {
	r, n, err := ParseRef(ref)
	if err != nil {
		return Removed{}, err
	}
	if m.cfg.Keep {
		return Removed{Kept: true}, nil
	}
	dir := m.itemDir(r, n)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return Removed{}, nil // and no lock file made for it
	}
	lockFile := dir + ".lock"
	unlock, err := m.locks.lock(ctx, lockFile)
	if err != nil {
		return Removed{}, fmt.Errorf("%s: %w", ref, err)
	}
	defer unlock()
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return Removed{}, nil
	}

	checkouts, err := filepath.Glob(filepath.Join(dir, "*", "*"))
	if err != nil {
		return Removed{}, err
	}
	var out Removed
	keep := map[string]bool{}
	for _, c := range checkouts {
		kept, err := m.removeCheckout(ctx, c)
		if err != nil {
			return out, fmt.Errorf("%s: %w", ref, err)
		}
		if kept != nil {
			out.KeptBranches = append(out.KeptBranches, *kept)
			if kept.GitDir == filepath.Join(c, ".git") {
				keep[c] = true
			}
		}
	}
	if err := removeExcept(dir, keep); err != nil {
		return out, fmt.Errorf("%s: %w", ref, err)
	}
	if len(keep) == 0 {
		_ = os.Remove(lockFile)
	}
	return out, nil
}

// removeCheckout takes dir's worktree out of its mirror, and its branch too
// unless that holds unpushed commits. The directory itself goes with the
// item's. A checkout whose repository is neither a mirror under the root
// nor its own clone is not the manager's: its repository is left alone.
func (m *Manager) removeCheckout(ctx context.Context, dir string) (*KeptBranch, error) {
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return nil, nil
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git")); err != nil {
		return nil, nil // Dir strategy
	}
	common, ok, err := m.gitQuery(ctx, dir, "rev-parse", "--path-format=absolute", "--git-common-dir")
	if err != nil && ctx.Err() != nil {
		return nil, err
	}
	if err != nil || !ok {
		return nil, nil // broken: its mirror is gone
	}
	branch, err := m.currentBranch(ctx, dir)
	if err != nil {
		return nil, err
	}
	if samePath(common, filepath.Join(dir, ".git")) {
		kept, err := m.unpushed(ctx, common, branch)
		if err != nil || !kept {
			return nil, err
		}
		return &KeptBranch{Branch: branch, Checkout: dir, GitDir: filepath.Join(dir, ".git")}, nil
	}
	common, ok = m.mirrorOf(common)
	if !ok {
		return nil, nil
	}

	unlock, err := m.locks.lock(ctx, common+".lock")
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := m.git(ctx, common, "worktree", "remove", "--force", dir); err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		// Locked, or holding what git will not delete: the directory
		// goes anyway, and prune forgets it.
		if err := removeAll(dir); err != nil {
			return nil, err
		}
	}
	if _, err := m.git(ctx, common, "worktree", "prune"); err != nil {
		return nil, err
	}
	if branch == "" {
		return nil, nil
	}
	kept, err := m.unpushed(ctx, common, branch)
	if err != nil || kept {
		if kept {
			return &KeptBranch{Branch: branch, Checkout: dir, GitDir: common}, nil
		}
		return nil, err
	}
	if _, ok, err := m.gitQuery(ctx, common, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch); err != nil || !ok {
		return nil, err // an orphan branch without commits has no ref
	}
	_, err = m.git(ctx, common, "branch", "--quiet", "-D", "--", branch)
	return nil, err
}

// unpushed reports whether branch has commits that no remote-tracking
// branch of gitDir has. A push from a checkout updates those, so no fetch
// is needed to see it.
func (m *Manager) unpushed(ctx context.Context, gitDir, branch string) (bool, error) {
	if branch == "" {
		return false, nil
	}
	tip, ok, err := m.gitQuery(ctx, gitDir, "rev-parse", "--verify", "--quiet", "refs/heads/"+branch+"^{commit}")
	if err != nil || !ok {
		return false, err
	}
	out, err := m.git(ctx, gitDir, "rev-list", "--max-count=1", tip, "--not", "--remotes")
	return out != "", err
}

// mirrorOf is gitDir as Ensure names it, when it is a mirror under the
// root (so that both take one lock by one name).
func (m *Manager) mirrorOf(gitDir string) (string, bool) {
	mirrors, err := filepath.EvalSymlinks(m.mirrorsDir())
	if err != nil {
		return "", false
	}
	g, err := filepath.EvalSymlinks(gitDir)
	if err != nil {
		return "", false
	}
	rel, err := filepath.Rel(mirrors, g)
	if err != nil || !strings.HasSuffix(rel, ".git") || len(strings.Split(rel, string(filepath.Separator))) != 3 || strings.HasPrefix(rel, "..") {
		return "", false
	}
	return filepath.Join(m.mirrorsDir(), rel), true
}

// removeExcept removes dir and everything in it but the checkouts in keep
// (and the directories on their way).
func removeExcept(dir string, keep map[string]bool) error {
	if len(keep) == 0 {
		return removeAll(dir)
	}
	owners, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, o := range owners {
		od := filepath.Join(dir, o.Name())
		if !o.IsDir() {
			if err := removeAll(od); err != nil {
				return err
			}
			continue
		}
		repos, err := os.ReadDir(od)
		if err != nil {
			return err
		}
		left := 0
		for _, r := range repos {
			rd := filepath.Join(od, r.Name())
			if keep[rd] {
				left++
				continue
			}
			if err := removeAll(rd); err != nil {
				return err
			}
		}
		if left == 0 {
			if err := os.Remove(od); err != nil {
				return err
			}
		}
	}
	return nil
}
