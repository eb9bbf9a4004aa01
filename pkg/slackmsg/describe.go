package slackmsg

import (
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// content is what one event contributes, before layout.
type content struct {
	label   string // header: what happened
	item    string // header and context: which work item
	context []string
	text    string // mrkdwn, escaped
	excerpt string // mrkdwn, escaped
	detail  map[string]string
	url     string
	urlText string
	plain   string // fallback body, escaped
}

// describe is what ev contributes to its message: its label, text, links
// and details, by the kind of its body.
func describe(ev *loopv1.Event, o Options) content {
	t := catalog.Type(ev.GetType())
	c := content{label: Label(t), detail: map[string]string{}}
	if ev.GetSource() != "" {
		c.detail["source"] = ev.GetSource()
	}
	c.detail["event"] = ev.GetId()
	if n := actorName(ev.GetActor()); n != "" {
		c.context = append(c.context, "by "+Escape(n))
		c.detail["actor"] = n
	}
	switch b := ev.GetBody().(type) {
	case *loopv1.Event_Question:
		q := b.Question
		c.setText(q.GetText(), ev.GetLedger().GetUrl())
		c.urlText = "Answer on GitHub"
		c.setDetail("session", q.GetSessionId())
	case *loopv1.Event_Notification:
		c.notification(t, b.Notification, o)
	case *loopv1.Event_Comment:
		c.comment(b.Comment, o)
	case *loopv1.Event_Reply:
		c.setText(b.Reply.GetText(), "")
	case *loopv1.Event_GateFeedback:
		c.setText(b.GateFeedback.GetText(), "")
		c.setDetail("action", b.GateFeedback.GetAction())
	case *loopv1.Event_ControlCommand:
		cc := b.ControlCommand
		if cc.GetCommand() != "" {
			c.label += ": " + cc.GetCommand()
		}
		c.setText(cc.GetText(), "")
	case *loopv1.Event_GraphOverride:
		c.graphOverride(b.GraphOverride)
	case *loopv1.Event_WorkItemCreate:
		c.workItemCreate(ev.GetLedger(), b.WorkItemCreate)
	case *loopv1.Event_GithubActivity:
		activity(&c, b.GithubActivity)
	case *loopv1.Event_LedgerRecord:
		lr := b.LedgerRecord
		c.url, c.urlText = lr.GetComment().GetUrl(), "Open record"
		c.text = "Recorded `" + Escape(lr.GetEventType()) + "` " + Escape(lr.GetEventId())
		c.plain = c.text
	}
	return c
}

// setText sets a section-sized text from markdown (with a link to the rest
// at url when it is cut) and its plain fallback.
func (c *content) setText(md, url string) {
	c.text = body(md, MaxSectionText, url)
	c.plain = plainBody(md, MaxSectionText)
}

// setDetail records a detail when it has a value.
func (c *content) setDetail(key, value string) {
	if value != "" {
		c.detail[key] = value
	}
}

// notification is the content of a notification: its text, the artifact's
// excerpt and the node it concerns.
func (c *content) notification(t catalog.Type, n *loopv1.Notification, o Options) {
	c.url = n.GetUrl()
	c.text, _ = Mrkdwn(n.GetText(), MaxSectionText)
	c.plain = plainBody(n.GetText(), MaxSectionText)
	if ex := n.GetArtifactExcerpt(); ex != "" {
		head := ""
		if n.GetArtifact() != "" {
			head = "*" + Escape(n.GetArtifact()) + "*\n"
		}
		c.excerpt = head + body(ex, o.MaxChars-Length(head), "")
	}
	c.setDetail("node", n.GetNode())
	c.setDetail("artifact", n.GetArtifact())
	maps.Copy(c.detail, n.GetDetail())
	if catalog.IsNotice(t) || t == catalog.GateMoved {
		c.urlText = "Open the work item"
	}
}

// graphOverride is the content of an operator's move of the graph by hand:
// the move, then the operator's reason (docs/decisions/111-operator-escape-hatch.md).
func (c *content) graphOverride(o *loopv1.GraphOverride) {
	if o.GetAction() != "" {
		c.label += ": " + o.GetAction()
	}
	move := "from `" + o.GetFrom() + "`"
	switch {
	case o.GetTo() != "":
		move += " to `" + o.GetTo() + "`"
	case o.GetAction() == "skip":
		move += " to its next node"
	case o.GetAction() == "escalate":
		move += " by its escalate edge"
	}
	c.setText("The operator moved the work item "+move+". Reason: "+o.GetReason(), "")
	c.setDetail("graph", o.GetGraph())
	c.setDetail("node", o.GetFrom())
	c.urlText = "Open record"
}

// comment is the content of a GitHub comment: its author and body, up to
// the message's length.
func (c *content) comment(cm *loopv1.Comment, o Options) {
	if cm.GetAuthor() != "" {
		c.label += " by @" + cm.GetAuthor()
		c.context = []string{"by @" + Escape(cm.GetAuthor())}
	}
	c.url, c.urlText = cm.GetUrl(), "Open comment"
	c.text = body(cm.GetBody(), o.MaxChars, cm.GetUrl())
	c.plain = plainBody(cm.GetBody(), o.MaxChars)
	c.setDetail("association", cm.GetAuthorAssociation())
	if cm.GetCommentId() != 0 {
		c.detail["comment"] = strconv.FormatInt(cm.GetCommentId(), 10)
	}
}

// workItemCreate is the content of a new work item: the issue it opened,
// its title, repository and labels.
func (c *content) workItemCreate(l *loopv1.LedgerRef, wc *loopv1.WorkItemCreate) {
	if l.GetRepo() != "" && l.GetIssueNumber() > 0 {
		c.item = fmt.Sprintf("%s#%d", l.GetRepo(), l.GetIssueNumber())
	}
	c.urlText = "Open issue"
	if wc.GetTitle() != "" {
		c.text = "*" + Escape(Plain(wc.GetTitle(), 256)) + "*"
		c.plain = plainBody(wc.GetTitle(), 256)
	}
	c.setDetail("repo", wc.GetRepo())
	if len(wc.GetLabels()) > 0 {
		c.detail["labels"] = strings.Join(wc.GetLabels(), ", ")
	}
}

func actorName(a *loopv1.Actor) string {
	switch {
	case a.GetName() != "":
		return a.GetName()
	case a.GetGithub() != "":
		return "@" + a.GetGithub()
	case a.GetSlack() != "":
		return a.GetSlack()
	}
	return ""
}

// body renders markdown to mrkdwn capped at max, adding a link to the rest
// when it was cut and a URL is known.
func body(md string, max int, url string) string {
	more := ""
	if SafeURL(url) {
		more = "\n<" + escapeURL(url) + "|Read the rest on GitHub>"
	}
	out, cut := Mrkdwn(md, max-Length(more))
	if !cut {
		return out
	}
	return out + more
}

func plainBody(s string, max int) string {
	out, _ := join(inline(s, false), max)
	return out
}

// activityPayload is the little of a GitHub delivery a person needs to see.
type activityPayload struct {
	Sender struct {
		Login string `json:"login"`
	} `json:"sender"`
	Issue *struct {
		HTMLURL string `json:"html_url"`
		Title   string `json:"title"`
	} `json:"issue"`
	PullRequest *struct {
		HTMLURL string `json:"html_url"`
		Title   string `json:"title"`
		Merged  bool   `json:"merged"`
	} `json:"pull_request"`
	Review *struct {
		HTMLURL string `json:"html_url"`
		State   string `json:"state"`
	} `json:"review"`
	WorkflowRun *run `json:"workflow_run"`
	CheckRun    *run `json:"check_run"`
	CheckSuite  *run `json:"check_suite"`
	Label       *struct {
		Name string `json:"name"`
	} `json:"label"`
	// status events
	State       string `json:"state"`
	Context     string `json:"context"`
	TargetURL   string `json:"target_url"`
	Description string `json:"description"`
}

type run struct {
	HTMLURL    string `json:"html_url"`
	Name       string `json:"name"`
	Status     string `json:"status"`
	Conclusion string `json:"conclusion"`
}

func activity(c *content, a *loopv1.GitHubActivity) {
	c.label = a.GetEvent()
	if a.GetAction() != "" {
		c.label += " " + a.GetAction()
	}
	c.urlText = "Open on GitHub"
	c.detail["delivery"] = a.GetDeliveryId()
	var p activityPayload
	if json.Unmarshal(a.GetPayload(), &p) != nil {
		return
	}
	var lines []string
	title := ""
	if p.Issue != nil {
		title, c.url = p.Issue.Title, p.Issue.HTMLURL
	}
	if p.PullRequest != nil {
		title, c.url = p.PullRequest.Title, p.PullRequest.HTMLURL
		if p.PullRequest.Merged && a.GetAction() == "closed" {
			c.label = a.GetEvent() + " merged"
		}
	}
	if title != "" {
		lines = append(lines, "*"+Escape(Plain(title, 256))+"*")
	}
	if p.Review != nil {
		if p.Review.HTMLURL != "" {
			c.url = p.Review.HTMLURL
		}
		if p.Review.State != "" {
			lines = append(lines, "Review: "+Escape(p.Review.State))
		}
	}
	for _, r := range []*run{p.WorkflowRun, p.CheckRun, p.CheckSuite} {
		if r == nil {
			continue
		}
		if r.HTMLURL != "" {
			c.url = r.HTMLURL
		}
		s := r.Status
		if r.Conclusion != "" {
			s = r.Conclusion
		}
		if r.Name != "" || s != "" {
			lines = append(lines, strings.TrimSpace(Escape(r.Name)+" "+Escape(s)))
			c.label += ": " + s
		}
	}
	if p.Label != nil && p.Label.Name != "" {
		lines = append(lines, "Label: "+Escape(p.Label.Name))
	}
	if p.Context != "" || (p.State != "" && a.GetEvent() == "status") {
		lines = append(lines, strings.TrimSpace(Escape(p.Context)+" "+Escape(p.State)))
		if p.Description != "" {
			lines = append(lines, Escape(Plain(p.Description, 500)))
		}
		if p.TargetURL != "" {
			c.url = p.TargetURL
		}
	}
	if p.Sender.Login != "" {
		c.context = append(c.context, "by @"+Escape(p.Sender.Login))
		c.detail["sender"] = p.Sender.Login
	}
	c.text, _ = join(inlineRaw(strings.Join(lines, "\n")), MaxSectionText)
	c.plain = c.text
}
