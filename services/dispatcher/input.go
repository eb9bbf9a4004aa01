package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/excerpt"
	"github.com/the-loop/bus/pkg/graph"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// input is one consumed event as the dispatcher reads it: what a session
// would be told, who said it, and what it may do.
type input struct {
	ev  *loopv1.Event
	ref string
	// ghEvent, action and deliveryID are the $event, $action and
	// $delivery_id of the prompt.
	ghEvent, action, deliveryID string
	// excerptEvent and payload are what the excerpt is computed from: the
	// raw webhook payload, or a comment payload built from the event.
	// payloadRef names the whole payload in the object store when the
	// event carries only its summary (see wholePayload).
	excerptEvent string
	payload      []byte
	payloadRef   string
	repository   string
	// body is the text control keywords are parsed from; parse says
	// whether to parse at all (comment and review bodies and relayed
	// control records only, docs/requirements.md K7).
	body  string
	parse bool
	// relayed: a ledger record of a channel-originated control command.
	relayed bool
	// actor is the GitHub login the event speaks for ("" none); slack the
	// Slack id of a channel reply's person.
	actor, slack string
	// note is the comment URL a recorded command points at.
	note string
	// closing: an issues/pull_request closed activity; labeled: the
	// activity carries the auto-execute label; unlabeled: it removed it.
	closing, labeled, unlabeled bool
	// entity is the number of the issue or PR a lifecycle event is about;
	// merged says a closed PR was merged.
	entity int64
	merged bool
	// last: this is the bus's last delivery of the event (a failure now
	// dead-letters it); redelivered: it is not the first.
	last, redelivered bool
	// gate: the event may answer a human gate (a comment, or a relayed
	// gate-feedback or control record); gateBody is what the gate reads
	// (through graph.RelayedText) and prov where it came from.
	gate     bool
	gateBody string
	prov     graph.Provenance
	// visit is the gate visit a relayed button answer was given for, from
	// its signed envelope ("" for a typed answer, which answers whatever
	// gate is current).
	visit string
	// pr is the number of the pull request the event is about (0: none),
	// prHead its head branch when it is a branch of the same repository,
	// and workItems every work item the delivery was routed to
	// (routing.tmux.sessionPerPr decides by them).
	pr        int64
	prHead    string
	workItems []string
	// prFor: the event spawns its pull request's own session, for this
	// work item (sessionPerPr).
	prFor string
}

// read turns ev into an input; ok is false for an event sessions never see
// (the channels' types, graph notifications, other ledger records).
func (s *Service) read(ev *loopv1.Event) (in *input, ok bool) {
	in = &input{ev: ev, ref: ev.GetSubject(), deliveryID: ev.GetId(), actor: ev.GetActor().GetGithub(),
		slack: ev.GetActor().GetSlack(), repository: ev.GetLedger().GetRepo()}
	if in.repository == "" {
		in.repository = repoOf(in.ref)
	}
	switch catalog.Type(ev.GetType()) {
	case catalog.CommentHuman:
		c := ev.GetComment()
		in.ghEvent, in.action = commentEvent(ev.GetId())
		in.excerptEvent = in.ghEvent
		in.payload = commentPayload(in.ghEvent, c)
		in.body, in.parse, in.note = c.GetBody(), true, c.GetUrl()
		in.gate, in.gateBody = true, c.GetBody()
		in.pr = pullNumber(c.GetUrl())
		in.prov = graph.Provenance{Channel: "github", RecordURL: c.GetUrl(), EventID: ev.GetId()}
		return in, true
	case catalog.WorkItemReply:
		// A channel member's answer, delivered as their input; a reply is
		// never parsed for control (channel control is its own grant).
		in.ghEvent, in.action = string(catalog.WorkItemReply), ev.GetSource()
		in.excerptEvent = "issue_comment"
		in.payload = commentPayload("issue_comment", &loopv1.Comment{Body: ev.GetReply().GetText(),
			Url: ev.GetLedger().GetUrl(), Author: displayName(ev.GetActor())})
		return in, true
	case catalog.CriticFindings:
		// A critic round the session asked for, recorded on the work
		// item: delivered as the critic's comment there.
		n := ev.GetNotification()
		in.ghEvent, in.action = string(catalog.CriticFindings), n.GetDetail()["critic"]
		in.excerptEvent = "issue_comment"
		in.payload = commentPayload("issue_comment", &loopv1.Comment{Body: criticComment(n),
			Url: ev.GetLedger().GetUrl(), Author: "critic " + n.GetDetail()["critic"]})
		return in, true
	case catalog.LedgerRecord:
		r := ev.GetLedgerRecord()
		text := graph.RelayedText(envelope.StripLedger(r.GetComment().GetBody()))
		in.note = r.GetComment().GetUrl()
		in.ghEvent, in.action = r.GetEventType(), "recorded"
		// The session is shown the record as GitHub delivered it: the
		// excerpt of its comment, poster and envelope included, as of any
		// other comment (the gate and the control seam read the relayed
		// text; the excerpt only informs).
		in.excerptEvent, _ = commentEvent(ev.GetId())
		in.payload = commentPayload(in.excerptEvent, r.GetComment())
		in.gate, in.gateBody = true, r.GetComment().GetBody()
		in.prov = recordProvenance(ev)
		switch catalog.Type(r.GetEventType()) {
		case catalog.ControlCommand:
			in.body, in.parse, in.relayed = text, true, true
			return in, true
		case catalog.GateFeedback:
			in.visit = r.GetGateVisit()
			return in, true
		}
		return nil, false
	case catalog.WorkItemActivity:
		a := ev.GetGithubActivity()
		in.ghEvent, in.action, in.deliveryID = a.GetEvent(), a.GetAction(), a.GetDeliveryId()
		if in.deliveryID == "" {
			in.deliveryID = ev.GetId()
		}
		in.excerptEvent, in.payload, in.payloadRef = a.GetEvent(), a.GetPayload(), a.GetPayloadRef()
		var p activityPayload
		_ = json.Unmarshal(a.GetPayload(), &p) // a payload we cannot read carries no label and no entity
		if p.Repository.FullName != "" {
			in.repository = p.Repository.FullName
		}
		lifecycle := in.ghEvent == "issues" || in.ghEvent == "pull_request"
		in.closing = lifecycle && in.action == "closed"
		switch in.ghEvent {
		case "issues":
			in.entity = p.Issue.Number
		case "pull_request":
			in.entity, in.merged = p.PullRequest.Number, p.PullRequest.Merged
		}
		in.workItems = a.GetWorkItems()
		switch {
		case p.PullRequest.Number > 0:
			in.pr = p.PullRequest.Number
			if h := p.PullRequest.Head; h.Repo.FullName != "" && strings.EqualFold(h.Repo.FullName, p.Repository.FullName) {
				in.prHead = h.Ref
			}
		case p.Issue.PullRequest != nil:
			in.pr = p.Issue.Number
		}
		in.labeled = carriesLabel(p, in.action, s.set.Label)
		in.unlabeled = in.action == "unlabeled" && p.Label.Name == s.set.Label
		return in, true
	}
	return nil, false
}

// wholePayload puts the whole payload of an activity too large for one
// message, kept in the object store (decision 012), in place of the summary
// the event carries, so that the session is shown the excerpt of the
// delivery itself. An object gone with its TTL (a replay of an old event)
// leaves the summary, which still names what the event is about; any other
// failure is retried.
func (s *Service) wholePayload(ctx context.Context, in *input) error {
	if in.payloadRef == "" {
		return nil
	}
	if bucket, _, _ := strings.Cut(in.payloadRef, "/"); bucket != bus.ObjectPayloads {
		s.deps.Log.Warn("dispatcher: a payload reference outside the payload store; showing the summary",
			"event_id", in.ev.GetId(), "payload_ref", in.payloadRef)
		return nil
	}
	b, err := s.deps.Conn.GetObject(ctx, in.payloadRef)
	switch {
	case errors.Is(err, bus.ErrNotFound):
		s.deps.Log.Warn("dispatcher: the whole payload is gone from the object store; showing the summary",
			"event_id", in.ev.GetId(), "payload_ref", in.payloadRef)
		return nil
	case err != nil:
		return fmt.Errorf("read the whole payload of %s: %w", in.ev.GetId(), err)
	}
	in.payload = b
	return nil
}

// render is the prompt of kind k for in.
func (s *Service) render(in *input, spawn bool, graphContext string) string {
	ex, _ := excerpt.Excerpt(in.excerptEvent, in.payload) // total: a malformed payload still yields "{}"
	d := promptData(in, ex, graphContext)
	if spawn {
		return s.templates().Render(promptSpawn, d)
	}
	return s.templates().Render(promptEvent, d)
}

// commentEvent names the GitHub event behind a comment.human id
// (gh:issue-comment:N, gh:review-comment:N, gh:review:N).
func commentEvent(id string) (event, action string) {
	switch {
	case strings.HasPrefix(id, "gh:review-comment:"):
		return "pull_request_review_comment", "created"
	case strings.HasPrefix(id, "gh:review:"):
		return "pull_request_review", "submitted"
	}
	return "issue_comment", "created"
}

// commentPayload is the webhook-shaped payload the excerpt reads for a
// comment that reached us as an event body rather than as a payload: the
// container of event with every field of it the excerpt shows (an inline
// comment's path and line, a review's state, the body, the URL, the author),
// so that its excerpt is the excerpt of the delivery itself.
func commentPayload(event string, c *loopv1.Comment) []byte {
	m := map[string]any{"body": c.GetBody()}
	if c.GetUrl() != "" {
		m["html_url"] = c.GetUrl()
	}
	if c.GetAuthor() != "" {
		m["user"] = map[string]any{"login": c.GetAuthor()}
	}
	key := "comment"
	if event == "pull_request_review" {
		key = "review"
		if c.GetReviewState() != "" {
			m["state"] = c.GetReviewState()
		}
	} else {
		if c.GetPath() != "" {
			m["path"] = c.GetPath()
		}
		if c.Line != nil {
			m["line"] = c.GetLine()
		}
	}
	b, _ := json.Marshal(map[string]any{key: m})
	return b
}

func displayName(a *loopv1.Actor) string {
	switch {
	case a.GetGithub() != "":
		return a.GetGithub()
	case a.GetName() != "":
		return a.GetName()
	}
	return a.GetSlack()
}

type activityPayload struct {
	Action string `json:"action"`
	Label  struct {
		Name string `json:"name"`
	} `json:"label"`
	Issue       entityPayload `json:"issue"`
	PullRequest entityPayload `json:"pull_request"`
	Repository  struct {
		FullName string `json:"full_name"`
	} `json:"repository"`
}

type entityPayload struct {
	Number int64 `json:"number"`
	Merged bool  `json:"merged"`
	// Head is a pull request's head branch.
	Head struct {
		Ref  string `json:"ref"`
		Repo struct {
			FullName string `json:"full_name"`
		} `json:"repo"`
	} `json:"head"`
	// PullRequest is present on an issue that is a pull request.
	PullRequest json.RawMessage `json:"pull_request"`
	Labels      []struct {
		Name string `json:"name"`
	} `json:"labels"`
}

// carriesLabel is event_carries_label (docs/requirements.md K5): labeled with
// the label, or the issue or PR already wearing it. Exact and case-sensitive.
func carriesLabel(p activityPayload, action, label string) bool {
	if label == "" {
		return false
	}
	if action == "unlabeled" && p.Label.Name == label {
		return false
	}
	if action == "labeled" && p.Label.Name == label {
		return true
	}
	for _, e := range []entityPayload{p.Issue, p.PullRequest} {
		for _, l := range e.Labels {
			if l.Name == label {
				return true
			}
		}
	}
	return false
}

// repoOf is owner/repo of a github:[host/]owner/repo#N ref, "" otherwise.
func repoOf(ref string) string {
	_, rest, ok := strings.Cut(ref, ":")
	if !ok {
		return ""
	}
	path, _, _ := strings.Cut(rest, "#")
	parts := strings.Split(path, "/")
	if len(parts) < 2 {
		return ""
	}
	return strings.Join(parts[len(parts)-2:], "/")
}

// numberOf is N of a ref ending in #N, or 0.
func numberOf(ref string) int64 {
	i := strings.LastIndexByte(ref, '#')
	if i < 0 {
		return 0
	}
	n, err := strconv.ParseInt(ref[i+1:], 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// recordProvenance is where a relayed record came from (R6.3): the channel
// the recorded event was raised on, the member's id there, the ledger
// record's URL and the recorded event's id. The read-back does not carry the
// envelope's source, so the channel is read from the recorded event's id,
// whose prefix names it (slack:…, gh:…, loop:…).
func recordProvenance(ev *loopv1.Event) graph.Provenance {
	r := ev.GetLedgerRecord()
	p := graph.Provenance{RecordURL: r.GetComment().GetUrl(), EventID: r.GetEventId()}
	prefix, _, _ := strings.Cut(r.GetEventId(), ":")
	switch prefix {
	case "slack":
		p.Channel, p.Member = "slack", ev.GetActor().GetSlack()
	case "gh":
		p.Channel = "github"
	case "":
		p.Channel = ev.GetSource()
	default:
		p.Channel = prefix
	}
	if p.EventID == "" {
		p.EventID = ev.GetId()
	}
	return p
}

// pullPath finds the pull request a comment's URL is on.
var pullPath = regexp.MustCompile(`/pull/(\d+)(?:[/#?]|$)`)

// pullNumber is the pull request a comment URL is on, 0 when it is on an
// issue.
func pullNumber(url string) int64 {
	m := pullPath.FindStringSubmatch(url)
	if m == nil {
		return 0
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}
