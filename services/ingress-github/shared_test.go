package ingressgithub

import (
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// sharedDeliveries is the shared GitHub webhook examples: not in the
// repository, so tests that need them skip when they are absent.
func sharedDeliveries(t testing.TB) string {
	t.Helper()
	return testkit.SharedTestdata(t, "github-webhooks")
}

// TestSharedDeliveries feeds every example delivery, signed, to the running
// handler on a real bus: none crashes it, each gets 202 (published) or 200
// (ping, or a drop naming its reason), and what it published — every event's
// type, work item and actor — is pinned in testdata/shared-deliveries.golden
// (go test -run TestSharedDeliveries -update rewrites it).
func TestSharedDeliveries(t *testing.T) {
	root := sharedDeliveries(t)
	var files []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".json") {
			files = append(files, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	if len(files) != 283 {
		t.Errorf("found %d example deliveries, want 283", len(files))
	}
	e := newEnv(t)
	var lines []string
	counts := map[string]int{}
	for _, f := range files {
		rel, _ := filepath.Rel(root, f)
		event := filepath.Dir(rel)
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(rel))
		delivery := hex.EncodeToString(sum[:8])
		before := e.stored()
		r := e.post(event, delivery, body, "")
		line := fmt.Sprintf("%s %d", filepath.ToSlash(rel), r.Code)
		switch r.Code {
		case http.StatusAccepted:
			evs := e.waitEvents(r.Events...)
			if got := e.stored() - before; int(got) != len(evs) {
				t.Errorf("%s: stored %d, response lists %d", rel, got, len(evs))
			}
			for _, ev := range evs {
				line += fmt.Sprintf(" %s@%s", ev.GetType(), ev.GetSubject())
				if a := ev.GetActor().GetGithub(); a != "" {
					line += "~" + a
				}
				counts[ev.GetType()]++
				checkInvariants(t, rel, event, delivery, body, ev)
			}
		case http.StatusOK:
			if e.stored() != before {
				t.Errorf("%s: answered %d %q but stored an event", rel, r.Code, r.Status)
			}
			if r.Status == "pong" {
				line += " pong"
			} else {
				line += " dropped:" + r.Reason
				if len(r.Events) > 0 {
					line += " " + strings.Join(r.Events, ",")
				}
				counts["dropped:"+r.Reason]++
			}
		default:
			t.Errorf("%s: status %d %q, want 202 or a 200 drop", rel, r.Code, r.Status)
		}
		lines = append(lines, line)
	}
	got := strings.Join(lines, "\n") + "\n"
	golden := filepath.Join("testdata", "shared-deliveries.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if string(want) != got {
		wl, gl := strings.Split(string(want), "\n"), strings.Split(got, "\n")
		for i := range max(len(wl), len(gl)) {
			var w, g string
			if i < len(wl) {
				w = wl[i]
			}
			if i < len(gl) {
				g = gl[i]
			}
			if w != g {
				t.Errorf("golden line %d:\n  got  %s\n  want %s", i+1, g, w)
			}
		}
	}
	// Spot checks that do not depend on the golden file.
	for _, want := range []string{
		"issue_comment/created.1.json 202 comment.human@github:Codertocat/Hello-World#1~Codertocat",
		// The same comment (same id) in another example is the same event.
		"issue_comment/created.json 200 dropped:duplicate-event gh:issue-comment:492700400",
		"issue_comment/edited.json 200 dropped:" + route.DropCommentChanged,
		"ping/payload.json 200 pong",
		"push/payload.json 200 dropped:" + route.DropDisabledEvent,
		"issues/opened.json 202 work-item.activity@github:Codertocat/Hello-World#1~Codertocat",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q", want)
		}
	}
	t.Logf("outcomes: %v", counts)
}

// checkInvariants: what every published event must satisfy, whatever the
// payload.
func checkInvariants(t *testing.T, rel, event, delivery string, body []byte, ev interface {
	GetId() string
	GetType() string
	GetSubject() string
}) {
	t.Helper()
	if !strings.HasPrefix(ev.GetSubject(), "github:") || !strings.Contains(ev.GetSubject(), "#") {
		t.Errorf("%s: subject %q is not a work-item ref", rel, ev.GetSubject())
	}
	switch ev.GetType() {
	case "work-item.activity":
		if !strings.HasPrefix(ev.GetId(), "gh:"+delivery) {
			t.Errorf("%s: activity id %q does not derive from the delivery", rel, ev.GetId())
		}
	case "comment.human", "comment.agent", "ledger.record":
		if !slices.Contains([]string{"issue_comment", "pull_request_review", "pull_request_review_comment"}, event) {
			t.Errorf("%s: %s from a %s event", rel, ev.GetType(), event)
		}
	default:
		t.Errorf("%s: ingress-github raised %s", rel, ev.GetType())
	}
	_ = body
}
