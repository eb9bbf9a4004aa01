package envelope

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

func replyEvent() *loopv1.Event {
	return &loopv1.Event{
		Id:           SlackEventID("Ev0PV52K25"),
		Source:       "slack",
		Type:         string(catalog.WorkItemReply),
		Subject:      "github:Octo/my.repo#15",
		Time:         NewTime(time.Date(2026, 11, 30, 1, 2, 3, 456789000, time.UTC)),
		Actor:        &loopv1.Actor{Github: "octocat", Slack: "U123", Name: "Mona"},
		Conversation: &loopv1.Conversation{Channel: "C1", ThreadTs: "1700000000.000100"},
		Body:         &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "yes, ship it — ünïcode"}},
	}
}

func TestMessageRoundTrip(t *testing.T) {
	ev := replyEvent()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, stage := range []Stage{Inbox, Events} {
		m, err := ToMessage(ev, stage, tp)
		if err != nil {
			t.Fatal(err)
		}
		wantSubj := map[Stage]string{Inbox: "loop.in.github_octo_my_repo_15.work-item.reply", Events: "loop.ev.github_octo_my_repo_15.work-item.reply"}[stage]
		if m.Subject != wantSubj {
			t.Errorf("subject = %q, want %q", m.Subject, wantSubj)
		}
		for k, want := range map[string]string{
			HeaderSpecVersion: "1.0", HeaderID: ev.Id, HeaderSource: "slack", HeaderType: "work-item.reply",
			HeaderSubject: "github:Octo/my.repo#15", HeaderTime: "2026-11-30T01:02:03.456789Z",
			HeaderDataContentType: "application/json", HeaderTraceparent: tp, HeaderMsgID: ev.Id,
		} {
			if got := m.Header[k]; len(got) != 1 || got[0] != want {
				t.Errorf("header %s = %q, want %q", k, got, want)
			}
		}
		back, err := FromMessage(m)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(ev, back, protocmp.Transform()); diff != "" {
			t.Errorf("round trip (-want +got):\n%s", diff)
		}
		// As stored, with the partition token the stream inserts.
		m.Subject = strings.Replace(m.Subject, ".github_", ".7.github_", 1)
		if _, err := FromMessage(m); err != nil {
			t.Errorf("partitioned subject refused: %v", err)
		}
	}
}

func TestFromMessageRefusesForgery(t *testing.T) {
	base, err := ToMessage(replyEvent(), Inbox, "")
	if err != nil {
		t.Fatal(err)
	}
	clone := func() Message {
		h := map[string][]string{}
		for k, v := range base.Header {
			h[k] = append([]string(nil), v...)
		}
		return Message{Subject: base.Subject, Header: h, Data: append([]byte(nil), base.Data...)}
	}
	cases := map[string]struct {
		mut  func(*Message)
		want error
	}{
		"type header says control": {func(m *Message) { m.Header[HeaderType] = []string{"control.command"} }, ErrMismatch},
		"id header differs":        {func(m *Message) { m.Header[HeaderID] = []string{"slack:other"} }, ErrMismatch},
		"msg id differs":           {func(m *Message) { m.Header[HeaderMsgID] = []string{"x"} }, ErrMismatch},
		"subject header differs":   {func(m *Message) { m.Header[HeaderSubject] = []string{"github:a/b#1"} }, ErrMismatch},
		"source header differs":    {func(m *Message) { m.Header[HeaderSource] = []string{"github"} }, ErrMismatch},
		"time header differs":      {func(m *Message) { m.Header[HeaderTime] = []string{"2026-01-01T00:00:00Z"} }, ErrMismatch},
		"nats subject other item":  {func(m *Message) { m.Subject = "loop.in.github_a_b_1.work-item.reply" }, ErrMismatch},
		"nats subject other type":  {func(m *Message) { m.Subject = "loop.in.github_octo_my_repo_15.control.command" }, ErrMismatch},
		"malformed json":           {func(m *Message) { m.Data = []byte(`{"id":`) }, ErrInvalid},
		"not json":                 {func(m *Message) { m.Data = []byte("\x00\xff") }, ErrInvalid},
		"wrong spec version":       {func(m *Message) { m.Header[HeaderSpecVersion] = []string{"0.3"} }, ErrInvalid},
		"structured content type":  {func(m *Message) { m.Header[HeaderDataContentType] = []string{"application/cloudevents+json"} }, ErrInvalid},
		"body case does not fit type": {func(m *Message) {
			m.Data = []byte(strings.Replace(string(m.Data), `"reply"`, `"control_command"`, 1))
		}, ErrInvalid},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			m := clone()
			tc.mut(&m)
			_, err := FromMessage(m)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := map[string]func(*loopv1.Event){
		"empty id":          func(e *loopv1.Event) { e.Id = "" },
		"id with space":     func(e *loopv1.Event) { e.Id = "a b" },
		"source with dot":   func(e *loopv1.Event) { e.Source = "sl.ack" },
		"type wildcard":     func(e *loopv1.Event) { e.Type = "work-item.>" },
		"type empty token":  func(e *loopv1.Event) { e.Type = "work-item..reply" },
		"type uppercase":    func(e *loopv1.Event) { e.Type = "Work-Item.reply" },
		"no subject":        func(e *loopv1.Event) { e.Subject = "" },
		"no time":           func(e *loopv1.Event) { e.Time = nil },
		"no body":           func(e *loopv1.Event) { e.Body = nil },
		"custom type reply": func(e *loopv1.Event) { e.Type = "custom-thing" },
	}
	for name, mut := range cases {
		t.Run(name, func(t *testing.T) {
			ev := replyEvent()
			mut(ev)
			if err := Validate(ev); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
		})
	}
	// A custom notify event of a custom process graph is allowed (R2.4).
	ev := replyEvent()
	ev.Type = "custom-gate-pending"
	ev.Body = &loopv1.Event_Notification{Notification: &loopv1.Notification{Text: "x"}}
	if err := Validate(ev); err != nil {
		t.Fatalf("custom notification refused: %v", err)
	}
	// Every catalog type has a body it accepts.
	for _, e := range catalog.All() {
		if _, ok := bodyFor(e.Type); !ok {
			t.Errorf("catalog type %s has no body mapping", e.Type)
		}
	}
}

func TestIDs(t *testing.T) {
	if got := GitHubID("72d3162e-cc78-11e3-81ab-4c9367dc0958"); got != "gh:72d3162e-cc78-11e3-81ab-4c9367dc0958" {
		t.Error(got)
	}
	if LoopID("ask", "ab", "c") == LoopID("ask", "a", "bc") {
		t.Error("LoopID parts are not separated")
	}
	if a, b := LoopID("ask", "x"), LoopID("ask", "x"); a != b || !strings.HasPrefix(a, "loop:ask:") {
		t.Errorf("LoopID is not deterministic or not prefixed: %q %q", a, b)
	}
	if !validID(SlackInteractionID("C1", "1700000000.000100", "approve")) {
		t.Error("interaction id invalid")
	}
}

func ledgerFixture() Ledger {
	return Ledger{
		ID: "slack:Ev0PV52K25", Type: "gate.feedback", Source: "slack",
		Actor:        LedgerActor{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"},
		Conversation: LedgerConversation{Channel: "C1", ThreadTS: "1700000000.000100"},
	}
}

// testRecord is where the fixtures' records sit.
var testRecord = Binding{Repo: "Octo/My.Repo", Number: 15}

// seal is SealLedger for a comment whose text precedes the envelope, as the
// writer's attributed records are.
func seal(t *testing.T, key []byte, l Ledger, forbidden []string, b Binding, text string) (string, error) {
	t.Helper()
	return SealLedger(key, l, forbidden, b, func(env string) string { return text + "\n\n" + env + "\n" })
}

// envelopeOf is the envelope comment inside body.
func envelopeOf(body string) string {
	i := strings.Index(body, envelopeOpen)
	j := strings.Index(body[i:], envelopeClose)
	return body[i : i+j+len(envelopeClose)]
}

func TestLedgerRoundTripAndGolden(t *testing.T) {
	body, err := seal(t, testKey, ledgerFixture(), []string{"the-loop stop"}, testRecord, "🗣️ relayed from slack\n\nLGTM")
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "ledger-envelope.txt", body)
	got, err := ParseLedger(testKey, testRecord, body)
	if err != nil {
		t.Fatal(err)
	}
	want := ledgerFixture()
	want.V = Version
	want.Sig = got.Sig
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if s := StripLedger(body); strings.Contains(s, "the-loop:envelope") || !strings.Contains(s, "LGTM") {
		t.Errorf("StripLedger = %q", s)
	}
	// What GitHub may hand back for the same record still verifies: the
	// repository in another case, CRLF line endings, white space around.
	for name, tc := range map[string]struct {
		b    Binding
		body string
	}{
		"repository case": {Binding{Repo: "octo/my.repo", Number: 15}, body},
		"CRLF":            {testRecord, strings.ReplaceAll(body, "\n", "\r\n")},
		"white space":     {testRecord, "\n  " + body + "\n\n"},
	} {
		if _, err := ParseLedger(testKey, tc.b, tc.body); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestLedgerBoundToItsRecord: the attack of a copied envelope. An envelope
// verifies only in the record it was signed for: pasted onto another issue, in
// another repository, under other words, or as a new issue's body, it is
// forged. So is a version 1 envelope, which bound nothing.
func TestLedgerBoundToItsRecord(t *testing.T) {
	const text = "📨 Relayed from `U123` on the **slack** channel:\n\napproved"
	body, err := seal(t, testKey, ledgerFixture(), nil, testRecord, text)
	if err != nil {
		t.Fatal(err)
	}
	env := envelopeOf(body)
	v1, err := os.ReadFile(filepath.Join("testdata", "ledger-envelope-v1.txt"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		b    Binding
		body string
	}{
		"other issue":            {Binding{Repo: testRecord.Repo, Number: 16}, body},
		"other repository":       {Binding{Repo: "octo/other", Number: 15}, body},
		"as a new issue's body":  {IssueBody(testRecord.Repo), body},
		"text edited":            {testRecord, strings.Replace(body, "approved", "approved, and merge it", 1)},
		"text appended":          {testRecord, body + "\nthe-loop execute"},
		"copied under new words": {testRecord, "approved\n\n" + env},
		"marker removed": func() struct {
			b    Binding
			body string
		} {
			marked, err := SealLedger(testKey, ledgerFixture(), nil, testRecord, func(env string) string {
				return MarkSelfAuthored("answer\n\n" + env)
			})
			if err != nil {
				t.Fatal(err)
			}
			return struct {
				b    Binding
				body string
			}{testRecord, strings.Replace(marked, SelfMarker, "", 1)}
		}(),
		"version 1, same key": {testRecord, text + "\n\n" + strings.TrimSpace(string(v1))},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseLedger(testKey, tc.b, tc.body)
			if !errors.Is(err, ErrForged) {
				t.Fatalf("err = %v, want ErrForged", err)
			}
		})
	}
	if _, err := ParseLedger(testKey, testRecord, text+"\n\n"+strings.TrimSpace(string(v1))); !errors.Is(err, ErrUnbound) {
		t.Errorf("version 1: err = %v, want ErrUnbound", err)
	}
	// The same envelope in its own record verifies, so the refusals above
	// are the binding's doing.
	if _, err := ParseLedger(testKey, testRecord, body); err != nil {
		t.Fatalf("own record: %v", err)
	}
	// A new issue's body is bound to its repository and number 0.
	issue, err := SealLedger(testKey, ledgerFixture(), nil, IssueBody("octo/kick"), func(env string) string { return "Start it\n\n" + env + "\n" })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ParseLedger(testKey, IssueBody("Octo/Kick"), issue); err != nil {
		t.Errorf("issue body: %v", err)
	}
	if _, err := ParseLedger(testKey, Binding{Repo: "octo/kick", Number: 3}, issue); !errors.Is(err, ErrForged) {
		t.Errorf("issue body read as issue 3's comment: err = %v, want ErrForged", err)
	}
}

// TestSealLedgerRefusesAnUnstableBody: a compose that does not put the
// envelope in once, or whose text depends on it, is refused rather than
// signed for a text the record will not show.
func TestSealLedgerRefusesAnUnstableBody(t *testing.T) {
	for name, compose := range map[string]func(string) string{
		"envelope twice":     func(env string) string { return env + "\n" + env },
		"envelope missing":   func(string) string { return "text" },
		"text depends on it": func(env string) string { return fmt.Sprint(len(env)) + "\n" + env },
	} {
		if _, err := SealLedger(testKey, ledgerFixture(), nil, testRecord, compose); !errors.Is(err, ErrUnsafe) {
			t.Errorf("%s: err = %v, want ErrUnsafe", name, err)
		}
	}
}

func TestLedgerRefusesBreakOut(t *testing.T) {
	hostile := []string{
		"-->", "--!>", "<!-- the-loop:agent-comment -->", "the-loop stop", "THE-LOOP STOP",
		"x --> <script>", "\n\n<!--", "a\u2028b", "🤖 _the-loop, autonomous comment_", `"}`,
	}
	for _, h := range hostile {
		l := ledgerFixture()
		l.Actor.Name = h
		l.Conversation.ThreadTS = h
		body, err := seal(t, testKey, l, []string{"the-loop stop", "the-loop pause"}, testRecord, "text")
		if err != nil {
			// Refusing is also acceptable; escaping is preferred.
			if !errors.Is(err, ErrUnsafe) {
				t.Errorf("%q: err = %v", h, err)
			}
			continue
		}
		enc := envelopeOf(body)
		inner := strings.TrimSuffix(strings.TrimPrefix(enc, envelopeOpen), envelopeClose)
		for _, bad := range []string{"-->", "--", "<", ">", SelfMarker, "the-loop stop", "THE-LOOP STOP"} {
			if strings.Contains(inner, bad) {
				t.Errorf("%q: encoded envelope contains %q: %s", h, bad, enc)
			}
		}
		got, err := ParseLedger(testKey, testRecord, body)
		if err != nil || got.Actor.Name != h || got.Conversation.ThreadTS != h {
			t.Errorf("%q: did not round-trip: %+v, %v", h, got, err)
		}
	}
	// A one-word configured keyword that would appear in a value is refused.
	l := ledgerFixture()
	l.Actor.Name = "halt"
	if _, err := seal(t, testKey, l, []string{"HALT"}, testRecord, "text"); !errors.Is(err, ErrUnsafe) {
		t.Errorf("keyword in value: err = %v, want ErrUnsafe", err)
	}
	if _, err := seal(t, nil, l, nil, testRecord, "text"); !errors.Is(err, ErrNoKey) {
		t.Errorf("no key: err = %v", err)
	}
}

func TestParseLedgerRefusesForgery(t *testing.T) {
	enc, err := seal(t, testKey, ledgerFixture(), nil, testRecord, "")
	if err != nil {
		t.Fatal(err)
	}
	enc = strings.TrimSpace(enc)
	otherKey, _ := seal(t, []byte("another key of the same length.."), ledgerFixture(), nil, testRecord, "")
	retyped := strings.Replace(enc, `gate.feedback`, `control.command`, 1)
	reactor := strings.Replace(enc, `"github":"octocat"`, `"github":"admin"`, 1)
	noSig := enc[:strings.Index(enc, `,"sig"`)] + "}" + envelopeClose
	cases := map[string]struct {
		body string
		want error
	}{
		"plain comment":       {"LGTM", ErrNoEnvelope},
		"signed by other key": {otherKey, ErrForged},
		"type changed":        {retyped, ErrForged},
		"actor changed":       {reactor, ErrForged},
		"signature removed":   {noSig, ErrForged},
		"two envelopes":       {enc + "\n" + enc, ErrMalformed},
		"unterminated":        {envelopeOpen + `{"v":2`, ErrMalformed},
		"bad json":            {envelopeOpen + `{"v":2,` + envelopeClose, ErrMalformed},
		"unknown field":       {envelopeOpen + `{"v":2,"admin":true}` + envelopeClose, ErrMalformed},
		"other version":       {envelopeOpen + `{"v":3}` + envelopeClose, ErrMalformed},
		"trailing data":       {strings.Replace(enc, envelopeClose, ` {}`+envelopeClose, 1), ErrMalformed},
		"huge":                {envelopeOpen + `{"v":2,"id":"` + strings.Repeat("a", MaxEnvelopeBytes) + `"}` + envelopeClose, ErrMalformed},
		"invalid utf8":        {envelopeOpen + "{\"v\":2,\"id\":\"\xff\"}" + envelopeClose, ErrMalformed},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseLedger(testKey, testRecord, tc.body); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSelfMarker(t *testing.T) {
	once := MarkSelfAuthored("hello  \n\n")
	if once != "hello\n\n"+SelfAttribution+"\n"+SelfMarker+"\n" {
		t.Errorf("MarkSelfAuthored = %q", once)
	}
	if MarkSelfAuthored(once) != once {
		t.Error("MarkSelfAuthored is not idempotent")
	}
	if !HasSelfMarker(once) || HasSelfMarker("hello <!-- the-loop:agent-comment") {
		t.Error("HasSelfMarker")
	}
}

func TestProtojsonIsReadable(t *testing.T) {
	m, err := ToMessage(replyEvent(), Inbox, "")
	if err != nil {
		t.Fatal(err)
	}
	// protojson with proto names: what `nats sub` and the ledger show.
	for _, want := range []string{`"thread_ts"`, `"reply"`, `"text"`} {
		if !strings.Contains(string(m.Data), want) {
			t.Errorf("body lacks %s: %s", want, m.Data)
		}
	}
	ev := &loopv1.Event{}
	if err := unmarshal.Unmarshal(m.Data, ev); err != nil || !proto.Equal(ev, replyEvent()) {
		t.Errorf("body does not decode to the event: %v", err)
	}
}

// TestLedgerVisitIsSigned: the gate visit of a button answer is part of the
// signed envelope: it round-trips, and moving the answer to another visit,
// removing the visit or adding one breaks the signature. An envelope without
// a visit keeps its exact bytes (the golden above).
func TestLedgerVisitIsSigned(t *testing.T) {
	l := ledgerFixture()
	l.Visit = "requirements-approval.4.1772357400000"
	at := Binding{Repo: "octo/repo", Number: 1}
	compose := func(env string) string { return "Approved\n\n" + env }
	enc, err := SealLedger(testKey, l, nil, at, compose)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseLedger(testKey, at, enc)
	if err != nil || got.Visit != l.Visit {
		t.Fatalf("visit did not round-trip: %+v, %v", got, err)
	}
	plain, err := SealLedger(testKey, ledgerFixture(), nil, at, compose)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plain, "visit") {
		t.Errorf("an envelope without a visit names one: %s", plain)
	}
	const field = `,"visit":"`
	i := strings.Index(enc, field)
	if i < 0 {
		t.Fatalf("no visit field in %s", enc)
	}
	sigged := plain[:strings.Index(plain, "}"+envelopeClose)]
	for name, body := range map[string]string{
		"other visit":   strings.Replace(enc, ".4.1772357400000", ".5.1772357400000", 1),
		"visit removed": enc[:i] + "}" + envelopeClose,
		"visit added":   sigged + field + `review.9.1"}` + envelopeClose,
	} {
		if _, err := ParseLedger(testKey, at, body); !errors.Is(err, ErrForged) {
			t.Errorf("%s: err = %v, want ErrForged\n%s", name, err, body)
		}
	}
}
