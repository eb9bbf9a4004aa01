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

func workflowRunJSON(pad int) []byte {
	return mustJSON(map[string]any{
		"action": "completed",
		"workflow_run": map[string]any{"id": 7, "name": "CI", "status": "completed", "conclusion": "failure",
			"head_branch": "claude/github-issue-15-zkh", "pull_requests": []any{map[string]any{"number": 21}},
			"html_url": "https://github.com/octo/repo/actions/runs/7", "logs": string(make([]byte, 0)) + pad0(pad)},
		"repository": repoJSON(""),
		"sender":     map[string]any{"login": "github-actions[bot]"},
	})
}

func pad0(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = 'x'
	}
	return string(b)
}
