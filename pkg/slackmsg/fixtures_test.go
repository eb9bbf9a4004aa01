package slackmsg

import (
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// fixture is one event rendered into golden files.
type fixture struct {
	name string
	ev   *loopv1.Event
}

var fixedTime = timestamppb.New(time.Date(2026, 3, 1, 9, 30, 0, 0, time.UTC))

const ref = "github:octo/repo#15"

func event(id string, t catalog.Type, source string) *loopv1.Event {
	return &loopv1.Event{Id: id, Type: string(t), Source: source, Subject: ref, Time: fixedTime}
}

func notification(t catalog.Type, n *loopv1.Notification) *loopv1.Event {
	ev := event("loop:notify:"+string(t), t, "loop")
	ev.Body = &loopv1.Event_Notification{Notification: n}
	return ev
}

var approver = &loopv1.Actor{Github: "jc1993", Slack: "U0APPROVER", Name: "Jo Coder"}

// hostileMarkdown is everything a GitHub comment body could carry to spoof,
// ping or break a Slack message.
const hostileMarkdown = "<!channel> <!here> <@U0VICTIM> <#C0SECRET> hey @everyone and @Here\n" +
	"Click <https://evil.example/login|github.com/octo/repo/pull/1> or [github.com](https://evil.example) or [the docs](javascript:alert(1)).\n" +
	"**bold** ~~gone~~ `code <b>` & &amp; &lt; > quoted\n" +
	"# Heading with *stars*\n" +
	"- item one\n* item two\n" +
	"> a quote\n" +
	"```go\nfunc main() { if a < b && c > d { println(\"<!channel>\") } }\n```\n" +
	"Emoji: 🚀👍🏽 :tada: 👨‍👩‍👧 and a bare https://github.com/octo/repo/pull/1?a=1&b=2.\n" +
	"![screenshot](https://user-images.example/shot.png) NUL:\x00 BEL:\x07"

func fixtures() []fixture {
	var fs []fixture
	add := func(name string, ev *loopv1.Event) { fs = append(fs, fixture{name, ev}) }

	q := event("loop:ask:1", catalog.SessionAwaitingInput, "loop")
	q.Actor = &loopv1.Actor{Name: "agent session"}
	q.Ledger = &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: 15, CommentId: 1001, Url: "https://github.com/octo/repo/issues/15#issuecomment-1001"}
	q.Body = &loopv1.Event_Question{Question: &loopv1.Question{
		Text: "Which **database** should the migration target: `postgres` or `sqlite`?", SessionId: "sess-42"}}
	add("session.awaiting_input", q)

	for _, t := range []catalog.Type{catalog.DecisionPending, catalog.PhaseApprovalPending, catalog.PRReviewPending,
		catalog.SecuritySignOffPending, catalog.ConflictEscalated, catalog.WorkItemComplete} {
		n := &loopv1.Notification{
			Text: "the-loop: spec-15 is at *" + string(t) + "*. Roles: reviewer",
			Url:  "https://github.com/octo/repo/issues/15",
			Node: "requirements-approval",
		}
		if t != catalog.WorkItemComplete && t != catalog.ConflictEscalated {
			// A gate's notification names its visit, as the dispatcher's do.
			n.GateVisit = "requirements-approval.4.1772357400000"
		}
		if t != catalog.WorkItemComplete {
			n.Artifact = "requirements.md"
			n.ArtifactExcerpt = "# Requirements\n\n1. The bus **SHALL** record every event.\n2. Slack renders natively."
			n.Detail = map[string]string{"roles": "reviewer", "tier": "4"}
		}
		add(string(t), notification(t, n))
	}

	ch := event("gh:delivery-comment-human", catalog.CommentHuman, "github")
	ch.Ledger = &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: 15, CommentId: 2002, Url: "https://github.com/octo/repo/issues/15#issuecomment-2002"}
	ch.Body = &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 2002, Url: ch.Ledger.Url, Author: "octocat",
		AuthorAssociation: "MEMBER", Body: "Looks good, but please rename `Foo` to **Bar** before merging.\n\nSee [the guide](https://github.com/octo/repo/blob/main/CONTRIBUTING.md)."}}
	add("comment.human", ch)

	ca := event("gh:delivery-comment-agent", catalog.CommentAgent, "github")
	ca.Body = &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 2003, Url: "https://github.com/octo/repo/issues/15#issuecomment-2003",
		Author: "the-loop-bot", AuthorAssociation: "NONE", Body: "<!-- the-loop:agent-comment -->\n## Design\n\nThe design is attached:\n\n```yaml\nversion: 0.7.0\n```"}}
	add("comment.agent", ca)

	r := event("cli:reply-1", catalog.WorkItemReply, "cli")
	r.Actor = approver
	r.Body = &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "Use postgres; sqlite is only for tests."}}
	add("work-item.reply", r)

	gf := event("cli:gate-1", catalog.GateFeedback, "cli")
	gf.Actor = approver
	gf.Body = &loopv1.Event_GateFeedback{GateFeedback: &loopv1.GateFeedback{Text: "Approved", Action: "approved"}}
	add("gate.feedback", gf)

	cc := event("cli:control-1", catalog.ControlCommand, "cli")
	cc.Actor = approver
	cc.Body = &loopv1.Event_ControlCommand{ControlCommand: &loopv1.ControlCommand{Command: "pause", Text: "the-loop pause"}}
	add("control.command", cc)

	ov := event("loop:cli-graph:1", catalog.GraphOverride, "cli")
	ov.Actor = approver
	ov.Ledger = &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: 15, CommentId: 2010, Url: "https://github.com/octo/repo/issues/15#issuecomment-2010"}
	ov.Body = &loopv1.Event_GraphOverride{GraphOverride: &loopv1.GraphOverride{Action: "skip", From: "requirements", Graph: "work-item",
		Reason: "The requirements are in the issue already; see *the thread*."}}
	add("graph.override", ov)

	cf := notification(catalog.CriticFindings, &loopv1.Notification{
		Text: "1. The design never says what happens when the **bus** is down.\n2. `retry` is unbounded.",
		Url:  "https://github.com/octo/repo/issues/15#issuecomment-2020", Node: "design-critic-review", Artifact: "design.md",
		Detail: map[string]string{"critic": "cursor-gpt", "outcome": "ok"}})
	add("critic.findings", cf)

	// The kickoff answer: the ledger created octo/repo#42 for a top-level
	// Slack message.
	wc := &loopv1.Event{Id: "slack:Ev0KICKOFF", Type: string(catalog.WorkItemCreate), Source: "slack",
		Subject: "slack:C0LOOP/1700000000.000100", Time: fixedTime, Actor: approver,
		Conversation: &loopv1.Conversation{Channel: "C0LOOP", MessageTs: "1700000000.000100"},
		Ledger:       &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: 42, Url: "https://github.com/octo/repo/issues/42"},
		Body: &loopv1.Event_WorkItemCreate{WorkItemCreate: &loopv1.WorkItemCreate{Repo: "octo/repo",
			Title: "Add a <!channel> dark mode & fix login", Body: "long body", Labels: []string{"the-loop", "tier-2"}}}}
	add("work-item.create", wc)

	act := event("gh:delivery-activity", catalog.WorkItemActivity, "github")
	act.Body = &loopv1.Event_GithubActivity{GithubActivity: &loopv1.GitHubActivity{Event: "workflow_run", Action: "completed",
		DeliveryId: "delivery-activity", Payload: []byte(`{"action":"completed","workflow_run":{"name":"CI","status":"completed","conclusion":"failure","html_url":"https://github.com/octo/repo/actions/runs/7"},"sender":{"login":"octocat"}}`)}}
	add("work-item.activity", act)

	lr := event("gh:delivery-record", catalog.LedgerRecord, "github")
	lr.Body = &loopv1.Event_LedgerRecord{LedgerRecord: &loopv1.LedgerRecord{EventId: "slack:Ev0GATE", EventType: "gate.feedback",
		Comment: &loopv1.Comment{CommentId: 3003, Url: "https://github.com/octo/repo/issues/15#issuecomment-3003", Author: "the-loop-bot"}}}
	add("ledger.record", lr)

	rf := notification(catalog.RecordFailed, &loopv1.Notification{
		Text: "Could not record your gate.feedback on octo/repo#15: GitHub answered 422 (validation failed).",
		Url:  "https://github.com/octo/repo/issues/15"})
	rf.Id, rf.Source, rf.CausationId = "loop:record-failed:1", "loop", "slack:Ev0GATE"
	rf.Conversation = &loopv1.Conversation{Channel: "C0LOOP", ThreadTs: "1700000000.000100", MessageTs: "1700000001.000200"}
	add("ledger.record_failed", rf)

	gp := notification(catalog.GatePaused, &loopv1.Notification{
		Text: "Your answer is recorded on the work item, but the gate *requirements-approval* did not move: the work item's session is paused. Resume the session (`the-loop resume`), then answer again.",
		Url:  "https://github.com/octo/repo/issues/15", Node: "requirements-approval",
		Detail: map[string]string{"reason": "session-paused"}})
	gp.Id, gp.Source, gp.CausationId = "loop:gate-paused:1", "loop", "gh:issue-comment:3003"
	gp.Conversation = &loopv1.Conversation{Channel: "C0LOOP", ThreadTs: "1700000000.000100"}
	add("gate.paused", gp)

	// The dispatcher's signal that a gate was left: the channel edits the
	// gate's message with it.
	gm := notification(catalog.GateMoved, &loopv1.Notification{
		Text: "octo/repo#15: requirements-approval was approved by Jo Coder; the work item moved on to design.",
		Url:  "https://github.com/octo/repo/issues/15", Node: "requirements-approval",
		Artifact: "requirements.md", ArtifactExcerpt: "# Requirements\n\n1. The bus **SHALL** record every event.",
		GateVisit: "requirements-approval.4.1772357400000",
		Detail:    map[string]string{"outcome": "approved", "to": "design"}})
	gm.Id, gm.Actor = "loop:gate-moved:1", approver
	add("gate.moved", gm)

	add("custom.notify-event", notification("custom.notify-event", &loopv1.Notification{Text: "A custom graph fired this."}))

	// Hostile text in every untrusted field.
	hc := event("gh:delivery-hostile", catalog.CommentHuman, "github")
	hc.Body = &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 4004, Url: "https://github.com/octo/repo/issues/15#issuecomment-4004",
		Author: "mallory", AuthorAssociation: "COLLABORATOR", Body: hostileMarkdown}}
	add("hostile.comment", hc)

	long := event("gh:delivery-long", catalog.CommentHuman, "github")
	long.Body = &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 5005, Url: "https://github.com/octo/repo/issues/15#issuecomment-5005",
		Author: "verbose-person", AuthorAssociation: "OWNER", Body: strings.Repeat("All work & no play <makes> a dull 🚀. ", 300)[:10000]}}
	add("hostile.long-comment", long)

	fence := event("gh:delivery-fence", catalog.CommentAgent, "github")
	fence.Body = &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 6006, Url: "https://github.com/octo/repo/issues/15#issuecomment-6006",
		Author: "the-loop-bot", Body: "Log:\n```\n" + strings.Repeat("ERROR <nil> & retry\n", 800) + "```\nDone."}}
	add("hostile.code-fence", fence)

	hq := event("loop:ask:hostile", catalog.SessionAwaitingInput, "loop")
	hq.Body = &loopv1.Event_Question{Question: &loopv1.Question{Text: strings.Repeat("Why? <!here> ", 1000)}}
	add("hostile.question", hq)

	hn := notification(catalog.PhaseApprovalPending, &loopv1.Notification{
		Text: "Approve <https://evil.example|this>", Url: "javascript:alert(1)", Node: "design-approval",
		GateVisit: "design-approval.6.1772357400000",
		Artifact:  "design.md", ArtifactExcerpt: hostileMarkdown + strings.Repeat(" 🚀", 3000),
		Detail: map[string]string{"k1": "v", "k2": "v", "k3": "v", "k4": "v", "k5": "v", "k6": "v", "k7": "v",
			"k8": "v", "k9": "v", "k10": "v", "k11": "<!channel>", "k12": strings.Repeat("x", 2000)}})
	add("hostile.approval", hn)
	return fs
}

func activityBody(event, action string, payload []byte) *loopv1.Event_GithubActivity {
	return &loopv1.Event_GithubActivity{GithubActivity: &loopv1.GitHubActivity{
		Event: event, Action: action, DeliveryId: "d-" + event, Payload: payload}}
}
