package demo

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// The story the demo plays, one method a step; Play runs them in order.

// story is what the steps share: the work item, and its Slack thread.
type story struct {
	s      *Stage
	p      *player
	number int
	ref    string // github:owner/repo#n
	root   string // the thread's ts
}

// step is one step of the story.
type step struct {
	title string
	play  func(ctx context.Context) error
}

func (t *story) steps() []step {
	return []step{
		{"An issue is labelled and a `the-loop start` comment arrives", t.open},
		{"The agent asks a question (`the-loop ask`)", t.ask},
		{"A person replies in Slack", t.reply},
		{"The work reaches an approval gate", t.reachGate},
		{"The person presses Approve in Slack", t.approve},
		{"The work completes", t.complete},
		{"A top-level Slack message creates a new issue", t.newIssue},
	}
}

// open labels an issue and starts the work with a comment, through the phase-selection gate.
func (t *story) open(ctx context.Context) error {
	s, p := t.s, t.p
	is, err := s.openIssue("Rate-limit the public API", "Clients can hammer /v1/search. Add a per-token rate limit.")
	if err != nil {
		return err
	}
	t.number, t.ref = is.Number, fmt.Sprintf("github:%s#%d", Repo, is.Number)
	number, r := t.number, t.ref
	p.say("person", "alice opens %s#%d %q with the label %q (signed webhook)", Repo, number, is.Title, Label)
	if err := p.waitLog(ctx, "the dispatcher to wait for the start command", "dispatch.dropped", "work_item", r); err != nil {
		return err
	}
	if err := s.comment(number, "the-loop start"); err != nil {
		return err
	}
	p.say("person", "alice comments %q on GitHub (signed webhook)", "the-loop start")
	if err := p.wait(ctx, "the session to start", func() (bool, error) {
		b, err := standin.ReadBoots(s.agentDir)
		return len(b) > 0, err
	}); err != nil {
		return err
	}
	if _, err := p.waitNode(ctx, r, "phase-selection"); err != nil {
		return err
	}
	t.root, err = p.thread(ctx, r)
	if err != nil {
		return err
	}
	// Phase selection is a human gate: alice's execute keyword.
	if err := s.comment(number, "the-loop execute"); err != nil {
		return err
	}
	p.say("person", "alice comments %q: the phase-selection gate opens", "the-loop execute")
	_, err = p.waitNode(ctx, r, "requirements")
	return err
}

// ask is the agent asking a question through its session endpoint.
func (t *story) ask(ctx context.Context) error {
	p, r, root := t.p, t.ref, t.root
	q := "Should the limit be per token or per IP? I would pick per token: it is what the billing plans count."
	p.say("agent", "the-loop ask --work-item %s --question %q", r, q)
	ans, err := p.agent().Ask(ctx, r, q, time.Minute)
	if err != nil {
		return err
	}
	if ans.URL == "" {
		return fmt.Errorf("the ledger did not record the question %s in time", ans.ID)
	}
	p.say("agent", "the ledger recorded the question: %s", ans.URL)
	_, err = p.waitSlack(ctx, root, "per token or per IP")
	return err
}

// reply is alice answering the question in the Slack thread.
func (t *story) reply(ctx context.Context) error {
	s, p, root := t.s, t.p, t.root
	reply := "Per token, 100 requests a minute. Keep anonymous calls at 10."
	if _, err := s.say(root, reply); err != nil {
		return err
	}
	p.say("person", "alice replies in the Slack thread: %q", reply)
	return p.waitInput(ctx, "100 requests a minute")
}

// reachGate is the agent completing requirements: the approval gate.
func (t *story) reachGate(ctx context.Context) error {
	p, r, root, number := t.p, t.ref, t.root, t.number
	doc := "# Requirements\n\n- Limit each API token to 100 requests a minute.\n- Anonymous calls: 10 a minute.\n- Answer 429 with Retry-After.\n"
	at, err := p.writeArtifact(number, "requirements.md", doc)
	if err != nil {
		return err
	}
	p.say("agent", "writes %s in its own checkout, then: the-loop graph complete %s", at, r)
	if err := p.agent().Complete(ctx, r, nil); err != nil {
		return err
	}
	if _, err := p.waitNode(ctx, r, "requirements-approval"); err != nil {
		return err
	}
	_, err = p.waitSlack(ctx, root, string(catalog.PhaseApprovalPending), "100 requests a minute", fmt.Sprintf("https://github.com/%s/issues/%d", Repo, number))
	return err
}

// approve is alice pressing Approve on the approval message.
func (t *story) approve(ctx context.Context) error {
	s, p, r, root := t.s, t.p, t.ref, t.root
	ping, err := p.waitSlack(ctx, root, string(catalog.PhaseApprovalPending))
	if err != nil {
		return err
	}
	// The button's value names the gate visit it was drawn for.
	value, ok := slackmsg.ButtonValue(ping.Blocks, slackmsg.ApproveActionID)
	if !ok {
		return fmt.Errorf("the approval message has no Approve button")
	}
	if err := s.press(ping, root, slackmsg.ApproveActionID, value); err != nil {
		return err
	}
	p.say("person", "alice presses Approve on the approval message")
	st, err := p.waitNode(ctx, r, "design")
	if err != nil {
		return err
	}
	for _, a := range st.ApprovedBy {
		p.say("loop", "approvedBy: %s (via %s member %s, record %s)", a.Login, a.Provenance.Channel, a.Provenance.Member, a.Provenance.RecordURL)
	}
	return nil
}

// complete takes the work through design, implementation and review.
func (t *story) complete(ctx context.Context) error {
	s, p, r, root, number := t.s, t.p, t.ref, t.root, t.number
	at, err := p.writeArtifact(number, "design.md", "# Design\n\nA token bucket per API token in Redis.\n")
	if err != nil {
		return err
	}
	p.say("agent", "writes %s, then: the-loop graph complete %s", at, r)
	if err := p.agent().Complete(ctx, r, nil); err != nil {
		return err
	}
	if _, err := p.waitNode(ctx, r, "design-approval"); err != nil {
		return err
	}
	if _, err := s.say(root, "approved"); err != nil {
		return err
	}
	p.say("person", "alice answers the design approval in Slack: %q", "approved")
	if _, err := p.waitNode(ctx, r, "implementation"); err != nil {
		return err
	}
	p.say("agent", "implements and opens a pull request, then: the-loop graph complete %s", r)
	if err := p.agent().Complete(ctx, r, nil); err != nil {
		return err
	}
	if _, err := p.waitNode(ctx, r, "review"); err != nil {
		return err
	}
	if err := s.comment(number, "Reviewed the pull request: ship it"); err != nil {
		return err
	}
	p.say("person", "alice reviews on GitHub: %q", "Reviewed the pull request: ship it")
	if _, err := p.waitNode(ctx, r, "complete"); err != nil {
		return err
	}
	_, err = p.waitSlack(ctx, root, string(catalog.WorkItemComplete))
	return err
}

// newIssue is a top-level Slack message that opens an issue.
func (t *story) newIssue(ctx context.Context) error {
	s, p := t.s, t.p
	text := "Add a health endpoint to the admin server\n\nOperators need it for their load balancer."
	before := len(s.GitHub.Issues(Repo))
	ts, err := s.say("", text)
	if err != nil {
		return err
	}
	p.say("person", "alice posts at the top of the channel: %q", strings.SplitN(text, "\n", 2)[0])
	var url string
	if err := p.wait(ctx, "the new issue", func() (bool, error) {
		all := s.GitHub.Issues(Repo)
		if len(all) > before {
			url = all[len(all)-1].HTMLURL
			return true, nil
		}
		return false, nil
	}); err != nil {
		return err
	}
	_, err = p.waitSlack(ctx, ts, url)
	return err
}
