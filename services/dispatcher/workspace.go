package dispatcher

import (
	"context"
	"log/slog"
	"strings"

	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
)

// Each work item's session works in a workspace of its own (package
// internal/workspace, docs/agents.md): a checkout of each repository the
// work item touches, made when its session spawns, extended when an event
// from another repository reaches it, reused on respawn and resume, and
// removed when the session is cleaned up or the work item closes. The
// artifacts live in docs/specs/issue-N/ of the work item's own checkout.

// ensureWorkspace makes (or finds) in's work item's workspace, with a
// checkout of the repository in's event came from when it is not the work
// item's own, and of the pull request's branch for a pull request's own
// session.
func (s *Service) ensureWorkspace(ctx context.Context, in *input) (*workspace.Workspace, error) {
	m, err := s.workspace()
	if err != nil {
		return nil, err
	}
	item := workspace.Item{Ref: in.ref}
	if in.prFor != "" && in.prHead != "" {
		item.Branch = in.prHead
	}
	if r, ok := s.otherRepo(in); ok {
		item.Repos = []workspace.Repo{r}
	}
	ws, err := m.Ensure(ctx, item)
	if err != nil {
		return nil, err
	}
	return ws, nil
}

// otherRepo is the repository in's event came from when it is not the
// work item's own (a pull request in another repository that delivers it).
func (s *Service) otherRepo(in *input) (workspace.Repo, bool) {
	if in.repository == "" || strings.EqualFold(in.repository, repoOf(in.ref)) {
		return workspace.Repo{}, false
	}
	own, _, err := workspace.ParseRef(in.ref)
	if err != nil {
		return workspace.Repo{}, false
	}
	owner, name, ok := strings.Cut(in.repository, "/")
	if !ok {
		return workspace.Repo{}, false
	}
	return workspace.Repo{Host: own.Host, Owner: owner, Name: name}, true
}

// extendWorkspace adds a checkout of the repository in's event came from
// to a live session's workspace, best effort: the event is delivered
// either way, and the session can clone what it needs.
func (s *Service) extendWorkspace(ctx context.Context, in *input) {
	if _, ok := s.otherRepo(in); !ok {
		return
	}
	if _, err := s.ensureWorkspace(ctx, in); err != nil {
		s.deps.Log.Warn("dispatcher: no checkout of the event's repository in the work item's workspace",
			"work_item", in.ref, "repository", in.repository, "err", err)
	}
}

// removeWorkspace removes in's work item's checkouts, keeping any branch
// with work pushed nowhere (and saying so). Best effort: a workspace that
// stays is reported and removed by the next cleanup.
func (s *Service) removeWorkspace(ctx context.Context, in *input) {
	m, err := s.workspace()
	if err != nil {
		return
	}
	r, err := m.Remove(ctx, in.ref)
	if err != nil {
		s.deps.Log.Warn("dispatcher: the work item's workspace was not removed", "work_item", in.ref, "err", err)
		return
	}
	var kept []string
	for _, b := range r.KeptBranches {
		kept = append(kept, b.Branch)
	}
	s.deps.Events.Emit(ctx, "session.workspace_removed", slog.String("work_item", in.ref),
		slog.Bool("kept", r.Kept), slog.Any("kept_branches", kept))
}

// WorkspaceConfig is Settings.Workspace, for hosts and tests outside the
// dispatcher.
type WorkspaceConfig = workspace.Config

// Workspace strategies (LOOP_WORKSPACE_STRATEGY).
const (
	WorkspaceWorktree = workspace.Worktree
	WorkspaceClone    = workspace.Clone
	WorkspaceDir      = workspace.Dir
)
