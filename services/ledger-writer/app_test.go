package ledgerwriter

import (
	"fmt"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
)

// TestAppTokenExpiresMidRunNoWriteLost: the writer authenticates as a
// GitHub App (JWT verified by the fake); halfway through, the fake expires
// the installation token the writer holds (an hour-long token, so the
// writer would go on using it): the next write is refused, and sent again
// with a fresh token. Every event is recorded once, by the app's bot, none
// dead-lettered, and the ledger's login comes from GET /app, never GET
// /user. (Refreshing before expiry: the whole suite with
// LOOP_TEST_GITHUB_APP=1, whose tokens live 61 s.)
func TestAppTokenExpiresMidRunNoWriteLost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	app := e.gh.InstallApp(t, appSlug, time.Hour)
	e.gh.SetAppTokenTTL(time.Hour) // in app mode the suite's app was installed with 61 s
	e.app = &app
	e.start("writer-app")
	const n = 12
	ref := "github:" + testRepo + "#2"
	for i := range n {
		if i == n/2 {
			testkit.WaitWithin(t, 30*time.Second, "the first half recorded", func() bool { return len(e.gh.Comments(testRepo, 2)) >= n/2 })
			e.gh.ExpireAppTokens()
		}
		e.publish(gateEv(fmt.Sprintf("slack:EvApp%02d", i), ref, fmt.Sprintf("LGTM %d", i)))
		time.Sleep(150 * time.Millisecond)
	}
	testkit.WaitWithin(t, 60*time.Second, "every event recorded and fanned out", func() bool {
		for i := range n {
			if len(e.fan.byID(fmt.Sprintf("slack:EvApp%02d", i))) != 1 {
				return false
			}
		}
		return true
	})
	cs := e.gh.Comments(testRepo, 2)
	if len(cs) != n {
		t.Errorf("%d comments, want %d (one per event, none lost or doubled)", len(cs), n)
	}
	for _, c := range cs {
		if c.Login != app.Login {
			t.Errorf("a record by %q, want the app's bot %q", c.Login, app.Login)
		}
	}
	if d := e.dlq(); len(d) != 0 {
		t.Errorf("%d dead letters", len(d))
	}
	c := e.gh.AppCounts()
	if c.Minted < 2 || c.Expired < 1 || c.BadJWT != 0 {
		t.Errorf("app counts %+v: want tokens refreshed, the expired one refused and renewed, every JWT verified", c)
	}
	for _, r := range e.gh.Requests() {
		if r.Path == "/user" {
			t.Error("the writer called GET /user as an app")
		}
	}
	t.Logf("app: %d installation tokens minted, %d requests refused for an expired token and sent again", c.Minted, c.Expired)
}
