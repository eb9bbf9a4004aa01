package ledgerwriter

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/redact"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// GitHub's documented limits (testdata/github-rest): an issue title holds 256
// characters, a body or comment 65,536.
const (
	maxTitle = 256
	maxBody  = 65536
	// maxText bounds the relayed text so the header, the envelope (at most
	// envelope.MaxEnvelopeBytes) and the marker always fit in maxBody.
	maxText = maxBody - envelope.MaxEnvelopeBytes - 1024
)

const truncatedNote = "\n\n… (truncated by the-loop: the message exceeded GitHub's size limit)"

// record is what the writer puts on GitHub for one event.
type record struct {
	kind catalog.Record
	// ref is the work item a comment goes on (not set for an issue).
	ref repoRef
	// owner/repo, title and labels of a new issue (kind RecordIssue).
	owner, repo, title string
	labels             []string
	body               string
}

// renderInput is everything a record depends on besides the event: the
// config in force and the envelope key. Rendering is pure, so the goldens pin
// it exactly.
type renderInput struct {
	key     []byte
	grammar control.Grammar
	people  *identity.Directory
	scrub   func(string) string
	kickoff struct {
		repo   string
		labels []string
	}
}

// renderError is a reason no retry can fix.
type renderError struct {
	reason string
	err    error
}

func (e *renderError) Error() string { return e.err.Error() }
func (e *renderError) Unwrap() error { return e.err }

func refuse(reason, format string, args ...any) error {
	return &renderError{reason: reason, err: fmt.Errorf(format, args...)}
}

// render builds the record of ev per docs/requirements.md R3.3–R3.6 and K19.
// The envelope is sealed to the record: the work item's repository and number
// (a kickoff's new issue: its repository and number 0) and the body's visible
// text (docs/decisions/025-envelope-bound-to-its-record.md).
func render(in renderInput, ev *loopv1.Event, kind catalog.Record) (record, error) {
	person, err := resolveActor(in.people, ev, kind)
	if err != nil {
		return record{}, err
	}
	// A button answer names the gate visit it was given for; it is signed
	// into the envelope so the dispatcher applies the answer to that visit
	// only (docs/decisions/031-stale-gate-presses-refused.md).
	visit := ev.GetGateFeedback().GetGateVisit()
	if _, err := graph.ParseVisit(visit); visit != "" && err != nil {
		return record{}, refuse("invalid", "gate visit of %s: %w", ev.GetId(), err)
	}
	rec := record{kind: kind}
	var at envelope.Binding
	if kind != catalog.RecordIssue {
		r, ok := parseRef(ev.GetSubject())
		if !ok {
			return record{}, refuse("bad-ref", "work item %q is not a github:owner/repo#N ref", ev.GetSubject())
		}
		rec.ref = r
		at = envelope.Binding{Repo: r.FullName(), Number: r.Number}
	}
	compose, err := composer(in, ev, kind, &rec, &at)
	if err != nil {
		return record{}, err
	}
	body, err := envelope.SealLedger(in.key, envelope.Ledger{
		ID: ev.GetId(), Type: ev.GetType(), Source: ev.GetSource(),
		Actor: envelope.LedgerActor{GitHub: person.GitHub, Slack: person.Slack, Name: person.Name},
		Conversation: envelope.LedgerConversation{
			Channel: ev.GetConversation().GetChannel(), ThreadTS: threadOf(ev),
		},
		Visit: visit,
	}, in.grammar.Keywords(), at, compose)
	if err != nil {
		if errors.Is(err, envelope.ErrUnsafe) {
			return record{}, refuse("unsafe-envelope", "envelope of %s: %w", ev.GetId(), err)
		}
		return record{}, err
	}
	rec.body = body
	return rec, nil
}

// composer is how the record of kind wraps ev's text around the envelope
// comment: compose builds the body from the envelope. It fills rec and at
// for a kickoff's new issue.
func composer(in renderInput, ev *loopv1.Event, kind catalog.Record, rec *record, at *envelope.Binding) (compose func(env string) string, err error) {
	member := memberID(ev)
	switch kind {
	case catalog.RecordQuestion:
		// R3.3: the question comment itself, carrying the envelope so
		// ingress-github does not also publish it as comment.agent. The
		// agent wrote it and may have been told to paste its environment
		// ("$(env)"): it is scrubbed like every relayed text before it
		// is published.
		text := capText(in.scrub(ev.GetQuestion().GetText()))
		return func(env string) string { return envelope.MarkSelfAuthored(text + "\n\n" + env) }, nil
	case catalog.RecordMirror:
		// R3.4: exactly today's mirror (docs/requirements.md K19) plus the envelope
		// before the marker. Marker-stamped, so both ingresses drop it.
		text := in.grammar.Defang(in.scrub(ev.GetReply().GetText()))
		head := "🗣️ **the-loop** — reply from `" + member + "` on the **" + ev.GetSource() +
			"** channel, recorded here as the answer of record:\n\n" + redact.Quote(capText(text))
		return func(env string) string { return envelope.MarkSelfAuthored(head + "\n\n" + env) }, nil
	case catalog.RecordAttributed:
		// R3.5: unmarked, so the ledger's ingress judges it like a human's
		// comment. The relayed text stands alone between the attribution
		// line and the envelope, undefanged, so the gate classifies it and
		// the control keyword executes.
		text, err := relayedText(in, ev)
		if err != nil {
			return nil, err
		}
		head := attribution("Relayed from", member, ev.GetSource()) + ":\n\n" + capText(text)
		return func(env string) string { return head + "\n\n" + env + "\n" }, nil
	case catalog.RecordOperator:
		// The operator's move of the graph by hand, naming who and why
		// (docs/decisions/111-operator-escape-hatch.md). Marker-stamped, so
		// no ingress reads it back: the dispatcher applies the recorded
		// event itself, and no gate classifies the reason.
		head, err := operatorRecord(in, ev, member)
		if err != nil {
			return nil, err
		}
		return func(env string) string { return envelope.MarkSelfAuthored(head + "\n\n" + env) }, nil
	case catalog.RecordAnnouncement:
		// The loop's own words, marker-stamped so no ingress reads them
		// back (marks.go).
		head, err := announcement(ev)
		if err != nil {
			return nil, err
		}
		return func(env string) string { return envelope.MarkSelfAuthored(head + "\n\n" + env) }, nil
	case catalog.RecordFindings:
		// A critic's findings (docs/decisions/120-critics.md): marker-
		// stamped, so no ingress reads them back as a person's or the
		// agent's comment; the dispatcher delivers the fanned-out event to
		// the session. The critic read what the agent wrote and may have
		// been talked into pasting secrets or a keyword: scrubbed and
		// defanged like every relayed text.
		head, err := findingsRecord(in, ev)
		if err != nil {
			return nil, err
		}
		return func(env string) string { return envelope.MarkSelfAuthored(head + "\n\n" + env) }, nil
	case catalog.RecordIssue:
		// R3.6, abuse case 7: the repository and labels come from config
		// only, the body is scrubbed and carries the envelope and no
		// marker (the issue must be armable).
		return kickoff(in, ev, member, rec, at)
	default:
		return nil, fmt.Errorf("record kind %v is not written by the ledger", kind)
	}
}

// relayedText is the text an attributed record relays: a gate answer's, or
// a control command's (its keyword when the person typed none), scrubbed.
func relayedText(in renderInput, ev *loopv1.Event) (string, error) {
	var text string
	switch b := ev.GetBody().(type) {
	case *loopv1.Event_GateFeedback:
		text = in.scrub(b.GateFeedback.GetText())
	case *loopv1.Event_ControlCommand:
		orig := b.ControlCommand.GetText()
		if strings.TrimSpace(orig) == "" {
			orig = in.grammar.Keyword(control.Command(b.ControlCommand.GetCommand()))
		}
		text = in.scrub(orig)
		// Scrubbing must not change what the control seam reads:
		// relaying a different command than the person typed would
		// be worse than not relaying it.
		if in.grammar.Parse(text).Command != in.grammar.Parse(orig).Command {
			return "", refuse("scrub-changed-command", "scrubbing changed the control command of %s", ev.GetId())
		}
	default:
		return "", refuse("invalid", "%s has no relayable body", ev.GetType())
	}
	return text, nil
}

// operatorRecord is the visible text of an operator's graph override: the
// move, the person (when the CLI named one) and the reason, scrubbed and
// defanged like every relayed text.
func operatorRecord(in renderInput, ev *loopv1.Event, member string) (string, error) {
	o := ev.GetGraphOverride()
	if o == nil {
		return "", refuse("invalid", "%s has no graph override body", ev.GetId())
	}
	action := graph.Action(o.GetAction())
	if !action.Valid() {
		return "", refuse("invalid", "graph override %s: action %q", ev.GetId(), o.GetAction())
	}
	reason := strings.TrimSpace(o.GetReason())
	if reason == "" {
		return "", refuse("invalid", "graph override %s gives no reason", ev.GetId())
	}
	who := "the operator"
	if member != "unknown" {
		who = "the operator, as `" + neutral(member) + "`"
	}
	code := func(s string) string { return "`" + neutral(strings.ReplaceAll(s, "`", "'")) + "`" }
	move := code(o.GetFrom())
	switch {
	case o.GetTo() != "":
		move += " → " + code(o.GetTo())
	case action == graph.ActionSkip:
		move += " → its next node"
	case action == graph.ActionEscalate:
		move += " → its escalate edge"
	}
	text := in.grammar.Defang(in.scrub(reason))
	return "🛠️ **the-loop** — graph **" + string(action) + "** by " + who + ", on the **" + neutral(ev.GetSource()) +
		"** channel: " + move + ". Reason:\n\n" + redact.Quote(capText(text)), nil
}

// findingsRecord is the visible text of a critic round: which critic, on
// which node's artifact, how the round ended, and what it said.
func findingsRecord(in renderInput, ev *loopv1.Event) (string, error) {
	n := ev.GetNotification()
	d := n.GetDetail()
	if n == nil || d["critic"] == "" {
		return "", refuse("invalid", "critic findings %s name no critic", ev.GetId())
	}
	code := func(s string) string { return "`" + neutral(strings.ReplaceAll(s, "`", "'")) + "`" }
	head := "🔎 **the-loop** — critic " + code(d["critic"])
	if h := d["harness"]; h != "" {
		head += " (" + code(h) + ")"
	}
	if n.GetArtifact() != "" {
		head += " on " + code(n.GetArtifact())
	}
	if n.GetNode() != "" {
		head += " at node " + code(n.GetNode())
	}
	switch outcome := d["outcome"]; outcome {
	case "ok":
		head += ": its findings"
	default:
		head += ": the round **" + neutral(outcome) + "**"
		if why := d["error"]; why != "" {
			head += " (" + neutral(in.grammar.Defang(in.scrub(why))) + ")"
		}
	}
	text := in.grammar.Defang(in.scrub(n.GetText()))
	if strings.TrimSpace(text) == "" {
		return head + ". It printed nothing.", nil
	}
	return head + ":\n\n" + redact.Quote(capText(text)), nil
}

// kickoff is the new issue a kickoff opens: the repository and labels come
// from config only, the title and body from the person's message.
func kickoff(in renderInput, ev *loopv1.Event, member string, rec *record, at *envelope.Binding) (compose func(env string) string, err error) {
	owner, repo, ok := parseRepo(in.kickoff.repo)
	if in.kickoff.repo == "" {
		return nil, refuse("kickoff-disabled", "channels.slack.kickoff.repo is empty: kickoff is disabled")
	}
	if !ok {
		return nil, refuse("bad-ref", "channels.slack.kickoff.repo %q is not owner/repo", in.kickoff.repo)
	}
	c := ev.GetWorkItemCreate()
	msg := c.GetBody()
	if strings.TrimSpace(msg) == "" {
		msg = c.GetTitle()
	}
	titleSrc := c.GetTitle()
	if strings.TrimSpace(titleSrc) == "" {
		titleSrc = msg
	}
	// decision 017: the body becomes the session's prompt and is untrusted,
	// so it is scrubbed and defanged: a kickoff creates and arms a work
	// item, it does not smuggle a control command past the
	// control.command grant.
	rec.owner, rec.repo = owner, repo
	rec.labels = append([]string(nil), in.kickoff.labels...)
	rec.title = title(in.grammar.Defang(in.scrub(firstLine(titleSrc))), ev.GetSource())
	*at = envelope.IssueBody(owner + "/" + repo)
	head := capText(in.grammar.Defang(in.scrub(strings.TrimSpace(msg)))) + "\n\n" +
		"_" + attribution("Opened from", member, ev.GetSource()) + "._"
	return func(env string) string { return head + "\n\n" + env + "\n" }, nil
}

// attribution is the visible line naming the originating channel and member.
// Its fixed words are chosen so that no gate classifier reads anything in
// them (docs/requirements.md K20; see TestAttributionIsClassifierNeutral):
// no "but"/"nit" substring, no approval or change words, no negation. The
// member id is data and is neutralised the same way. The person's name is not
// shown (names such as "Anita" contain "nit"): it travels in the envelope,
// which classifiers strip (envelope.StripLedger).
func attribution(verb, member, source string) string {
	return "📨 " + verb + " `" + neutral(member) + "` on the **" + neutral(source) + "** channel"
}

// classifierWords are the texts a gate classifier matches as substrings.
var classifierWords = []string{
	"changes requested", "request changes", "please change", "rejected", "approved", "approve", "lgtm",
	"looks good", "ship it", "but", "nit", "done", "all set", "no more", "close it", "close this",
	"that's all", "thats all", "nothing else", "changes",
}

// neutral breaks every classifier word inside s with a zero-width space, so a
// member id such as "UBUT42" cannot flip a gate's outcome.
func neutral(s string) string {
	for _, w := range classifierWords {
		for {
			i := strings.Index(strings.ToLower(s), w)
			if i < 0 {
				break
			}
			_, n := utf8.DecodeRuneInString(s[i:])
			s = s[:i+n] + "\u200b" + s[i+n:]
		}
	}
	return s
}

// memberID is the actor's id on the originating channel (the mirror's header
// names the member id, docs/requirements.md K19).
func memberID(ev *loopv1.Event) string {
	a := ev.GetActor()
	var id string
	switch identity.Channel(ev.GetSource()) {
	case identity.ChannelSlack:
		id = a.GetSlack()
	case identity.ChannelGitHub:
		id = a.GetGithub()
	}
	if id == "" {
		id = a.GetGithub()
	}
	if id == "" {
		id = a.GetSlack()
	}
	if id == "" {
		id = "unknown"
	}
	return strings.ReplaceAll(id, "`", "'")
}

// resolveActor finds the actor's entry in routing.authorizedUsers by the
// event's channel-native id, never by text (abuse case 8), so the envelope
// carries every id the entry declares (R5.4). An event from a chat channel
// whose member has no entry is refused: config changed since ingress
// authorized it, and an envelope must never vouch for a stranger. A gate or
// control record additionally needs a GitHub login, since everything that
// judges it reads GitHub logins (decision 015). Trusted publishers (the loop,
// `ask`, the CLI) keep the actor they name, filled in from its entry when there
// is one.
func resolveActor(people *identity.Directory, ev *loopv1.Event, kind catalog.Record) (identity.Person, error) {
	a := ev.GetActor()
	ch := identity.Channel(ev.GetSource())
	var p identity.Person
	if identity.KnownChannel(ch) && ch != identity.ChannelGitHub {
		id := identity.Person{GitHub: a.GetGithub(), Slack: a.GetSlack()}.ID(ch)
		var ok bool
		p, ok = people.ByChannel(ch, id)
		if !ok {
			return identity.Person{}, refuse("unauthorized-actor", "%s member %q of %s is not in routing.authorizedUsers", ch, id, ev.GetId())
		}
	} else if q, ok := people.ByChannel(identity.ChannelGitHub, a.GetGithub()); ok {
		p = q
	} else {
		p = identity.Person{GitHub: a.GetGithub(), Slack: a.GetSlack(), Name: a.GetName()}
	}
	if kind == catalog.RecordAttributed && p.GitHub == "" {
		return identity.Person{}, refuse("unauthorized-actor", "the actor of %s has no GitHub login, so no gate or control seam can accept it", ev.GetId())
	}
	return p, nil
}

// threadOf is the conversation's thread: its root, or for a top-level message
// (a kickoff) the message itself, which becomes the thread's root.
func threadOf(ev *loopv1.Event) string {
	c := ev.GetConversation()
	if c.GetThreadTs() != "" {
		return c.GetThreadTs()
	}
	return c.GetMessageTs()
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}

// title trims a kickoff's first line to GitHub's limit, marking a cut.
func title(s, source string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return "Kickoff from " + source
	}
	if utf8.RuneCountInString(s) <= maxTitle {
		return s
	}
	r := []rune(s)
	return strings.TrimSpace(string(r[:maxTitle-1])) + "…"
}

// capText bounds relayed text so the record fits GitHub's body limit.
func capText(s string) string {
	if utf8.RuneCountInString(s) <= maxText {
		return s
	}
	return string([]rune(s)[:maxText]) + truncatedNote
}
