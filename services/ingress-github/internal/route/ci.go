package route

import "strings"

// CI events carry no actor (Actor): they instruct nothing. They still reach
// a live session as its next prompt, and their text — branch, workflow,
// check and commit names — is written by whoever pushed the branch, a fork
// included. So a CI event is published only when its sender is authorized,
// or when it is shown to be about the repository's own branches; anything
// else is dropped as DropForkCI (decision 036).
var ciEvents = map[string]bool{"workflow_run": true, "check_run": true, "check_suite": true, "status": true}

// Why a CI event was admitted (Decision.Admitted).
const (
	// AdmitAuthorizedSender: the sender is in routing.authorizedUsers.
	AdmitAuthorizedSender = "authorized-sender"
	// AdmitOwnBranch: the event is about the repository's own branches.
	AdmitOwnBranch = "own-branch"
)

// admitCI says why a CI event may reach a session, or "" when it may not.
func admitCI(event string, p obj, pol Policy, sender string) string {
	if resolve(pol.Directory, sender) != nil {
		return AdmitAuthorizedSender
	}
	if ownBranches(event, p) {
		return AdmitOwnBranch
	}
	return ""
}

// ownBranches reports whether a CI event is shown to be about branches of
// the repository that received it. Anything unknown counts as a fork:
//
//   - workflow_run: head_repository is the repository itself, and so is
//     every pull_requests entry's head and base.
//   - check_suite, check_run: every pull_requests entry's head and base
//     (the suite's, and the run's own) is the repository itself. Their
//     head_branch needs no check: GitHub leaves it null, and pull_requests
//     empty, when the branch is a fork's.
//   - status: the commit's repository (name) is the repository itself. Its
//     branches, which the work item is read from, are that repository's
//     branches holding the commit; a fork's commit is on none of them.
func ownBranches(event string, p obj) bool {
	repo := p.obj("repository")
	switch event {
	case "workflow_run":
		run := p.obj("workflow_run")
		return sameRepo(run.obj("head_repository"), repo) && ownPullRequests(repo, run.objs("pull_requests"))
	case "check_suite":
		return ownPullRequests(repo, p.obj("check_suite").objs("pull_requests"))
	case "check_run":
		run := p.obj("check_run")
		return ownPullRequests(repo, run.objs("pull_requests")) && ownPullRequests(repo, run.obj("check_suite").objs("pull_requests"))
	case "status":
		name := p.str("name")
		return name != "" && strings.EqualFold(name, repo.str("full_name"))
	}
	return false
}

// ownPullRequests: every entry's head and base repository is repo.
func ownPullRequests(repo obj, prs []obj) bool {
	for _, pr := range prs {
		head, base := pr.obj("head").obj("repo"), pr.obj("base").obj("repo")
		if !sameRepo(head, base) || !sameRepo(base, repo) {
			return false
		}
	}
	return true
}

// sameRepo compares two repository objects by id, else by API URL, else by
// full name; with nothing to compare they are not the same.
func sameRepo(a, b obj) bool {
	if a == nil || b == nil {
		return false
	}
	ia, okA := a.int("id")
	ib, okB := b.int("id")
	if okA && okB {
		return ia == ib
	}
	for _, key := range []string{"url", "full_name"} {
		if x, y := a.str(key), b.str(key); x != "" && y != "" {
			return strings.EqualFold(x, y)
		}
	}
	return false
}
