package dispatcher

import (
	"context"
	"log/slog"
	"strings"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/links"
	"github.com/the-loop/bus/pkg/sessions"
)

// A pull request's own session (routing.tmux.sessionPerPr, docs/agents.md):
// by default a pull request's events reach the sessions of the work items
// it delivers. With sessionPerPr, a pull request that delivers a work item
// with a live session gets a session of its own, which works its reviews,
// comments and checks; the work item's session is told only that it was
// opened. Each copy of a delivery is handled on its own ref's partition, so
// the pull request's session lives where its events are consumed.

// prSessions is routing.tmux.sessionPerPr in force: which pull requests
// get their own sessions.
func (s *Service) prSessions() config.PRSessions {
	if s.set.SessionPerPR {
		return config.PRSessionsAlways
	}
	if cfg := s.deps.Config(); cfg != nil {
		return cfg.Routing.SessionPerPR
	}
	return config.PRSessionsNever
}

// ownSession reports whether, under mode, a pull request in repository
// prRepo that delivers work item item gets a session of its own: always,
// or for cross-repository only when it is in another repository than the
// work item's (a pull request in the work item's own repository is its own
// delivery, on its branch and in its checkout).
func ownSession(mode config.PRSessions, prRepo, item string) bool {
	switch mode {
	case config.PRSessionsAlways:
		return true
	case config.PRSessionsCrossRepository:
		return !strings.EqualFold(prRepo, repoOf(item))
	}
	return false
}

// isPRCopy reports whether in is the pull request's own copy of its event
// (its ref is the pull request), rather than a work item's.
func (in *input) isPRCopy() bool {
	return in.pr > 0 && numberOf(in.ref) == in.pr && strings.EqualFold(repoOf(in.ref), in.repository)
}

// prRoute applies sessionPerPr to in. handled: the event was settled here
// (dropped, or spawned the pull request's session); otherwise it goes on
// its ordinary way.
func (s *Service) prRoute(ctx context.Context, store *sessions.Store, in *input, rec sessions.Record) (bool, error) {
	mode := s.prSessions()
	if mode == config.PRSessionsNever || mode == "" || in.pr == 0 || in.closing {
		return false, nil
	}
	if !in.isPRCopy() {
		if !ownSession(mode, in.repository, in.ref) {
			return false, nil
		}
		// The work item's copy: told that its pull request was opened,
		// nothing else.
		if in.ghEvent == "pull_request" && (in.action == "opened" || in.action == "reopened") {
			return false, nil
		}
		s.records.drop(ctx, in, DropPROwnSession, slog.Int64("pull_request", in.pr))
		return true, nil
	}
	if rec.Session.Live() {
		return false, nil
	}
	item := s.deliveredItem(ctx, store, in, mode)
	if item == "" {
		return false, nil
	}
	in.prFor = item
	return true, s.spawn(ctx, store, in, "")
}

// deliveredItem is a work item with a live session that the pull request
// of in delivers, by GitHub's own links or a session's, "" when none.
func (s *Service) deliveredItem(ctx context.Context, store *sessions.Store, in *input, mode config.PRSessions) string {
	items := in.workItems
	if ls, err := links.Open(ctx, s.deps.Conn); err == nil {
		if linked, err := ls.WorkItems(ctx, in.ref); err == nil {
			items = append(linked, items...)
		}
	}
	for _, it := range items {
		if it == in.ref || !ownSession(mode, in.repository, it) {
			continue
		}
		if r, _, err := store.Get(ctx, it); err == nil && r.Session.Live() {
			return it
		}
	}
	return ""
}
