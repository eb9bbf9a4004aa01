package slackrenderer

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/identity"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

func alertEv(id, kind, text string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: catalog.SourceLoop, Type: string(catalog.Alert), Subject: workItem, Time: evTime,
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{Text: text,
			Url: "https://github.com/octo/repo/issues/15", Detail: map[string]string{"alert": kind}}}}
}

// withAlerts is the config in force with engineers (alice, mentioned by her
// Slack id in C0ALERTS) told of dead sessions and failed dispatches, and
// approvers (bob, in a direct message) of failed dispatches only.
func (e *env) withAlerts() {
	e.t.Helper()
	c := *e.cfg.Load()
	dir, problems := identity.New([]identity.Person{{GitHub: "alice", Slack: "U0ALICE"}, {GitHub: "bob"}})
	if len(problems) > 0 {
		e.t.Fatal(problems)
	}
	c.Routing.AuthorizedUsers = dir
	c.Collaborators = []config.Collaborator{
		{Handle: "alice", Roles: []string{"engineer"}, Slack: []string{"C0ALERTS"}},
		{Handle: "bob", Roles: []string{"approver"}, Slack: []string{"U0BOB"}},
	}
	c.Notifications = config.Notifications{Enabled: true, Events: map[string][]string{
		config.AlertSessionDied:    {"engineer"},
		config.AlertDispatchFailed: {"engineer", "approver"},
	}}
	e.cfg.Store(&c)
}

// TestAlertsReachTheirRoles: a session-died alert reaches the engineers'
// conversation, mentioning alice; a dispatch-failed one reaches it and the
// approver's direct message; each conversation gets one message per alert,
// top-level, none in the loop's channel (which subscribes to nothing of
// it); an alert whose kind tells nobody posts nothing.
func TestAlertsReachTheirRoles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.withAlerts()
	e.setSlack(func(s *config.SlackChannel) { s.Subscribe = []catalog.Type{catalog.DecisionPending} })
	e.start(startOpts{})
	e.publish(alertEv("loop:alert-died", config.AlertSessionDied, "The session of github:octo/repo#15 was found dead."))
	e.publish(alertEv("loop:alert-failed", config.AlertDispatchFailed, "The loop gave up on an event."))
	e.publish(alertEv("loop:alert-spawned", config.AlertWorkItemSpawned, "A session was spawned."))
	e.publish(note("loop:after-alerts", catalog.DecisionPending, workItem))
	testkit.WaitWithin(t, 60*time.Second, "the alerts and the notification behind them", func() bool {
		return len(e.fake.Messages("C0ALERTS")) >= 2 && len(e.fake.Messages("U0BOB")) >= 1 && len(e.fake.Messages(testChannel)) >= 1
	})
	alerts := e.fake.Messages("C0ALERTS")
	if got, want := ids(alerts), []string{"loop:alert-died", "loop:alert-failed"}; !slices.Equal(got, want) {
		t.Fatalf("C0ALERTS holds %v, want %v", got, want)
	}
	for _, m := range alerts {
		if m.ThreadTS != "" || !strings.HasPrefix(m.Text, "<@U0ALICE> ") || !strings.Contains(string(m.Blocks), "the-loop.mention") || !strings.Contains(string(m.Blocks), "@U0ALICE") {
			t.Errorf("alert %q (thread %q) does not mention alice at its top level", m.Text, m.ThreadTS)
		}
	}
	if !strings.Contains(alerts[0].Text, "found dead") {
		t.Errorf("session-died alert says %q", alerts[0].Text)
	}
	dm := e.fake.Messages("U0BOB")
	if got := ids(dm); !slices.Equal(got, []string{"loop:alert-failed"}) {
		t.Errorf("bob's direct messages %v", got)
	}
	if len(dm) == 1 && strings.Contains(dm[0].Text, "<@") {
		t.Errorf("bob has no Slack id in authorizedUsers, yet is mentioned: %q", dm[0].Text)
	}
	if got := ids(e.fake.Messages(testChannel)); !slices.Equal(got, []string{"loop:after-alerts"}) {
		t.Errorf("the loop's channel holds %v: alerts go to their roles only", got)
	}
	e.checkAllValid()
}
