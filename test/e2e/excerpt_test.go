//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
)

// maxEventPayload is the largest payload ingress-github carries in an event
// (600 KiB, decision 012); a larger one travels as a summary.
const maxEventPayload = 600 << 10

// excerptCase is one delivery the session must be shown: a shared example
// of event, fitted to this world by fit.
type excerptCase struct {
	name, event, file string
	fit               func(p map[string]any, number int)
}

// excerptCases are one delivery of every event type the loop passes to a
// session (ingress-github's default event set): conversation, inline and
// review comments (comment.human, whose excerpt the dispatcher rebuilds from
// the event), a review without a body, lifecycle and CI activity (the
// payload itself), and an activity too large for one message (its summary
// travels; the whole payload waits in the object store).
var excerptCases = []excerptCase{
	{"conversation comment", "issue_comment", "issue_comment/created.json", func(p map[string]any, n int) {
		set(p, n, "issue", "number")
		set(p, alice, "comment", "user", "login")
		set(p, "MEMBER", "comment", "author_association")
	}},
	{"inline review comment", "pull_request_review_comment", "pull_request_review_comment/created.json", func(p map[string]any, n int) {
		set(p, n, "pull_request", "number")
		set(p, alice, "comment", "user", "login")
		set(p, "MEMBER", "comment", "author_association")
	}},
	{"review with a body", "pull_request_review", "pull_request_review/submitted.json", func(p map[string]any, n int) {
		set(p, n, "pull_request", "number")
		set(p, alice, "review", "user", "login")
		set(p, "CHANGES_REQUESTED", "review", "state")
		set(p, "Please split this change in two: the rename first.", "review", "body")
	}},
	{"review without a body", "pull_request_review", "pull_request_review/submitted.json", func(p map[string]any, n int) {
		set(p, n, "pull_request", "number")
		set(p, alice, "review", "user", "login")
	}},
	{"issue labeled", "issues", "issues/labeled.json", func(p map[string]any, n int) {
		set(p, n, "issue", "number")
	}},
	{"pull request opened", "pull_request", "pull_request/opened.json", func(p map[string]any, n int) {
		set(p, n, "pull_request", "number")
	}},
	{"workflow run", "workflow_run", "workflow_run/completed.json", func(p map[string]any, n int) {
		set(p, fmt.Sprintf("issue-%d", n), "workflow_run", "head_branch")
	}},
	{"check run", "check_run", "check_run/completed.json", func(p map[string]any, n int) {
		setPullRequests(p, n, "check_run", "check_suite")
	}},
	{"check suite", "check_suite", "check_suite/completed.json", func(p map[string]any, n int) {
		setPullRequests(p, n, "check_suite")
	}},
	{"commit status", "status", "status/payload.json", func(p map[string]any, n int) {
		branches, _ := p["branches"].([]any)
		if len(branches) > 0 {
			branches[0].(map[string]any)["name"] = fmt.Sprintf("issue-%d", n)
		}
	}},
	{"oversized check run", "check_run", "check_run/created.json", func(p map[string]any, n int) {
		setPullRequests(p, n, "check_run", "check_suite")
		// A check run's output text is not in the excerpt; its title and
		// summary are, and the summary carried on the bus has neither.
		set(p, strings.Repeat("lint: line too long\n", 2*maxEventPayload/20), "check_run", "output", "text")
		set(p, "Oversized run", "check_run", "output", "title")
		set(p, "Two findings; the whole log is in the text.", "check_run", "output", "summary")
	}},
}

// set puts v at the path of keys in p, creating objects on the way.
func set(p map[string]any, v any, keys ...string) {
	for _, k := range keys[:len(keys)-1] {
		next, ok := p[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			p[k] = next
		}
		p = next
	}
	p[keys[len(keys)-1]] = v
}

// setPullRequests points the pull_requests of the CI object at path to work
// item n.
func setPullRequests(p map[string]any, n int, path ...string) {
	o := p
	for _, k := range path {
		o, _ = o[k].(map[string]any)
	}
	prs, _ := o["pull_requests"].([]any)
	for _, pr := range prs {
		pr.(map[string]any)["number"] = n
	}
}

// fitPayload is a shared delivery rewritten for this world: the repository
// is ours, the sender alice (authorized; a CI event is admitted for her),
// and fit points it at work item number. Numbers keep their spelling.
func fitPayload(t *testing.T, dir string, c excerptCase, number int) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(c.file)))
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var p map[string]any
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("%s: %v", c.file, err)
	}
	set(p, repoName, "repository", "full_name")
	set(p, "https://github.com/"+repoName, "repository", "html_url")
	set(p, alice, "sender", "login")
	c.fit(p, number)
	out, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// excerptOf is `the-loop excerpt --event event` of payload, without the
// line break it prints after it.
func excerptOf(t *testing.T, loop, event string, payload []byte) string {
	t.Helper()
	cmd := exec.Command(loop, "excerpt", "--event", event)
	cmd.Env = baseEnv()
	cmd.Stdin = bytes.NewReader(payload)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the-loop excerpt --event %s: %v\n%s", event, err, stderr.String())
	}
	return strings.TrimSuffix(string(out), "\n")
}

// sendWebhook delivers payload as event, signed, until ingress-github takes
// it.
func (c *cluster) sendWebhook(ctx context.Context, event, delivery string, payload []byte) error {
	return c.deliver(ctx, event+" "+delivery, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.webhook, bytes.NewReader(payload))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", delivery)
		req.Header.Set("X-Hub-Signature-256", ghfake.SignWebhook(webhookSecret, payload))
		return req, nil
	}, http.StatusAccepted)
}

// TestSessionSeesTheExcerpt sends one delivery of every event type the loop
// passes to sessions — GitHub's own examples, fitted to this world — through
// the running system (separate processes, a real tmux session, the stand-in
// agent) and checks that what the session was typed contains exactly what
// `the-loop excerpt --event E` prints for that delivery: an inline comment
// with its anchor, a review with its state, and an oversized payload whole,
// read back from the object store.
func TestSessionSeesTheExcerpt(t *testing.T) {
	dir := testkit.SharedTestdata(t, "github-webhooks")
	c := startCluster(t, clusterOptions{replicas: 1})
	c.addIssues(1)
	number := c.issues[0]
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var started []sentEvent
	c.startWorkItems(ctx, &started)

	loop, _ := binaries(t)
	want := map[string]string{} // case → excerpt
	seen := map[string]string{} // excerpt → case
	for i, ec := range excerptCases {
		payload := fitPayload(t, dir, ec, number)
		ex := excerptOf(t, loop, ec.event, payload)
		if ex == "{}" {
			t.Fatalf("%s: the fitted delivery has an empty excerpt", ec.name)
		}
		if other, dup := seen[ex]; dup {
			t.Fatalf("%s and %s have the same excerpt: the check could not tell them apart", ec.name, other)
		}
		if ec.name == "oversized check run" && len(payload) <= maxEventPayload {
			t.Fatalf("the oversized delivery is only %d bytes", len(payload))
		}
		want[ec.name], seen[ex] = ex, ec.name
		if err := c.sendWebhook(ctx, ec.event, deliveryID(0xe8c, i), payload); err != nil {
			t.Fatal(err)
		}
	}

	missing := func() []string {
		var typed []string
		for _, in := range tmuxtest.Inputs(t, c.standIn) {
			typed = append(typed, in.Text)
		}
		var out []string
		for _, ec := range excerptCases {
			found := false
			for _, text := range typed {
				if strings.Contains(text, want[ec.name]) {
					found = true
					break
				}
			}
			if !found {
				out = append(out, ec.name)
			}
		}
		return out
	}
	if !testkit.Poll(2*time.Minute, func() bool { return len(missing()) == 0 }) {
		var typed strings.Builder
		for _, in := range tmuxtest.Inputs(t, c.standIn) {
			fmt.Fprintf(&typed, "----\n%s\n", in.Text)
		}
		for _, name := range missing() {
			t.Errorf("%s: no prompt carries its excerpt:\n%s", name, want[name])
		}
		t.Logf("the session was typed:\n%s", typed.String())
	}
	c.stop()
}
