package ledgerwriter

import (
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/service"
)

// TestHeldWithoutToken: under `up` on a laptop without LOOP_GITHUB_TOKEN the
// writer starts, reports not ready with the reason, passes through what needs
// no record, and holds what does —
// not fanned out, not dead-lettered, still in the inbox — until a writer with
// a token takes over and records it.
func TestHeldWithoutToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	w := e.startWith("writer-no-token", func(_ *service.Deps, c *Config) { c.Token, c.App = config.Secret{}, config.App{} })
	ref := "github:" + testRepo + "#1"
	e.publish(notifyEv("loop:notify:held", "github:"+testRepo+"#5"))
	e.publish(gateEv("slack:EvHeld", ref, "LGTM"))
	testkit.WaitWithin(t, 30*time.Second, "the notification to pass through", func() bool { return len(e.fan.byID("loop:notify:held")) == 1 })
	testkit.WaitWithin(t, 30*time.Second, "the gate answer to be held", func() bool {
		return len(e.logs.WithMessage("ledger-writer: event held, GitHub is not configured")) > 0
	})
	time.Sleep(2 * testTopology().AckWait)
	if len(e.fan.byID("slack:EvHeld")) != 0 || len(e.dlq()) != 0 || e.inboxEmpty() {
		t.Fatal("a held event was fanned out, dead-lettered or acknowledged")
	}
	if v := gauge(t, w, "loop_ledger_writer_github_configured"); v != 0 {
		t.Errorf("github_configured = %v, want 0", v)
	}
	if failed := w.ready.Check(); !strings.Contains(failed[Name+"/github"], "LOOP_GITHUB_TOKEN is not set") {
		t.Errorf("/readyz failures = %v, want the missing token named", failed)
	}
	w.stop()
	e.start("writer-with-token")
	e.checkHeld(t)
}

func (e *env) checkHeld(t *testing.T) {
	t.Helper()
	testkit.WaitWithin(t, 60*time.Second, "the held event to be recorded", func() bool { return len(e.fan.byID("slack:EvHeld")) == 1 })
	if n := len(e.gh.Comments(testRepo, 1)); n != 1 {
		t.Errorf("%d comments, want 1", n)
	}
}

// TestRejectedTokenHoldsAndNeverLeaks: GitHub answers 401 (a revoked token).
// That is the credential's problem, not the event's: the event is held, not
// dead-lettered, and the token never appears in a log line.
func TestRejectedTokenHoldsAndNeverLeaks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.startWith("writer-bad-token", func(_ *service.Deps, c *Config) {
		// A token, in app mode too: this is about a token GitHub refuses.
		c.Token, c.App = config.NewSecret("ghp_revoked_token_must_not_leak_987654321"), config.App{}
	}, WithRetryBackoff(10*time.Millisecond, 50*time.Millisecond))
	e.publish(gateEv("slack:EvHeld", "github:"+testRepo+"#1", "LGTM"))
	testkit.WaitWithin(t, 30*time.Second, "the 401 to be waited out", func() bool {
		for _, r := range e.logs.WithMessage("ledger-writer: GitHub failed; waiting to retry") {
			if r["reason"] == "unauthorized-token" {
				return true
			}
		}
		return false
	})
	if len(e.dlq()) != 0 || len(e.fan.byID("slack:EvHeld")) != 0 {
		t.Fatal("a 401 dead-lettered or fanned out the event")
	}
	if strings.Contains(e.logs.String(), "ghp_revoked_token_must_not_leak") {
		t.Error("the token reached the log")
	}
}
