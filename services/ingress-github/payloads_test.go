package ingressgithub

import (
	"encoding/json"
	"fmt"
)

// Small payloads of our own, shaped like GitHub's (the shared examples are
// not in the repository).

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func repoJSON(host string) map[string]any {
	if host == "" {
		host = "github.com"
	}
	return map[string]any{"id": 1, "full_name": "octo/repo", "html_url": "https://" + host + "/octo/repo"}
}

// issueCommentJSON is an issue_comment delivery on issue 15 of octo/repo.
func issueCommentJSON(action string, id int64, login, assoc, body string) []byte {
	return mustJSON(map[string]any{
		"action": action,
		"issue": map[string]any{"number": 15, "title": "A work item", "html_url": "https://github.com/octo/repo/issues/15",
			"state": "open", "user": map[string]any{"login": "alice"}, "labels": []any{}},
		"comment": map[string]any{"id": id, "html_url": fmt.Sprintf("https://github.com/octo/repo/issues/15#issuecomment-%d", id),
			"body": body, "user": map[string]any{"login": login}, "author_association": assoc,
			"created_at": "2026-05-01T10:00:00Z", "updated_at": "2026-05-01T10:00:00Z"},
		"repository": repoJSON(""),
		"sender":     map[string]any{"login": login},
	})
}

func issuesJSON(action, sender string, host string) []byte {
	p := map[string]any{
		"action": action,
		"issue": map[string]any{"number": 15, "title": "A work item", "html_url": "https://" + host + "/octo/repo/issues/15",
			"state": "open", "labels": []any{map[string]any{"name": "the-loop: auto-execute"}}},
		"repository": repoJSON(host),
		"sender":     map[string]any{"login": sender},
	}
	if action == "labeled" {
		p["label"] = map[string]any{"name": "the-loop: auto-execute"}
	}
	return mustJSON(p)
}

func pullRequestJSON(action, sender, body, head string) []byte {
	return mustJSON(map[string]any{
		"action": action,
		"number": 21,
		"pull_request": map[string]any{"number": 21, "title": "A change", "html_url": "https://github.com/octo/repo/pull/21",
			"state": "open", "body": body, "head": map[string]any{"ref": head}, "merged": false},
		"repository": repoJSON(""),
		"sender":     map[string]any{"login": sender},
	})
}

func reviewJSON(id int64, login, state, body string) []byte {
	return mustJSON(map[string]any{
		"action": "submitted",
		"review": map[string]any{"id": id, "state": state, "body": body, "html_url": "https://github.com/octo/repo/pull/21#pullrequestreview-1",
			"user": map[string]any{"login": login}, "author_association": "MEMBER", "submitted_at": "2026-05-01T11:00:00Z"},
		"pull_request": map[string]any{"number": 21, "html_url": "https://github.com/octo/repo/pull/21", "body": "", "head": map[string]any{"ref": "main"}},
		"repository":   repoJSON(""),
		"sender":       map[string]any{"login": login},
	})
}

// workflowRunJSON is a workflow run of octo/repo's own branch for PR 21,
// triggered by a sender nobody authorized.
func workflowRunJSON(pad int) []byte {
	return mustJSON(map[string]any{
		"action": "completed",
		"workflow_run": map[string]any{"id": 7, "name": "CI", "status": "completed", "conclusion": "failure",
			"head_branch": "claude/github-issue-15-zkh", "pull_requests": []any{prEntry(21, "claude/github-issue-15-zkh", ownRepo)},
			"head_repository": repoJSON(""),
			"html_url":        "https://github.com/octo/repo/actions/runs/7", "logs": string(make([]byte, 0)) + pad0(pad)},
		"repository": repoJSON(""),
		"sender":     map[string]any{"login": "github-actions[bot]"},
	})
}

// Repositories of CI payloads: octo/repo itself (id 1, as repoJSON), and a
// fork of it.
var (
	ownRepo  = map[string]any{"id": 1, "url": "https://api.github.com/repos/octo/repo", "name": "repo"}
	forkRepo = map[string]any{"id": 666, "url": "https://api.github.com/repos/mallory/repo", "name": "repo"}
)

// prEntry is a pull_requests entry of a CI payload: PR number of octo/repo
// with its head branch in head (ownRepo or forkRepo, nil: not said).
func prEntry(number int, branch string, head map[string]any) map[string]any {
	h := map[string]any{"ref": branch, "sha": "abc123"}
	if head != nil {
		h["repo"] = head
	}
	return map[string]any{"id": 9000 + number, "number": number, "url": fmt.Sprintf("https://api.github.com/repos/octo/repo/pulls/%d", number),
		"head": h, "base": map[string]any{"ref": "main", "sha": "def456", "repo": ownRepo}}
}

// ciCase shapes a CI delivery: who sent it, the head branch, where that
// branch lives (headRepo: ownRepo, forkRepo or nil for not said) and the
// PR entries.
type ciCase struct {
	sender   string
	branch   string
	headRepo map[string]any
	prs      []any
}

// ciJSON is a delivery of event (workflow_run, check_suite or check_run)
// of octo/repo shaped by c.
func ciJSON(event string, c ciCase) []byte {
	prs := c.prs
	if prs == nil {
		prs = []any{}
	}
	suite := map[string]any{"id": 31, "head_branch": c.branch, "head_sha": "abc123", "status": "completed",
		"conclusion": "failure", "pull_requests": prs}
	p := map[string]any{"action": "completed", "repository": repoJSON(""), "sender": map[string]any{"login": c.sender}}
	switch event {
	case "workflow_run":
		run := map[string]any{"id": 7, "name": "CI", "status": "completed", "conclusion": "failure", "event": "pull_request",
			"head_branch": c.branch, "head_sha": "abc123", "pull_requests": prs,
			"html_url": "https://github.com/octo/repo/actions/runs/7"}
		if c.headRepo != nil {
			full := "octo/repo"
			if c.headRepo["id"] != ownRepo["id"] {
				full = "mallory/repo"
			}
			run["head_repository"] = map[string]any{"id": c.headRepo["id"], "full_name": full, "url": c.headRepo["url"]}
		}
		p["workflow_run"] = run
	case "check_suite":
		p["check_suite"] = suite
	case "check_run":
		p["check_run"] = map[string]any{"id": 41, "name": "build", "status": "completed", "conclusion": "failure",
			"head_sha": "abc123", "check_suite": suite, "pull_requests": prs,
			"html_url": "https://github.com/octo/repo/runs/41"}
	}
	return mustJSON(p)
}

// statusJSON is a status event of octo/repo on a commit of the given
// branches, for the repository named name.
func statusJSON(sender, name string, branches ...string) []byte {
	var bs []any
	for _, b := range branches {
		bs = append(bs, map[string]any{"name": b, "commit": map[string]any{"sha": "abc123"}, "protected": false})
	}
	if bs == nil {
		bs = []any{}
	}
	return mustJSON(map[string]any{"id": 51, "sha": "abc123", "name": name, "context": "ci/build", "state": "failure",
		"description": "build failed", "target_url": "https://ci.example/51", "branches": bs,
		"repository": repoJSON(""), "sender": map[string]any{"login": sender}})
}

func pad0(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}
