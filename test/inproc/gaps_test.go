package inproc

import (
	"fmt"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// requirementsDoc is the agent's artifact: front matter, then a body longer
// than the channel's maxChars (120 here).
const requirementsDoc = "---\ntitle: Requirements\nstatus: draft\napprovedBy: []\n---\n\n" +
	"# Requirements of the widget\n\nThe widget SHALL frobnicate every input exactly once. " +
	"It SHALL report each frobnication on the work item. THIS-SENTENCE-IS-PAST-THE-CAP and never reaches Slack."

// Gap 1 (R6.1): a real issue comment reaches the bound Slack thread.
func TestGap1CommentReachesThread(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("Gap 1")
	root := w.thread(r)
	c := w.comment(number, carol, "A collaborator's thought: mind the edge case.")
	w.waitSlack(root, "mind the edge case", c.HTMLURL)
	w.comment(number, alice, "Alice on GitHub: please also cover retries.")
	w.waitSlack(root, "please also cover retries")
}

// Gap 2 (R4.4): the approval ping carries the work item's link and the
// artifact's excerpt, front matter stripped, capped at maxChars.
func TestGap2ApprovalPingCarriesLinkAndExcerpt(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("Gap 2")
	w.toRequirementsGate(number, r, requirementsDoc)
	root := w.thread(r)
	url := fmt.Sprintf("https://github.com/%s/issues/%d", repo, number)
	m := w.waitSlack(root, string(catalog.PhaseApprovalPending), url, "The widget SHALL frobnicate")
	text := messageText(m)
	if strings.Contains(text, "PAST-THE-CAP") || strings.Contains(text, "status: draft") {
		t.Errorf("the ping carries text past maxChars or the front matter:\n%s", text)
	}
	// Socket mode with the gate.feedback grant: the gate's buttons.
	if !strings.Contains(text, slackmsg.ApproveActionID) || !strings.Contains(text, slackmsg.RequestChangesActionID) {
		t.Errorf("the approval ping has no gate buttons:\n%s", text)
	}
}

// Gap 3 (R6.3): an authorized member's Slack approval, typed or pressed,
// becomes a GitHub comment, comes back through ingress-github, passes the
// gate, and approvedBy names the member's GitHub login with the envelope as
// provenance; without the grant the same reply is a work-item.reply and the
// gate stays shut.
func TestGap3SlackApprovalPassesGate(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("Gap 3")
	w.toRequirementsGate(number, r, requirementsDoc)
	root := w.thread(r)

	// Without the grant: a reply, delivered to the session, gate unmoved.
	w.update(func(c *config.Config) {
		c.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemReply, catalog.ControlCommand, catalog.WorkItemCreate}
	})
	ts := w.say(aliceSlack, root, "approved")
	id := "slack:" + channel + ":" + ts
	w.waitLog("dispatch.succeeded", map[string]any{"work_item": r, "event_id": id, "event_type": string(catalog.WorkItemReply)})
	if st := w.state(r); st.Current != "requirements-approval" || len(st.ApprovedBy) != 0 {
		t.Fatalf("a reply without the gate.feedback grant moved the gate: %+v", st)
	}

	// With the grant, typed.
	w.update(func(c *config.Config) { c.Channels.Slack.Publish = baseConfig(t).Channels.Slack.Publish })
	before := len(w.gh.Comments(repo, number))
	ts = w.say(aliceSlack, root, "Approved, ship it")
	st := w.waitNode(r, "design")
	var record string
	for _, c := range w.gh.Comments(repo, number)[before:] {
		if strings.Contains(c.Body, "Approved, ship it") {
			record = c.HTMLURL
			if c.Login != ledgerLogin || strings.Contains(c.Body, "the-loop:agent-comment") {
				t.Errorf("the gate record is by %s / marker-stamped:\n%s", c.Login, c.Body)
			}
		}
	}
	if record == "" {
		t.Fatal("the Slack approval is not on GitHub")
	}
	want := graph.Provenance{Channel: "slack", Member: aliceSlack, RecordURL: record, EventID: "slack:" + channel + ":" + ts}
	if len(st.ApprovedBy) != 1 || st.ApprovedBy[0].Login != alice || st.ApprovedBy[0].Provenance != want {
		t.Fatalf("approvedBy = %+v, want alice with %+v", st.ApprovedBy, want)
	}
	w.waitLog("graph.advanced", map[string]any{"work_item": r, "from": "requirements-approval", "to": "design", "actor": alice})
	// The dispatcher writes the artifact after it moves the state and logs
	// the move: wait for the write.
	var doc string
	if !testkit.Poll(wait, func() bool {
		doc = w.readArtifact(r, "requirements.md")
		return strings.Contains(doc, "@alice (requirements-approval") && strings.Contains(doc, record)
	}) {
		t.Errorf("approvedBy not written into the artifact:\n%s", doc)
	}
	testkit.WaitWithin(w.t, wait, "the approval typed into the session, classified first", func() bool {
		for _, in := range w.inputs() {
			if strings.Contains(in, "classified by the gate first: approved") && strings.Contains(in, "node: design") {
				return true
			}
		}
		return false
	})

	// By button, at the design gate.
	w.writeArtifact(r, "design.md", "# Design\n\nA frobnicator.")
	w.complete(r)
	w.waitNode(r, "design-approval")
	ping := w.waitSlack(root, string(catalog.PhaseApprovalPending), "A frobnicator")
	w.pressButton(aliceSlack, ping, root, slackmsg.ApproveActionID)
	st = w.waitNode(r, "implementation")
	if len(st.ApprovedBy) != 2 || st.ApprovedBy[1].Login != alice || st.ApprovedBy[1].Node != "design-approval" ||
		st.ApprovedBy[1].Provenance.Channel != "slack" || st.ApprovedBy[1].Provenance.Member != aliceSlack {
		t.Errorf("button approval = %+v", st.ApprovedBy)
	}
	if !testkit.Poll(wait, func() bool {
		doc = w.readArtifact(r, "design.md")
		return strings.Contains(doc, "@alice (design-approval")
	}) {
		t.Errorf("approvedBy not written into design.md:\n%s", doc)
	}
}

// Gap 4 (R6.4): reaching complete publishes work-item-complete, and Slack
// shows it in the work item's thread.
func TestGap4CompletePublished(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("Gap 4")
	w.toRequirementsGate(number, r, requirementsDoc)
	w.comment(number, alice, "LGTM")
	w.waitNode(r, "design")
	w.complete(r)
	w.waitNode(r, "design-approval")
	w.comment(number, alice, "approved")
	w.waitNode(r, "implementation")
	w.complete(r)
	w.waitNode(r, "review")
	root := w.thread(r)
	w.waitSlack(root, string(catalog.PRReviewPending))
	w.comment(number, alice, "ship it")
	st := w.waitNode(r, "complete")
	if st.Status != graph.StatusComplete {
		t.Errorf("status %s", st.Status)
	}
	w.waitSlack(root, string(catalog.WorkItemComplete), fmt.Sprintf("https://github.com/%s/issues/%d", repo, number))
	w.waitLog("graph.completed", map[string]any{"work_item": r, "node": "complete"})
	// Published once, whatever redeliveries happened.
	n := 0
	for _, m := range w.slack.Thread(channel, root) {
		if strings.Contains(messageText(m), string(catalog.WorkItemComplete)) {
			n++
		}
	}
	if n != 1 {
		t.Errorf("work-item-complete shown %d times", n)
	}
	if id := graphstate.NotificationID(r, "complete", 1, catalog.WorkItemComplete); len(w.logs.Find("bus.published", map[string]any{"event_id": id})) == 0 {
		t.Errorf("no bus.published for %s", id)
	}
}

// Gap 5 (R6.5): a top-level Slack message creates the issue with the
// configured labels, and the thread gets its link.
func TestGap5KickoffCreatesIssue(t *testing.T) {
	w := newWorld(t)
	ts := w.say(aliceSlack, "", "Add a frobnicator to the widget\n\nIt should frobnicate. Please label it security.")
	var number int
	testkit.WaitWithin(w.t, wait, "the kickoff issue", func() bool {
		for _, is := range w.gh.Issues(repo) {
			if strings.Contains(is.Title, "Add a frobnicator") {
				number = is.Number
				return true
			}
		}
		return false
	})
	is, _ := w.gh.Issue(repo, number)
	if strings.Join(is.Labels, ",") != "the-loop,from-slack" {
		t.Errorf("labels = %v, want exactly the configured the-loop, from-slack", is.Labels)
	}
	if is.Login != ledgerLogin || strings.Contains(is.Body, "the-loop:agent-comment") || !strings.Contains(is.Body, "the-loop:envelope") {
		t.Errorf("kickoff issue by %s, body:\n%s", is.Login, is.Body)
	}
	w.waitSlack(ts, is.HTMLURL)
	if got := w.thread(ref(number)); got != ts {
		t.Errorf("the kickoff thread is %s, the new issue is bound to %s", ts, got)
	}
}
