package ghfake

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-github/v62/github"
	"github.com/the-loop/bus/internal/testsupport/testkit"
)

// examplesDir is the shared GitHub REST examples, or skips: the shared
// workspace is not part of a clone.
func examplesDir(t *testing.T) string {
	t.Helper()
	return testkit.SharedTestdata(t, "github-rest", "examples")
}

func keysOf(t *testing.T, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, raw)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func exampleKeys(t *testing.T, dir, file string, drop ...string) []string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	var list []json.RawMessage
	if json.Unmarshal(raw, &list) == nil && len(list) > 0 {
		raw = list[0]
	}
	return slices.DeleteFunc(keysOf(t, raw), func(k string) bool { return slices.Contains(drop, k) })
}

// TestResponseFieldsMatchExamples checks that the fake's bodies have the
// top-level fields of GitHub's own examples (and of their users), so that a
// client written against GitHub finds what it reads.
func TestResponseFieldsMatchExamples(t *testing.T) {
	t.Parallel()
	dir := examplesDir(t)
	_, gh := start(t)
	ctx := t.Context()

	raw := func(method, path string, body any) []byte {
		t.Helper()
		req, err := gh.NewRequest(method, path, body)
		if err != nil {
			t.Fatal(err)
		}
		var out json.RawMessage
		if _, err := gh.Do(ctx, req, &out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return out
	}
	issue := raw(http.MethodPost, "repos/octo/repo/issues", &github.IssueRequest{Title: github.String("t"), Labels: &[]string{"bug"}})
	comment := raw(http.MethodPost, "repos/octo/repo/issues/1/comments", &github.IssueComment{Body: github.String("b")})
	var list []json.RawMessage
	if err := json.Unmarshal(raw(http.MethodGet, "repos/octo/repo/issues/1/comments", nil), &list); err != nil || len(list) != 1 {
		t.Fatalf("list: %v, %d items", err, len(list))
	}
	reaction := raw(http.MethodPost, "repos/octo/repo/issues/1/reactions", map[string]string{"content": "heart"})
	rateLimit := raw(http.MethodGet, "rate_limit", nil)
	me := raw(http.MethodGet, "user", nil)

	var issueObj struct {
		User   json.RawMessage   `json:"user"`
		Labels []json.RawMessage `json:"labels"`
	}
	if err := json.Unmarshal(issue, &issueObj); err != nil || len(issueObj.Labels) != 1 {
		t.Fatalf("issue: %v", err)
	}
	var rl struct {
		Resources json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(rateLimit, &rl); err != nil {
		t.Fatal(err)
	}
	var exRL struct {
		Resources json.RawMessage `json:"resources"`
	}
	exRaw, err := os.ReadFile(filepath.Join(dir, "rate-limit-overview.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(exRaw, &exRL); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		want []string
		got  []byte
	}{
		// pull_request is only sent for pull requests; the example is one.
		{"issue", exampleKeys(t, dir, "issue.json", "pull_request"), issue},
		{"issue user", keysOf(t, mustField(t, dir, "issue.json", "user")), issueObj.User},
		{"issue label", keysOf(t, mustLabel(t, dir)), issueObj.Labels[0]},
		{"comment", exampleKeys(t, dir, "issue-comment.json"), comment},
		// The list example predates "pin"; GitHub sends the same shape in
		// both.
		{"comment in a list", exampleKeys(t, dir, "issue-comment.json"), list[0]},
		{"reaction", exampleKeys(t, dir, "reaction.json"), reaction},
		{"rate_limit", exampleKeys(t, dir, "rate-limit-overview.json"), rateLimit},
		{"rate_limit resources", keysOf(t, exRL.Resources), rl.Resources},
		{"authenticated user (simple-user fields)", keysOf(t, mustField(t, dir, "issue.json", "user")), me},
	} {
		if diff := cmp.Diff(tc.want, keysOf(t, tc.got)); diff != "" {
			t.Errorf("%s: top-level keys (-example +fake):\n%s", tc.name, diff)
		}
	}
	// The items example's fields are all there too.
	for _, k := range exampleKeys(t, dir, "issue-comment-items.json") {
		if !slices.Contains(keysOf(t, list[0]), k) {
			t.Errorf("comment in a list lacks %q of issue-comment-items.json", k)
		}
	}
}

func mustField(t *testing.T, dir, file, field string) json.RawMessage {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m[field] == nil {
		t.Fatalf("%s has no %q: %v", file, field, err)
	}
	return m[field]
}

func mustLabel(t *testing.T, dir string) json.RawMessage {
	t.Helper()
	var labels []json.RawMessage
	if err := json.Unmarshal(mustField(t, dir, "issue.json", "labels"), &labels); err != nil || len(labels) == 0 {
		t.Fatalf("issue.json labels: %v", err)
	}
	return labels[0]
}
