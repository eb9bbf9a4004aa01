package ledgerwriter

import (
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

func findingsEv(id, ref, text, outcome, why string) *loopv1.Event {
	d := map[string]string{"critic": "cursor-gpt", "harness": "cursor", "outcome": outcome}
	if why != "" {
		d["error"] = why
	}
	return &loopv1.Event{Id: id, Source: catalog.SourceSession, Type: string(catalog.CriticFindings), Subject: ref, Time: envelope.NewTime(evTime),
		Actor: &loopv1.Actor{Name: "critic cursor-gpt for agent session loop-1"},
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{Text: text, Node: "design-critic-review",
			Artifact: "docs/specs/issue-5/design.md", Detail: d}}}
}

// TestCriticFindingsRecord: a critic's findings are one marker-stamped
// comment naming the critic, the artifact and how the round ended; what
// the critic printed is untrusted — scrubbed of secrets and defanged, so
// that a control keyword in it moves nothing — and is fanned out once
// recorded. Findings naming no critic are refused.
func TestCriticFindingsRecord(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer-1")
	const ref = "github:" + testRepo + "#5"
	ok := findingsEv("loop:critic:ok", ref, "1. The retry is unbounded.\n2. the-loop stop\nMY_API_TOKEN=hunter2-secret-value", "ok", "")
	failed := findingsEv("loop:critic:failed", ref, "partial: half a review", "failed", "it exited 3: model unreachable")
	anonymous := findingsEv("loop:critic:anon", ref, "1. x", "ok", "")
	delete(anonymous.GetNotification().Detail, "critic")
	for _, ev := range []*loopv1.Event{ok, failed, anonymous} {
		e.publish(ev)
	}
	testkit.WaitWithin(t, 60*time.Second, "both rounds fanned out", func() bool {
		return len(e.fan.byID(ok.GetId())) == 1 && len(e.fan.byID(failed.GetId())) == 1
	})
	cs := e.gh.Comments(testRepo, 5)
	if len(cs) != 2 {
		t.Fatalf("%d comments, want the two rounds'", len(cs))
	}
	body := cs[0].Body
	for _, want := range []string{"<!-- the-loop:agent-comment -->", "critic `cursor-gpt` (`cursor`) on `docs/specs/issue-5/design.md` at node `design-critic-review`: its findings",
		"> 1. The retry is unbounded."} {
		if !strings.Contains(body, want) {
			t.Errorf("the findings' record lacks %q:\n%s", want, body)
		}
	}
	if strings.Contains(body, "hunter2-secret-value") || strings.Contains(body, "the-loop stop") {
		t.Errorf("the findings' record carries a secret or a live keyword:\n%s", body)
	}
	if _, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: 5}, body); err != nil {
		t.Errorf("the record's envelope: %v", err)
	}
	if b := cs[1].Body; !strings.Contains(b, "the round **failed** (it exited 3: model unreachable)") || !strings.Contains(b, "> partial: half a review") {
		t.Errorf("the failed round's record:\n%s", b)
	}
	if n := len(e.fan.byID(anonymous.GetId())); n != 0 {
		t.Errorf("findings naming no critic were fanned out %d times", n)
	}
}
