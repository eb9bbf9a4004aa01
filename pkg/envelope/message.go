package envelope

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// CloudEvents binary-mode header names. nats.go headers are case-sensitive,
// so these are written exactly so; lowercase follows the CloudEvents NATS
// binding draft and W3C trace context.
const (
	HeaderSpecVersion     = "ce-specversion"
	HeaderID              = "ce-id"
	HeaderSource          = "ce-source"
	HeaderType            = "ce-type"
	HeaderSubject         = "ce-subject"
	HeaderTime            = "ce-time"
	HeaderDataContentType = "ce-datacontenttype"
	HeaderTraceparent     = "traceparent"
	HeaderTracestate      = "tracestate"
	// HeaderMsgID is NATS's own dedupe header; it always equals ce-id.
	HeaderMsgID = "Nats-Msg-Id"
)

// SpecVersion is the CloudEvents version spoken.
const SpecVersion = "1.0"

// ContentType is the body's media type: protojson of loopv1.Event.
const ContentType = "application/json"

// Stage says which stream a message is for.
type Stage int

const (
	// Inbox: loop.in.<key>.<type>, consumed by the ledger-writer alone.
	Inbox Stage = iota
	// Events: loop.ev.<key>.<type>, the recorded fan-out.
	Events
)

// Message is an event as NATS carries it. The bus takes the same shape.
type Message struct {
	Subject string
	Header  map[string][]string
	Data    []byte
}

// Errors returned by Validate and FromMessage; match with errors.Is.
var (
	ErrInvalid  = errors.New("invalid event")
	ErrMismatch = errors.New("headers and body disagree")
)

var marshal = protojson.MarshalOptions{UseProtoNames: true}

// Unknown fields are skipped so an older reader keeps working when a newer
// writer adds a field; buf breaking (WIRE_JSON) guards the other direction.
var unmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}

// ToMessage validates ev and encodes it for stage. traceparent may be empty.
func ToMessage(ev *loopv1.Event, stage Stage, traceparent string) (Message, error) {
	if err := Validate(ev); err != nil {
		return Message{}, err
	}
	data, err := marshal.Marshal(ev)
	if err != nil {
		return Message{}, fmt.Errorf("encode event %s: %w", ev.GetId(), err)
	}
	var subject string
	switch stage {
	case Inbox:
		subject = catalog.InboxSubject(ev.GetSubject(), catalog.Type(ev.GetType()))
	case Events:
		subject = catalog.EventsSubject(ev.GetSubject(), catalog.Type(ev.GetType()))
	default:
		return Message{}, fmt.Errorf("%w: unknown stage %d", ErrInvalid, stage)
	}
	h := map[string][]string{
		HeaderSpecVersion:     {SpecVersion},
		HeaderID:              {ev.GetId()},
		HeaderSource:          {ev.GetSource()},
		HeaderType:            {ev.GetType()},
		HeaderSubject:         {headerEscape(ev.GetSubject())},
		HeaderTime:            {ev.GetTime().AsTime().UTC().Format(time.RFC3339Nano)},
		HeaderDataContentType: {ContentType},
		HeaderMsgID:           {ev.GetId()},
	}
	if traceparent != "" {
		if !validTraceparent(traceparent) {
			return Message{}, fmt.Errorf("%w: malformed traceparent", ErrInvalid)
		}
		h[HeaderTraceparent] = []string{traceparent}
	}
	return Message{Subject: subject, Header: h, Data: data}, nil
}

// FromMessage decodes a message and checks that its headers agree with its
// body, so a hand-crafted message cannot say one thing to a router that reads
// headers and another to a handler that reads the body.
func FromMessage(m Message) (*loopv1.Event, error) {
	get := func(k string) string {
		if v := m.Header[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	if v := get(HeaderSpecVersion); v != SpecVersion {
		return nil, fmt.Errorf("%w: ce-specversion %q, want %q", ErrInvalid, v, SpecVersion)
	}
	if ct := get(HeaderDataContentType); ct != ContentType {
		return nil, fmt.Errorf("%w: ce-datacontenttype %q, want %q", ErrInvalid, ct, ContentType)
	}
	ev := &loopv1.Event{}
	if err := unmarshal.Unmarshal(m.Data, ev); err != nil {
		return nil, fmt.Errorf("%w: body: %v", ErrInvalid, err)
	}
	if err := Validate(ev); err != nil {
		return nil, err
	}
	subject, err := headerUnescape(get(HeaderSubject))
	if err != nil {
		return nil, fmt.Errorf("%w: ce-subject: %v", ErrInvalid, err)
	}
	for _, c := range []struct{ name, header, body string }{
		{HeaderID, get(HeaderID), ev.GetId()},
		{HeaderSource, get(HeaderSource), ev.GetSource()},
		{HeaderType, get(HeaderType), ev.GetType()},
		{HeaderSubject, subject, ev.GetSubject()},
	} {
		if c.header != c.body {
			return nil, fmt.Errorf("%w: %s", ErrMismatch, c.name)
		}
	}
	if id := get(HeaderMsgID); id != "" && id != ev.GetId() {
		return nil, fmt.Errorf("%w: %s", ErrMismatch, HeaderMsgID)
	}
	if ts, err := time.Parse(time.RFC3339Nano, get(HeaderTime)); err != nil || !ts.Equal(ev.GetTime().AsTime()) {
		return nil, fmt.Errorf("%w: %s", ErrMismatch, HeaderTime)
	}
	if m.Subject != "" && !subjectMatches(m.Subject, ev) {
		return nil, fmt.Errorf("%w: NATS subject %q", ErrMismatch, m.Subject)
	}
	return ev, nil
}

// Validate checks an event's attributes and that its body fits its type.
func Validate(ev *loopv1.Event) error {
	if ev == nil {
		return fmt.Errorf("%w: nil", ErrInvalid)
	}
	if !validID(ev.GetId()) {
		return fmt.Errorf("%w: id %q", ErrInvalid, ev.GetId())
	}
	if !validToken(ev.GetSource(), false) {
		return fmt.Errorf("%w: source %q", ErrInvalid, ev.GetSource())
	}
	if !validToken(ev.GetType(), true) {
		return fmt.Errorf("%w: type %q", ErrInvalid, ev.GetType())
	}
	if ev.GetSubject() == "" || len(ev.GetSubject()) > 512 {
		return fmt.Errorf("%w: subject must be a ref of 1 to 512 bytes", ErrInvalid)
	}
	if ev.GetTime() == nil || ev.GetTime().CheckValid() != nil {
		return fmt.Errorf("%w: time", ErrInvalid)
	}
	want, known := bodyFor(catalog.Type(ev.GetType()))
	got := bodyCase(ev)
	if !known {
		// A custom process graph may fire a custom notify event (R2.4).
		want = "notification"
	}
	if got != want {
		return fmt.Errorf("%w: type %s needs a %s body, has %q", ErrInvalid, ev.GetType(), want, got)
	}
	return nil
}

// subjectMatches reports whether a NATS subject, as published
// (loop.in.<key>.<type>) or as stored with its partition token
// (loop.in.<p>.<key>.<type>), names ev's work item and type.
func subjectMatches(subject string, ev *loopv1.Event) bool {
	var rest string
	switch {
	case strings.HasPrefix(subject, catalog.InboxPrefix+"."):
		rest = subject[len(catalog.InboxPrefix)+1:]
	case strings.HasPrefix(subject, catalog.EventsPrefix+"."):
		rest = subject[len(catalog.EventsPrefix)+1:]
	default:
		return false
	}
	want := catalog.SubjectKey(ev.GetSubject()) + "." + ev.GetType()
	if rest == want {
		return true
	}
	p, tail, ok := strings.Cut(rest, ".")
	if !ok || p == "" || strings.Trim(p, "0123456789") != "" {
		return false
	}
	return tail == want
}

// NewTime is a convenience for building events.
func NewTime(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

func bodyFor(t catalog.Type) (string, bool) {
	switch t {
	case catalog.SessionAwaitingInput:
		return "question", true
	case catalog.DecisionPending, catalog.PhaseApprovalPending, catalog.PRReviewPending,
		catalog.SecuritySignOffPending, catalog.ConflictEscalated, catalog.WorkItemComplete, catalog.CriticFindings:
		return "notification", true
	case catalog.CommentHuman, catalog.CommentAgent:
		return "comment", true
	case catalog.WorkItemReply:
		return "reply", true
	case catalog.GateFeedback:
		return "gate_feedback", true
	case catalog.ControlCommand:
		return "control_command", true
	case catalog.WorkItemCreate:
		return "work_item_create", true
	case catalog.WorkItemActivity:
		return "github_activity", true
	case catalog.LedgerRecord:
		return "ledger_record", true
	case catalog.GraphOverride:
		return "graph_override", true
	}
	return "", false
}

func bodyCase(ev *loopv1.Event) string {
	switch ev.GetBody().(type) {
	case *loopv1.Event_Question:
		return "question"
	case *loopv1.Event_Notification:
		return "notification"
	case *loopv1.Event_Comment:
		return "comment"
	case *loopv1.Event_Reply:
		return "reply"
	case *loopv1.Event_GateFeedback:
		return "gate_feedback"
	case *loopv1.Event_ControlCommand:
		return "control_command"
	case *loopv1.Event_WorkItemCreate:
		return "work_item_create"
	case *loopv1.Event_GithubActivity:
		return "github_activity"
	case *loopv1.Event_LedgerRecord:
		return "ledger_record"
	case *loopv1.Event_GraphOverride:
		return "graph_override"
	}
	return ""
}

// validToken: [a-z0-9_-]+, and with dots=true also dot-separated runs of them
// (a catalog type keeps its dots in the subject).
func validToken(s string, dots bool) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	prevDot := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-':
			prevDot = false
		case c == '.' && dots && !prevDot:
			prevDot = true
		default:
			return false
		}
	}
	return !prevDot
}

// headerEscape percent-encodes bytes outside printable ASCII, and '%' itself,
// as the CloudEvents NATS binding asks of header values.
func headerEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c > 0x7e || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

func headerUnescape(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	return url.PathUnescape(s)
}

// validTraceparent checks the W3C shape 00-<32 hex>-<16 hex>-<2 hex>.
func validTraceparent(s string) bool {
	if len(s) != 55 || s[2] != '-' || s[35] != '-' || s[52] != '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if i == 2 || i == 35 || i == 52 {
			continue
		}
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}
