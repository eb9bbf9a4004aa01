package ingressgithub

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// ciFile is one of our own CI deliveries in testdata/ci; sender, if set,
// replaces the one it was written with.
func ciFile(t *testing.T, name, sender string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "ci", name))
	if err != nil {
		t.Fatal(err)
	}
	if sender == "" {
		return b
	}
	var p map[string]any
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	p["sender"] = map[string]any{"login": sender}
	return mustJSON(p)
}

const ref21 = "github:octo/repo#21"

// TestCIEventsAuthorized (attack 8): a CI event reaches the bus only when
// its sender is authorized or it is about the repository's own branch. A
// fork's run, suite or check from anyone else — or one whose head
// repository cannot be established — is dropped as fork-ci. Every CI
// event was published whatever its sender, a fork's included.
func TestCIEventsAuthorized(t *testing.T) {
	e := newEnv(t)
	activity := func(refs ...string) []wantEvent {
		var out []wantEvent
		for _, r := range refs {
			out = append(out, wantEvent{"work-item.activity", r, ""})
		}
		return out
	}
	fork := func(event string, c ciCase) []byte {
		c.sender, c.branch, c.headRepo = "mallory", "issue-15", forkRepo
		return ciJSON(event, c)
	}
	runCases(t, e, []caseT{
		// A fork's deliveries from a stranger.
		{name: "fork workflow_run", event: "workflow_run", body: ciFile(t, "workflow_run-fork.json", ""), status: 200, drop: route.DropForkCI},
		{name: "fork check_suite", event: "check_suite", body: ciFile(t, "check_suite-fork.json", ""), status: 200, drop: route.DropForkCI},
		{name: "fork check_run", event: "check_run", body: ciFile(t, "check_run-fork.json", ""), status: 200, drop: route.DropForkCI},
		{name: "fork workflow_run, branch only", event: "workflow_run", body: fork("workflow_run", ciCase{}), status: 200, drop: route.DropForkCI},
		{name: "workflow_run without a head repository", event: "workflow_run",
			body: ciJSON("workflow_run", ciCase{sender: "mallory", branch: "issue-15"}), status: 200, drop: route.DropForkCI},
		{name: "own head repository, a PR entry from a fork", event: "workflow_run",
			body:   ciJSON("workflow_run", ciCase{sender: "mallory", branch: "issue-15", headRepo: ownRepo, prs: []any{prEntry(21, "issue-15", forkRepo)}}),
			status: 200, drop: route.DropForkCI},
		{name: "a PR entry whose head repository is not said", event: "check_suite",
			body: ciJSON("check_suite", ciCase{sender: "mallory", branch: "issue-15", prs: []any{prEntry(21, "issue-15", nil)}}), status: 200, drop: route.DropForkCI},
		{name: "check_run: only the run lists the fork's PR", event: "check_run",
			body: func() []byte {
				var p map[string]any
				_ = json.Unmarshal(ciJSON("check_run", ciCase{sender: "mallory", branch: "issue-15"}), &p)
				p["check_run"].(map[string]any)["pull_requests"] = []any{prEntry(21, "issue-15", forkRepo)}
				return mustJSON(p)
			}(), status: 200, drop: route.DropForkCI},
		{name: "status for another repository", event: "status", body: ciFile(t, "status-other-repository.json", ""), status: 200, drop: route.DropForkCI},
		{name: "status naming no repository", event: "status", body: statusJSON("mallory", "", "issue-15"), status: 200, drop: route.DropForkCI},

		// The same from the repository's own branch, whoever sent it.
		{name: "own-branch workflow_run", event: "workflow_run", body: ciFile(t, "workflow_run-own-branch.json", ""),
			status: 202, want: activity(ref21, ref15)},
		{name: "own-branch check_suite", event: "check_suite", body: ciFile(t, "check_suite-own-branch.json", ""),
			status: 202, want: activity(ref21, ref15)},
		{name: "own-branch check_run", event: "check_run", body: ciFile(t, "check_run-own-branch.json", ""),
			status: 202, want: activity(ref21, ref15)},
		{name: "own-branch status", event: "status", body: ciFile(t, "status-own-branch.json", ""),
			status: 202, want: activity(ref15)},
		{name: "own branch without a PR", event: "workflow_run",
			body: ciJSON("workflow_run", ciCase{sender: "mallory", branch: "issue-15", headRepo: ownRepo}), status: 202, want: activity(ref15)},

		// A fork's deliveries sent by an authorized person.
		{name: "authorized sender, fork workflow_run", event: "workflow_run", body: ciFile(t, "workflow_run-fork.json", "alice"),
			status: 202, want: activity(ref21, ref15)},
		{name: "authorized sender, fork check_suite", event: "check_suite", body: ciFile(t, "check_suite-fork.json", "alice"),
			status: 202, want: activity(ref21, ref15)},
		{name: "authorized sender, fork check_run", event: "check_run", body: ciFile(t, "check_run-fork.json", "bob"),
			status: 202, want: activity(ref21, ref15)},
		{name: "authorized sender, status for another repository", event: "status", body: ciFile(t, "status-other-repository.json", "alice"),
			status: 202, want: activity(ref15)},
	})
	// The records say who sent it and why it was let in.
	dropped := e.logs.Events("routing.dropped")
	found := false
	for _, r := range dropped {
		if r["reason"] == route.DropForkCI && r["sender"] == "mallory" {
			found = true
		}
	}
	if !found {
		t.Errorf("no routing.dropped fork-ci record naming the sender mallory")
	}
	admitted := map[string]bool{}
	for _, r := range e.logs.Events("routing.routed") {
		if a, ok := r["admitted"].(string); ok {
			admitted[a] = true
		}
	}
	if !admitted[route.AdmitOwnBranch] || !admitted[route.AdmitAuthorizedSender] {
		t.Errorf("routing.routed admissions %v, want both %s and %s", admitted, route.AdmitOwnBranch, route.AdmitAuthorizedSender)
	}
}

// TestCISharedDeliveries: GitHub's own CI deliveries of a repository's own
// branch are admitted from a sender nobody authorized; the same delivery
// with its pull request's head moved to a fork is dropped.
func TestCISharedDeliveries(t *testing.T) {
	root := testkit.SharedTestdata(t, "github-webhooks")
	pol := route.Policy{}
	for _, tc := range []struct {
		file string
		fork func(p map[string]any)
	}{
		{"check_run/completed.json", func(p map[string]any) {
			movePRHeads(p["check_run"].(map[string]any)["check_suite"].(map[string]any))
		}},
		{"check_run/requested_action.json", func(p map[string]any) { movePRHeads(p["check_run"].(map[string]any)) }},
		{"check_suite/rerequested.json", func(p map[string]any) { movePRHeads(p["check_suite"].(map[string]any)) }},
		{"workflow_run/completed.json", func(p map[string]any) {
			p["workflow_run"].(map[string]any)["head_repository"].(map[string]any)["id"] = json.Number("666")
		}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(root, tc.file))
			if err != nil {
				t.Fatal(err)
			}
			event := filepath.Dir(tc.file)
			p := decodeNumbers(t, raw)
			p["sender"] = map[string]any{"login": "mallory"}
			if tc.file == "workflow_run/completed.json" {
				// GitHub's example runs on master; name a work item.
				p["workflow_run"].(map[string]any)["head_branch"] = "issue-15"
			}
			dec := routeJSON(t, event, mustJSON(p), pol)
			if dec.Drop != "" || dec.Admitted != route.AdmitOwnBranch {
				t.Errorf("own branch: drop %q admitted %q, want admitted %s", dec.Drop, dec.Admitted, route.AdmitOwnBranch)
			}
			tc.fork(p)
			if dec := routeJSON(t, event, mustJSON(p), pol); dec.Drop != route.DropForkCI {
				t.Errorf("fork: drop %q, want %s", dec.Drop, route.DropForkCI)
			}
		})
	}
}

// movePRHeads puts the head of every pull_requests entry of o in a fork.
func movePRHeads(o map[string]any) {
	for _, pr := range o["pull_requests"].([]any) {
		head := pr.(map[string]any)["head"].(map[string]any)
		head["repo"] = map[string]any{"id": json.Number("666"), "url": "https://api.github.com/repos/mallory/Hello-World", "name": "Hello-World"}
	}
}

func decodeNumbers(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var p map[string]any
	if err := d.Decode(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

func routeJSON(t *testing.T, event string, payload []byte, pol route.Policy) route.Decision {
	t.Helper()
	p, err := route.Decode(payload)
	if err != nil {
		t.Fatal(err)
	}
	return route.Route(route.Delivery{Event: event, DeliveryID: "d", Payload: payload}, p, pol)
}
