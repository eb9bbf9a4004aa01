package inproc

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
)

// alertsOn turns on the original's reactions, announcement and
// notifications: alice, an engineer, is alerted in the loop's channel.
func alertsOn(c *config.Config) {
	c.Routing.Reactions = config.Reactions{Enabled: true, Started: "eyes", Completed: "hooray", Error: "confused"}
	c.Routing.Announce.Enabled = true
	c.Collaborators = []config.Collaborator{{Handle: alice, Roles: []string{"engineer"}, Slack: []string{channel}}}
	c.Notifications = config.Notifications{Enabled: true, Events: map[string][]string{
		config.AlertWorkItemSpawned: {"engineer"},
		config.AlertSessionDied:     {"engineer"},
		config.AlertDispatchFailed:  {"engineer"},
	}}
}

// reactionsOn is what the loop's login left on comment id, in order.
func (w *world) reactionsOn(id int64) []string {
	var out []string
	for _, r := range w.gh.Reactions(repo) {
		if r.CommentID == id && r.Login == ledgerLogin {
			out = append(out, r.Content)
		}
	}
	return out
}

// waitAlert waits for the top-level alert in the loop's channel that
// mentions alice and says text.
func (w *world) waitAlert(text string) slackfake.Message {
	w.t.Helper()
	var found slackfake.Message
	testkit.WaitWithin(w.t, wait, "an alert saying "+text, func() bool {
		for _, m := range w.slack.Messages(channel) {
			if m.ThreadTS == "" && strings.HasPrefix(m.Text, "<@"+aliceSlack+">") && strings.Contains(m.Text, text) {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func (w *world) labels(number int) []string {
	is, _ := w.gh.Issue(repo, number)
	return is.Labels
}

// TestAlertsReactionsAnnouncementAndLabels is the whole story of issue 28's
// feedback through the five services, GitHub and Slack faked at their
// edges: the comment that starts a work item gets 👀 and 🎉, the work item
// one announcement and its loop:selection label, and alice the
// work-item-spawned alert; the label follows the graph to requirements; a
// session found dead is alerted and respawned with no second announcement;
// a comment tmux keeps refusing is 😕 and alerted as dispatch-failed once
// its last delivery fails. Nothing is written twice.
func TestAlertsReactionsAnnouncementAndLabels(t *testing.T) {
	w := newWorldWith(t, worldOptions{faults: true}, alertsOn)
	number, r := w.start("alerts")
	var start ghfake.Comment
	for _, c := range w.gh.Comments(repo, number) {
		if c.Body == "the-loop start" {
			start = c
		}
	}
	testkit.WaitWithin(t, wait, "👀 and 🎉 on the start comment", func() bool {
		return slices.Equal(w.reactionsOn(start.ID), []string{"eyes", "hooray"})
	})
	announced := func() []ghfake.Comment {
		var out []ghfake.Comment
		for _, c := range w.gh.Comments(repo, number) {
			if strings.Contains(c.Body, "started a session for this work item") {
				out = append(out, c)
			}
		}
		return out
	}
	testkit.WaitWithin(t, wait, "the announcement", func() bool { return len(announced()) == 1 })
	if body := announced()[0].Body; !strings.Contains(body, "attach -r") || strings.Contains(body, w.tmuxDir) || strings.Contains(body, w.work) {
		t.Errorf("announcement names a path of the machine, or no attach command:\n%s", body)
	}
	testkit.WaitWithin(t, wait, "the loop:selection label", func() bool { return slices.Contains(w.labels(number), "loop:selection") })
	w.waitAlert("A session was spawned for " + r)

	w.toRequirementsGate(number, r, requirementsDoc)
	testkit.WaitWithin(t, wait, "the label to follow the graph", func() bool {
		ls := w.labels(number)
		return slices.Contains(ls, "loop:requirements") && !slices.Contains(ls, "loop:selection") && slices.Contains(ls, armLabel)
	})

	// Every event before the kill is typed (a work item's events are
	// handled in order), so the next one is the one that finds it dead.
	sync := w.comment(number, alice, "Noted.")
	w.waitLog("dispatch.succeeded", map[string]any{"work_item": r, "event_id": "gh:issue-comment:" + itoa(sync.ID)})
	sess := w.session(r)
	if out, err := exec.Command("tmux", "-S", filepath.Join(w.tmuxDir, sess.TmuxTarget), "kill-session", "-t", "="+sess.TmuxTarget).CombinedOutput(); err != nil {
		t.Fatalf("tmux kill-session: %v: %s", err, out)
	}
	c := w.comment(number, alice, "Are you still there?")
	w.waitLog("session.respawned", map[string]any{"work_item": r, "event_id": "gh:issue-comment:" + itoa(c.ID)})
	w.waitAlert("was found dead")

	w.fault(t, "paste-buffer", true)
	c = w.comment(number, alice, "A comment typed into a broken tmux.")
	id := "gh:issue-comment:" + itoa(c.ID)
	w.waitLog("dispatch.failed", map[string]any{"work_item": r, "event_id": id, "will_retry": false})
	w.fault(t, "paste-buffer", false)
	w.waitAlert("gave up on an event of " + r)
	testkit.WaitWithin(t, wait, "👀 and 😕 on the refused comment", func() bool {
		return slices.Equal(w.reactionsOn(c.ID), []string{"eyes", "confused"})
	})

	// Once each: the respawn announced nothing, no alert was posted twice.
	if n := len(announced()); n != 1 {
		t.Errorf("%d announcements", n)
	}
	seen := map[string]int{}
	for _, m := range w.slack.Messages(channel) {
		if strings.HasPrefix(m.Text, "<@"+aliceSlack+">") {
			var id any
			if m.Metadata != nil {
				id = m.Metadata.EventPayload["event_id"]
			}
			seen[fmt.Sprint(id)]++
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("alert %s posted %d times", id, n)
		}
	}
	if len(seen) != 3 {
		t.Errorf("%d alerts, want work-item-spawned, session-died and dispatch-failed: %v", len(seen), seen)
	}
}
