package ghfake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// The webhook deliveries GitHub sends for the fake's state, so a test or the
// demo can play GitHub's side: a person's comment, a labelled issue, or the
// echo of what the ledger-writer wrote. The payloads carry the fields
// ingress-github reads, in the shapes of the shared testdata deliveries.

// CommentWebhook is the issue_comment "created" delivery for c.
func (s *Server) CommentWebhook(c Comment) []byte {
	is, _ := s.Issue(c.Repo, c.IssueNumber)
	b, _ := json.Marshal(map[string]any{
		"action": "created",
		"issue":  hookIssue(is),
		"comment": map[string]any{"id": c.ID, "node_id": c.NodeID, "html_url": c.HTMLURL, "body": c.Body,
			"user": map[string]any{"login": c.Login}, "author_association": c.AuthorAssociation,
			"created_at": c.CreatedAt.UTC().Format(time.RFC3339), "updated_at": c.UpdatedAt.UTC().Format(time.RFC3339)},
		"repository": hookRepo(c.Repo),
		"sender":     map[string]any{"login": c.Login},
	})
	return b
}

// IssueWebhook is an issues delivery for is: action "opened", or
// "labeled" with the label that was added.
func (s *Server) IssueWebhook(action string, is Issue, sender, label string) []byte {
	p := map[string]any{"action": action, "issue": hookIssue(is), "repository": hookRepo(is.Repo),
		"sender": map[string]any{"login": sender}}
	if label != "" {
		p["label"] = map[string]any{"name": label}
	}
	b, _ := json.Marshal(p)
	return b
}

// SignWebhook is the X-Hub-Signature-256 header value of body.
func SignWebhook(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func hookRepo(full string) map[string]any {
	owner, name, _ := strings.Cut(full, "/")
	return map[string]any{"id": 1, "name": name, "full_name": full, "html_url": "https://github.com/" + full,
		"owner": map[string]any{"login": owner}}
}

func hookIssue(is Issue) map[string]any {
	labels := []any{}
	for _, l := range is.Labels {
		labels = append(labels, map[string]any{"name": l})
	}
	return map[string]any{"id": is.ID, "number": is.Number, "title": is.Title, "body": is.Body, "state": is.State,
		"html_url": is.HTMLURL, "user": map[string]any{"login": is.Login}, "labels": labels}
}
