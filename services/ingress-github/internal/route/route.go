// Package route turns one GitHub delivery — a webhook, or a payload the
// poller synthesised — into the catalog events ingress-github publishes, or
// into a drop with its reason. It is pure: no I/O, no clock, no logging.
//
// Order (docs/requirements.md K3): event filter → work-item extraction →
// comment classification (self-authored marker, authorization, envelope) or
// activity authorization (lifecycle closes bypass it; CI events need an
// authorized sender or the repository's own branch, see ci.go).
// Delivery-id dedup is the caller's (it needs the seen KV).
package route

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/identity"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Source is the ce-source of every event ingress-github raises.
const Source = "github"

// Drop reasons (routing.dropped). The first five are the original's.
const (
	DropDisabledEvent  = "disabled-event"
	DropDuplicate      = "duplicate-delivery"
	DropNoWorkItem     = "no-work-item"
	DropSelfAuthored   = "self-authored"
	DropUnauthorized   = "unauthorized-actor"
	DropForgedMarker   = "forged-marker"   // the marker, posted by someone not trusted (docs/requirements.md R6.1)
	DropCommentChanged = "comment-changed" // an edit or delete: not a new comment
	DropDuplicateEvent = "duplicate-event" // every event already published (e.g. by the other mode)
	DropForkCI         = "fork-ci"         // CI from a fork, or not shown to be the repository's own, from an unauthorized sender
)

// Notes are facts worth a log record that do not drop the delivery.
const (
	// NoteForgedEnvelope: an envelope that does not verify for the record it
	// sits in — another key, a copy from another record, an edited text, or
	// a version 1 envelope. The comment is judged as an ordinary comment by
	// its poster.
	NoteForgedEnvelope    = "forged-envelope"
	NoteMalformedEnvelope = "malformed-envelope" // likewise
	NoteEnvelopeUnread    = "envelope-unread"    // an untrusted poster's envelope, dropped unparsed (abuse 4)
	NotePayloadTruncated  = "payload-truncated"
	NoteCommentTruncated  = "comment-truncated"
)

// DefaultEvents is the original's default event set (docs/requirements.md K2).
var DefaultEvents = []string{
	"issues", "issue_comment", "pull_request", "pull_request_review",
	"pull_request_review_comment", "workflow_run", "check_run", "check_suite", "status",
}

// Size limits of what one event carries. NATS refuses a message over the
// server's max_payload (1 MiB by default) and protojson writes the payload
// bytes in base64 (×4/3), so a raw payload above MaxPayloadBytes is replaced
// by a summary marked payload_truncated (see truncatePayload).
const (
	MaxPayloadBytes = 600 << 10
	// MaxCommentBytes bounds a comment body. GitHub caps bodies at 65,536
	// characters (≤ 256 KiB of UTF-8); only a forged or synthetic payload
	// can exceed it.
	MaxCommentBytes = 256 << 10
)

// Delivery is one GitHub delivery.
type Delivery struct {
	Event      string // X-GitHub-Event
	DeliveryID string // X-GitHub-Delivery, or the poller's synthetic id
	Payload    []byte // the raw JSON object
	Received   time.Time
}

// Policy is what routing reads from config. Read it per delivery: the
// operator config is reloaded live.
type Policy struct {
	// Events is the enabled event set; nil means DefaultEvents.
	Events []string
	// Directory is routing.authorizedUsers.
	Directory *identity.Directory
	// LedgerLogin is the ledger's own GitHub login ("" when unknown): its
	// envelope-carrying comments are records whatever Directory says, and
	// its marker-stamped comments are the agent's. It is never a person:
	// agents post with its token, so an entry naming it authorizes nothing
	// (docs/decisions/027-ledger-login-is-not-a-person.md).
	LedgerLogin string
	// EnvelopeKey verifies ledger envelopes.
	EnvelopeKey []byte
	// MaxPayload overrides MaxPayloadBytes (tests); 0 keeps it.
	MaxPayload int
	// Linked are the work items sessions linked to the pull request the
	// delivery is about (PullRequestRef), read by the caller from the
	// links bucket: the pull request's events reach them too.
	Linked []string
}

// Decision is what Route decided.
type Decision struct {
	// Events to publish, in order; empty when dropped.
	Events []*loopv1.Event
	// Drop is the reason nothing is published.
	Drop string
	// Kind is the catalog type of the events, or "" when dropped.
	Kind catalog.Type
	// Action is the payload's action; Actor the login the event is
	// attributed to; Refs the extracted work items.
	Action string
	Actor  string
	Refs   []string
	// Notes are log-worthy facts (forged-envelope, …).
	Notes []string
	// CommentEvent is, for a comment, the id its event has (or would have
	// had): what a routing.forged_envelope record names.
	CommentEvent string
	// Sender is who triggered a CI event, and Admitted why it may reach a
	// session (AdmitAuthorizedSender or AdmitOwnBranch; "" when dropped or
	// not CI).
	Sender, Admitted string
}

// Route classifies one delivery, whose payload Decode parsed.
func Route(d Delivery, payload Payload, pol Policy) Decision {
	p := payload.o
	dec := Decision{Action: p.str("action")}
	events := pol.Events
	if events == nil {
		events = DefaultEvents
	}
	if !slices.Contains(events, d.Event) {
		dec.Drop = DropDisabledEvent
		return dec
	}
	items := ExtractWorkItems(d.Event, p)
	if len(pol.Linked) > 0 {
		items = withLinks(items, PullRequestRef(d.Event, payload), pol.Linked)
	}
	for _, it := range items {
		dec.Refs = append(dec.Refs, it.Ref.String())
	}
	dec.Actor = Actor(d.Event, p)
	if len(items) == 0 {
		dec.Drop = DropNoWorkItem
		return dec
	}
	switch d.Event {
	case "issue_comment", "pull_request_review_comment":
		if dec.Action != "created" {
			dec.Drop = DropCommentChanged
			return dec
		}
		routeComment(&dec, d, p, p.obj("comment"), pol)
		return dec
	case "pull_request_review":
		review := p.obj("review")
		if dec.Action == "edited" {
			dec.Drop = DropCommentChanged
			return dec
		}
		if dec.Action == "submitted" && strings.TrimSpace(review.str("body")) != "" {
			routeComment(&dec, d, p, review, pol)
			return dec
		}
	}
	routeActivity(&dec, d, p, pol)
	return dec
}

// routeActivity: lifecycle, review and CI events become work-item.activity.
// A named actor must be authorized, except for a lifecycle close, which
// bypasses the guard (so the-loop's own sessions are cleaned up) and can
// never instruct anything.
func routeActivity(dec *Decision, d Delivery, p obj, pol Policy) {
	closing := (d.Event == "issues" || d.Event == "pull_request") && dec.Action == "closed"
	var actor *loopv1.Actor
	if !isLedger(pol, dec.Actor) {
		actor = resolve(pol.Directory, dec.Actor)
	}
	if dec.Actor != "" && actor == nil && !closing {
		dec.Drop = DropUnauthorized
		return
	}
	if ciEvents[d.Event] {
		dec.Sender = p.obj("sender").str("login")
		if dec.Admitted = admitCI(d.Event, p, pol, dec.Sender); dec.Admitted == "" {
			dec.Drop = DropForkCI
			return
		}
	}
	raw := d.Payload
	max := pol.MaxPayload
	if max <= 0 {
		max = MaxPayloadBytes
	}
	if len(raw) > max {
		raw = truncatePayload(d.Event, p, len(d.Payload), sum(d.Payload))
		dec.Notes = append(dec.Notes, NotePayloadTruncated)
	}
	body := &loopv1.Event_GithubActivity{GithubActivity: &loopv1.GitHubActivity{
		Event: d.Event, Action: dec.Action, DeliveryId: d.DeliveryID, Payload: raw, WorkItems: dec.Refs,
	}}
	dec.Kind = catalog.WorkItemActivity
	dec.Events = fanOut(envelope.GitHubID(d.DeliveryID), "", dec.Refs, func(ev *loopv1.Event) {
		ev.Type = string(catalog.WorkItemActivity)
		ev.Time = envelope.NewTime(d.Received)
		ev.Actor = actor
		ev.Body = body
	})
}

// routeComment classifies a new comment (issue or PR conversation comment,
// review comment, or a review with a body) into exactly one of
// comment.human, comment.agent or ledger.record, or drops it.
func routeComment(dec *Decision, d Delivery, p obj, c obj, pol Policy) {
	poster := login(c)
	dec.Actor = poster
	dec.CommentEvent = commentID(d, c)
	body := c.str("body")
	ledger := isLedger(pol, poster)
	var person *loopv1.Actor
	if !ledger {
		person = resolve(pol.Directory, poster)
	}
	authorized := person != nil
	trusted := authorized || ledger
	hasEnvelope := strings.Contains(body, envelopeOpen)

	if envelope.HasSelfMarker(body) {
		switch {
		case !trusted:
			dec.Drop = DropForgedMarker
		case hasEnvelope:
			// The-loop's own record (a mirror or the ask): both
			// ingresses drop it; the channel that raised it has it (R3.7).
			dec.Drop = DropSelfAuthored
		default:
			build(dec, d, p, c, catalog.CommentAgent, person, "", nil)
		}
		return
	}
	if hasEnvelope && trusted {
		// Verified against the record the comment is on, as GitHub says,
		// never as the envelope or the text says.
		l, err := envelope.ParseLedger(pol.EnvelopeKey, recordOf(d.Event, p), body)
		switch {
		case err == nil:
			actor := reattribute(pol, l, person)
			build(dec, d, p, c, catalog.LedgerRecord, actor, l.ID, &l)
			return
		case errors.Is(err, envelope.ErrForged):
			dec.Notes = append(dec.Notes, NoteForgedEnvelope)
		default:
			dec.Notes = append(dec.Notes, NoteMalformedEnvelope)
		}
		// Not an envelope: judged as an ordinary comment by its poster.
	}
	if authorized {
		build(dec, d, p, c, catalog.CommentHuman, person, "", nil)
		return
	}
	if hasEnvelope {
		// Abuse 4: an untrusted poster's envelope is never parsed.
		dec.Notes = append(dec.Notes, NoteEnvelopeUnread)
		dec.Drop = DropUnauthorized
		return
	}
	if collaborator(c.str("author_association")) {
		// Mirrored to channels, never instructs: no actor (see Authorized).
		build(dec, d, p, c, catalog.CommentHuman, nil, "", nil)
		return
	}
	dec.Drop = DropUnauthorized
}

// envelopeOpen is how an envelope starts (pkg/envelope writes
// "<!-- the-loop:envelope {…} -->"). Only its presence is tested before the
// poster is trusted.
const envelopeOpen = "<!-- the-loop:envelope "

// Authorized reports whether an event from ingress-github speaks for an
// authorized person: its actor names a GitHub login. A collaborator's
// comment.human carries no actor, so it is mirrored but never instructs.
func Authorized(ev *loopv1.Event) bool { return ev.GetActor().GetGithub() != "" }

func collaborator(assoc string) bool {
	switch strings.ToUpper(assoc) {
	case "OWNER", "MEMBER", "COLLABORATOR":
		return true
	}
	return false
}

// resolve returns the authorized person behind a GitHub login, or nil.
func resolve(dir *identity.Directory, login string) *loopv1.Actor {
	if login == "" {
		return nil
	}
	pr, ok := dir.ByChannel(identity.ChannelGitHub, login)
	if !ok || pr.GitHub == "" {
		return nil
	}
	return &loopv1.Actor{Github: pr.GitHub, Slack: pr.Slack, Name: pr.Name}
}

// reattribute is a record's actor: the envelope's person when that person's
// own entry names a GitHub login that is authorized (and is not the ledger's
// own), otherwise the poster (abuse 3), or nobody when the poster is the
// ledger login (still a record, but it instructs nothing).
func reattribute(pol Policy, l envelope.Ledger, poster *loopv1.Actor) *loopv1.Actor {
	dir := pol.Directory
	var pr identity.Person
	var ok bool
	if l.Actor.GitHub != "" {
		pr, ok = dir.ByChannel(identity.ChannelGitHub, l.Actor.GitHub)
	} else if l.Actor.Slack != "" {
		pr, ok = dir.ByChannel(identity.ChannelSlack, l.Actor.Slack)
	}
	if ok && pr.GitHub != "" && !isLedger(pol, pr.GitHub) && dir.Authorized(identity.ChannelGitHub, pr.GitHub) {
		return &loopv1.Actor{Github: pr.GitHub, Slack: pr.Slack, Name: pr.Name}
	}
	return poster
}

// isLedger reports whether login is the ledger's own.
func isLedger(pol Policy, login string) bool {
	return login != "" && pol.LedgerLogin != "" && strings.EqualFold(login, pol.LedgerLogin)
}

// recordOf is the record a comment of event sits on: its repository and the
// number of its issue or pull request (GitHub numbers both from one sequence,
// and the ledger writes a pull request's records as issue comments on it).
// A payload that names no number matches no record: 0 is a new issue's body,
// which a comment never is.
func recordOf(event string, p obj) envelope.Binding {
	n, ok := entity(event, p).int("number")
	if !ok || n <= 0 {
		n = -1
	}
	return envelope.Binding{Repo: p.obj("repository").str("full_name"), Number: int(n)}
}

// build makes the comment-derived events. Their ids come from the comment,
// not the delivery, so the webhook and the poller raise the same ids for the
// same comment and the bus stores it once (decision 010).
func build(dec *Decision, d Delivery, p, c obj, typ catalog.Type, actor *loopv1.Actor, recorded string, l *envelope.Ledger) {
	id, _ := c.int("id")
	base := commentID(d, c)
	body := c.str("body")
	if len(body) > MaxCommentBytes {
		body = truncateUTF8(body, MaxCommentBytes)
		dec.Notes = append(dec.Notes, NoteCommentTruncated)
	}
	cm := &loopv1.Comment{
		CommentId:         id,
		Url:               c.str("html_url"),
		Author:            login(c),
		AuthorAssociation: c.str("author_association"),
		Body:              body,
		// What the session's excerpt shows of a comment besides its body
		// and URL: an inline comment's anchor, a review's state.
		Path: c.str("path"),
	}
	if line, ok := c.int("line"); ok {
		cm.Line = &line
	}
	if d.Event == "pull_request_review" {
		cm.ReviewState = c.str("state")
	}
	when := parseTime(c.str("created_at"))
	if when.IsZero() {
		when = parseTime(c.str("submitted_at"))
	}
	if when.IsZero() {
		when = d.Received
	}
	number, _ := entity(d.Event, p).int("number")
	ledgerRef := &loopv1.LedgerRef{Repo: p.obj("repository").str("full_name"), IssueNumber: number, CommentId: id, Url: cm.Url}
	dec.Kind = typ
	dec.Events = fanOut(base, recorded, dec.Refs, func(ev *loopv1.Event) {
		ev.Type = string(typ)
		ev.Time = envelope.NewTime(when)
		ev.Actor = actor
		ev.Ledger = ledgerRef
		if l != nil {
			// The gate visit travels on from the verified envelope only.
			ev.Body = &loopv1.Event_LedgerRecord{LedgerRecord: &loopv1.LedgerRecord{EventId: l.ID, EventType: l.Type, Comment: cm, GateVisit: l.Visit}}
			if l.Conversation.Channel != "" {
				ev.Conversation = &loopv1.Conversation{Channel: l.Conversation.Channel, ThreadTs: l.Conversation.ThreadTS}
			}
			return
		}
		ev.Body = &loopv1.Event_Comment{Comment: cm}
	})
}

// commentID is the id of a comment's (first) event: from the comment, so the
// webhook and the poller agree, else from the delivery.
func commentID(d Delivery, c obj) string {
	if id, _ := c.int("id"); id > 0 {
		return "gh:" + commentKind(d.Event) + ":" + strconv.FormatInt(id, 10)
	}
	return envelope.GitHubID(d.DeliveryID)
}

// commentKind names the id space of a comment: GitHub numbers issue
// comments, review comments and reviews separately.
func commentKind(event string) string {
	switch event {
	case "pull_request_review_comment":
		return "review-comment"
	case "pull_request_review":
		return "review"
	}
	return "issue-comment"
}

// entity is the issue or PR the comment sits on.
func entity(event string, p obj) obj {
	if event == "issue_comment" || event == "issues" {
		if is := p.obj("issue"); is != nil {
			return is
		}
	}
	return p.obj("pull_request")
}

// fanOut makes one event per work item. The first ref's event has id base;
// another ref's event has id base + "/" + ref (hashed when too long) and
// causation_id base, so a consumer that maps several refs to one session
// can tell the copies of one delivery apart from new events. causation is
// the first event's causation_id (a record's recorded event).
func fanOut(base, causation string, refs []string, fill func(*loopv1.Event)) []*loopv1.Event {
	out := make([]*loopv1.Event, 0, len(refs))
	for i, ref := range refs {
		ev := &loopv1.Event{Id: base, Source: Source, Subject: ref, CausationId: causation}
		if i > 0 {
			ev.Id = SecondaryID(base, ref)
			ev.CausationId = base
		}
		fill(ev)
		out = append(out, ev)
	}
	return out
}

// SecondaryID is the id of the copy of event base on another work item.
func SecondaryID(base, ref string) string {
	id := base + "/" + ref
	if len(id) > 200 || strings.ContainsAny(ref, " \"\\") {
		s := sha256.Sum256([]byte(ref))
		id = base + "/" + hex.EncodeToString(s[:12])
	}
	return id
}

func parseTime(s string) time.Time {
	if s == "" {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}
	}
	return t
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}

// PayloadDigest is the hex SHA-256 of a payload: the name its whole body is
// kept under when it is too large for one message.
func PayloadDigest(b []byte) string { return sum(b) }

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// truncatePayload is the stand-in for a payload too large for one bus
// message: the identifying fields every consumer routes on, plus
// payload_truncated, the original size and its SHA-256. The service keeps
// the whole body in the payloads object store and sets payload_ref.
func truncatePayload(event string, p obj, size int, digest string) []byte {
	keep := func(o obj, keys ...string) map[string]any {
		if o == nil {
			return nil
		}
		out := map[string]any{}
		for _, k := range keys {
			if v, ok := o[k]; ok {
				switch v.(type) {
				case map[string]any, []any:
					continue
				}
				out[k] = v
			}
		}
		return out
	}
	names := func(o obj) []string {
		var out []string
		for _, l := range o.objs("labels") {
			out = append(out, l.str("name"))
		}
		return out
	}
	s := map[string]any{
		"payload_truncated": true,
		"payload_bytes":     size,
		"payload_sha256":    digest,
	}
	if a := p.str("action"); a != "" {
		s["action"] = a
	}
	if r := keep(p.obj("repository"), "id", "full_name", "html_url"); r != nil {
		s["repository"] = r
	}
	if u := keep(p.obj("sender"), "login", "id"); u != nil {
		s["sender"] = u
	}
	if l := keep(p.obj("label"), "name"); l != nil {
		s["label"] = l
	}
	for _, k := range []string{"issue", "pull_request"} {
		if o := p.obj(k); o != nil {
			e := keep(o, "id", "number", "html_url", "state", "title", "merged", "draft")
			e["labels"] = names(o)
			if h := keep(o.obj("head"), "ref", "sha"); h != nil {
				e["head"] = h
			}
			if o.has("pull_request") {
				e["pull_request"] = map[string]any{}
			}
			s[k] = e
		}
	}
	for _, k := range []string{"workflow_run", "check_run", "check_suite"} {
		if o := p.obj(k); o != nil {
			e := keep(o, "id", "name", "status", "conclusion", "head_branch", "head_sha", "html_url", "event")
			var prs []map[string]any
			for _, pr := range o.objs("pull_requests") {
				prs = append(prs, keep(pr, "id", "number"))
			}
			if prs != nil {
				e["pull_requests"] = prs
			}
			s[k] = e
		}
	}
	if event == "status" {
		for _, k := range []string{"state", "context", "sha", "target_url"} {
			if v := p.str(k); v != "" {
				s[k] = v
			}
		}
	}
	b, err := json.Marshal(s)
	if err != nil {
		return []byte(`{"payload_truncated":true}`)
	}
	return b
}
