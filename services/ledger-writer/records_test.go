package ledgerwriter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/threads"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestRecordPerKind publishes one event of every recorded kind, plus one the
// catalog does not record, through a running writer on real JetStream and the
// GitHub fake, and checks exactly what landed on GitHub (golden), the
// envelope round trip with every id of the person's entry (R5.4), the marker
// rules (R3.3–R3.6), and the fan-out event carrying the record.
func TestRecordPerKind(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	w := e.start("writer-1")
	ref := "github:" + testRepo + "#3"

	cases := []struct {
		name   string
		ev     *loopv1.Event
		marker bool
		actor  envelope.LedgerActor
	}{
		{"question", questionEv("loop:ask:q1", ref, "Which database should the design use?\n\n- Postgres\n- SQLite"), true,
			envelope.LedgerActor{Name: "session"}},
		{"reply", replyEv("slack:EvReply1", ref, "Use Postgres, config is in /home/mona/app.yaml\nand the-loop stop is NOT what I mean; token hunter2-secret-value"), true,
			envelope.LedgerActor{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"}},
		{"gate", gateEv("slack:EvGate1", ref, "Approved — LGTM"), false,
			envelope.LedgerActor{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"}},
		{"control", controlEv("slack:EvCtl1", ref, "stop", "the-loop stop"), false,
			envelope.LedgerActor{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"}},
		{"override", overrideEv("loop:cli-graph:o1", ref, "The requirements are in the issue already; the-loop stop is not meant."), true,
			envelope.LedgerActor{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"}},
	}
	for _, tc := range cases {
		e.publish(tc.ev)
	}
	create := createEv("slack:EvKick1", "  Add dark mode to the settings page  \n\nMail mona@example.com for the palette; the-loop start it when ready.")
	e.publish(create)
	e.publish(notifyEv("loop:notify:n1", ref))

	testkit.WaitWithin(t, 60*time.Second, "seven fan-out events", func() bool { return len(e.fan.all()) >= 7 })

	comments := e.gh.Comments(testRepo, 3)
	if len(comments) != len(cases) {
		t.Fatalf("%d comments on the work item, want %d", len(comments), len(cases))
	}
	for i, tc := range cases {
		c := comments[i]
		t.Run(tc.name, func(t *testing.T) {
			golden(t, tc.name+".md", c.Body)
			if c.Login != botLogin {
				t.Errorf("posted by %q, want the ledger's credential %q", c.Login, botLogin)
			}
			if got := envelope.HasSelfMarker(c.Body); got != tc.marker {
				t.Errorf("self marker = %v, want %v", got, tc.marker)
			}
			l, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: 3}, c.Body)
			if err != nil {
				t.Fatalf("envelope: %v", err)
			}
			want := envelope.Ledger{V: envelope.Version, ID: tc.ev.GetId(), Type: tc.ev.GetType(), Source: tc.ev.GetSource(), Actor: tc.actor, Sig: l.Sig}
			if tc.ev.GetConversation() != nil {
				want.Conversation = envelope.LedgerConversation{Channel: "C1", ThreadTS: "1700000000.000100"}
			}
			if diff := cmp.Diff(want, l); diff != "" {
				t.Errorf("envelope (-want +got):\n%s", diff)
			}
			fan := e.fan.byID(tc.ev.GetId())
			if len(fan) != 1 {
				t.Fatalf("%d fan-out events, want 1", len(fan))
			}
			got := fan[0].ev.GetLedger()
			if got.GetRepo() != testRepo || got.GetIssueNumber() != 3 || got.GetCommentId() != c.ID || got.GetUrl() != c.HTMLURL {
				t.Errorf("fan-out ledger ref = %v, want %s#3 comment %d %s", got, testRepo, c.ID, c.HTMLURL)
			}
			if tp := fan[0].header.Get(envelope.HeaderTraceparent); tp == "" {
				t.Error("the inbound traceparent was not passed on")
			}
		})
	}

	t.Run("create", func(t *testing.T) {
		issues := e.gh.Issues(kickRepo)
		if len(issues) != 1 {
			t.Fatalf("%d issues in %s, want 1", len(issues), kickRepo)
		}
		is := issues[0]
		golden(t, "create.md", fmt.Sprintf("title: %s\nlabels: %s\n\n%s", is.Title, strings.Join(is.Labels, ","), is.Body))
		if envelope.HasSelfMarker(is.Body) {
			t.Error("a kickoff issue must be armable: no self marker (abuse case 7)")
		}
		if g := control.Default(); g.Parse(is.Body).Found() || g.Parse(is.Title).Found() {
			t.Error("a control keyword survived in the kickoff issue (decision 017: defanged)")
		}
		l, err := envelope.ParseLedger(testKey, envelope.IssueBody(kickRepo), is.Body)
		if err != nil || l.ID != create.GetId() || l.Actor != (envelope.LedgerActor{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"}) ||
			l.Conversation.ThreadTS != "1700000001.000200" {
			t.Errorf("envelope = %+v, %v", l, err)
		}
		fan := e.fan.byID(create.GetId())
		if len(fan) != 1 {
			t.Fatalf("%d fan-out events, want 1", len(fan))
		}
		wantRef := fmt.Sprintf("github:%s#%d", kickRepo, is.Number)
		if fan[0].ev.GetSubject() != wantRef || fan[0].ev.GetLedger().GetIssueNumber() != int64(is.Number) ||
			fan[0].ev.GetLedger().GetCommentId() != 0 || fan[0].ev.GetLedger().GetUrl() != is.HTMLURL {
			t.Errorf("fan-out = subject %s ledger %v, want %s", fan[0].ev.GetSubject(), fan[0].ev.GetLedger(), wantRef)
		}
		// R3.6: the conversation is bound to the new work item.
		kv, err := e.pub.KV(context.Background(), "threads")
		if err != nil {
			t.Fatal(err)
		}
		st := threads.New(kv)
		got, ok, err := st.Lookup(context.Background(), "C1", "1700000001.000200")
		if err != nil || !ok || got != wantRef {
			t.Errorf("thread binding = %q %v %v, want %s", got, ok, err, wantRef)
		}
	})

	t.Run("not recorded", func(t *testing.T) {
		fan := e.fan.byID("loop:notify:n1")
		if len(fan) != 1 || fan[0].ev.GetLedger() != nil || fan[0].ev.GetType() != string(catalog.PhaseApprovalPending) {
			t.Fatalf("notification fan-out = %v", fan)
		}
		if n := e.gh.Counts().Writes; n != len(cases)+1 {
			t.Errorf("%d writes on GitHub, want %d (the notification writes nothing)", n, len(cases)+1)
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for name, want := range map[string]float64{
			"loop_ledger_writer_recorded_total":          6,
			"loop_ledger_writer_record_duration_seconds": 6,
			"loop_ledger_writer_published_total":         7,
			"loop_ledger_writer_failed_total":            0,
			"loop_ledger_writer_github_configured":       1,
		} {
			if got := metricSum(t, w, name); got != want {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
		if got := gauge(t, w, "loop_ledger_writer_github_ratelimit_remaining"); got <= 0 || got >= 5000 {
			t.Errorf("rate-limit headroom = %v, want the fake's x-ratelimit-remaining", got)
		}
	})

	t.Run("log events", func(t *testing.T) {
		if n := len(e.logs.WithMessage("bus.recorded")); n != 6 {
			t.Errorf("%d bus.recorded, want 6", n)
		}
		if n := len(e.logs.WithMessage("bus.published")); n != 7 {
			t.Errorf("%d bus.published, want 7", n)
		}
		if strings.Contains(e.logs.String(), testToken) {
			t.Error("the token reached the log")
		}
		for _, r := range e.logs.WithMessage("bus.recorded") {
			for k := range r {
				if k == "text" || k == "body" {
					t.Errorf("bus.recorded carries %s", k)
				}
			}
		}
	})
}

// TestAttributionIsClassifierNeutral: nothing the writer adds to a gate or
// control record may change how a gate classifies it
// (docs/requirements.md K20): the classifier, run on the record minus its
// envelope, reads exactly what it reads on the relayed text alone, and the
// attribution line carries no classifier word, not even for a member id or a
// name that spells one.
func TestAttributionIsClassifierNeutral(t *testing.T) {
	t.Parallel()
	in := renderInput{key: testKey, grammar: control.Default(), people: testConfig(t).Routing.AuthorizedUsers, scrub: testScrub}
	for _, member := range []string{"U123", "UBUT42"} {
		for _, text := range []string{"Approved", "LGTM", "approved but one nit", "Request changes: rename it", "ship it", "hmm"} {
			ev := gateEv("slack:EvN", "github:octo/repo#1", text)
			ev.Actor = &loopv1.Actor{Slack: member}
			rec, err := render(in, ev, catalog.RecordAttributed)
			if err != nil {
				t.Fatal(err)
			}
			stripped := envelope.StripLedger(rec.body)
			line, rest, _ := strings.Cut(stripped, "\n\n")
			if strings.TrimSpace(rest) != text {
				t.Errorf("relayed text = %q, want %q alone after the attribution", rest, text)
			}
			for _, w := range append(classifierWords, "approve") {
				if strings.Contains(strings.ToLower(line), w) {
					t.Errorf("attribution %q contains classifier word %q", line, w)
				}
			}
			for _, neg := range []string{"not", "no", "nope", "isn't", "aren't"} {
				for _, f := range strings.FieldsFunc(strings.ToLower(line), func(r rune) bool { return !('a' <= r && r <= 'z' || r == '\'') }) {
					if f == neg {
						t.Errorf("attribution %q contains negation %q", line, neg)
					}
				}
			}
			if classifyFeedback(stripped) != classifyFeedback(text) {
				t.Errorf("%s: record classifies %s, the text alone %s", member, classifyFeedback(stripped), classifyFeedback(text))
			}
		}
	}
	// The envelope's own bytes carry no classifier word either, for a
	// person whose name does not: keys and fixed values are neutral.
	ev := gateEv("slack:EvN", "github:octo/repo#1", "Approved")
	rec, err := render(in, ev, catalog.RecordAttributed)
	if err != nil {
		t.Fatal(err)
	}
	env := strings.TrimPrefix(rec.body, envelope.StripLedger(rec.body))
	for _, w := range classifierWords {
		if strings.Contains(strings.ToLower(env), w) {
			t.Errorf("envelope contains %q: %s", w, env)
		}
	}
}

// classifyFeedback is the original's deterministic classify-feedback floor
// (docs/requirements.md K20), for the test above.
func classifyFeedback(body string) string {
	b := strings.ToLower(body)
	for _, w := range []string{"changes requested", "request changes", "please change", "rejected"} {
		if strings.Contains(b, w) {
			return "changes-requested"
		}
	}
	for _, w := range []string{"approved", "lgtm", "looks good", "ship it"} {
		if strings.Contains(b, w) {
			if strings.Contains(b, "but") || strings.Contains(b, "nit") {
				return "approved-with-comments"
			}
			return "approved"
		}
	}
	return "wait"
}

// TestRenderRefuses: the refusals that make an event fail permanently.
func TestRenderRefuses(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	in := renderInput{key: testKey, grammar: control.Default(), people: cfg.Routing.AuthorizedUsers, scrub: testScrub}
	in.kickoff.repo = kickRepo
	stranger := gateEv("slack:E1", "github:octo/repo#1", "LGTM")
	stranger.Actor = &loopv1.Actor{Slack: "UNKNOWN", Github: "octocat"} // a message cannot claim to be someone
	slackOnly := controlEv("slack:E2", "github:octo/repo#1", "stop", "the-loop stop")
	slackOnly.Actor = &loopv1.Actor{Slack: "U999"}
	noKick := in
	noKick.kickoff.repo = ""
	cases := []struct {
		name   string
		in     renderInput
		ev     *loopv1.Event
		kind   catalog.Record
		reason string
	}{
		{"unknown member", in, stranger, catalog.RecordAttributed, "unauthorized-actor"},
		{"no github login for a gate", in, slackOnly, catalog.RecordAttributed, "unauthorized-actor"},
		{"bad ref", in, replyEv("slack:E3", "jira:ABC-1", "x"), catalog.RecordMirror, "bad-ref"},
		{"pull-request-ish ref", in, replyEv("slack:E4", "github:octo/repo#0", "x"), catalog.RecordMirror, "bad-ref"},
		{"kickoff disabled", noKick, createEv("slack:E5", "x"), catalog.RecordIssue, "kickoff-disabled"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(tc.in, tc.ev, tc.kind)
			re, ok := err.(*renderError)
			if !ok || re.reason != tc.reason {
				t.Fatalf("err = %v, want reason %s", err, tc.reason)
			}
		})
	}
	// A title longer than GitHub's limit is cut to it.
	long := createEv("slack:E6", strings.Repeat("é", 300)+"\nbody")
	rec, err := render(in, long, catalog.RecordIssue)
	if err != nil {
		t.Fatal(err)
	}
	if n := len([]rune(rec.title)); n != maxTitle || !strings.HasSuffix(rec.title, "…") {
		t.Errorf("title has %d runes: %q", n, rec.title)
	}
	if rec.owner+"/"+rec.repo != kickRepo || strings.Join(rec.labels, ",") != "" {
		t.Errorf("repo/labels = %s/%s %v, want config's", rec.owner, rec.repo, rec.labels)
	}
}

// TestGateVisitIsSigned: a button answer's gate visit is written into the
// record's signed envelope, so the dispatcher can tell which visit a relayed
// approval was for; a typed answer's envelope names none, and a visit that
// is not one is refused rather than written.
func TestGateVisitIsSigned(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t)
	in := renderInput{key: testKey, grammar: control.Default(), people: cfg.Routing.AuthorizedUsers, scrub: testScrub}
	const visit = "requirements-approval.3.1700000000000"
	pressed := gateEv("slack:EPress", "github:octo/repo#1", "Approved — LGTM")
	pressed.GetGateFeedback().GateVisit = visit
	rec, err := render(in, pressed, catalog.RecordAttributed)
	if err != nil {
		t.Fatal(err)
	}
	at := envelope.Binding{Repo: "octo/repo", Number: 1}
	if l, err := envelope.ParseLedger(testKey, at, rec.body); err != nil || l.Visit != visit {
		t.Errorf("pressed answer's envelope = %+v, %v; want visit %s", l, err, visit)
	}
	typed, err := render(in, gateEv("slack:ETyped", "github:octo/repo#1", "LGTM"), catalog.RecordAttributed)
	if err != nil {
		t.Fatal(err)
	}
	if l, err := envelope.ParseLedger(testKey, at, typed.body); err != nil || l.Visit != "" {
		t.Errorf("typed answer's envelope = %+v, %v; want no visit", l, err)
	}
	bad := gateEv("slack:EBad", "github:octo/repo#1", "LGTM")
	bad.GetGateFeedback().GateVisit = "requirements-approval.3.1700000000000 --> <!-- the-loop:agent-comment"
	if _, err := render(in, bad, catalog.RecordAttributed); err == nil || err.(*renderError).reason != "invalid" {
		t.Errorf("a malformed visit: err = %v, want refused as invalid", err)
	}
}

// TestPermanentFailure: a comment on a work item GitHub does not have (404)
// goes to the DLQ with its reason, emits bus.record_failed, publishes the
// failure notice to the conversation (decision 017) — and the event itself is
// never fanned out.
func TestPermanentFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	w := e.start("writer-1")
	gate := gateEv("slack:EvMissing", "github:"+testRepo+"#404", "LGTM")
	e.publish(gate)
	notice := envelope.LoopID("record-failed", gate.GetId())
	testkit.WaitWithin(t, 60*time.Second, "the failure notice", func() bool { return len(e.fan.byID(notice)) == 1 })
	testkit.WaitWithin(t, 30*time.Second, "the DLQ entry", func() bool { return len(e.dlq()) == 1 })
	d := e.dlq()[0]
	if d.CEID != gate.GetId() || !strings.Contains(d.Reason, "not-found") {
		t.Errorf("DLQ entry = %s %q", d.CEID, d.Reason)
	}
	n := e.fan.byID(notice)[0].ev
	if n.GetType() != string(catalog.RecordFailed) || n.GetCausationId() != gate.GetId() || n.GetConversation().GetThreadTs() != "1700000000.000100" {
		t.Errorf("notice = %v", n)
	}
	if len(e.fan.byID(gate.GetId())) != 0 {
		t.Error("an unrecorded gate event was fanned out")
	}
	if len(e.logs.WithMessage("bus.record_failed")) == 0 {
		t.Error("no bus.record_failed")
	}
	if e.gh.Counts().Writes != 0 {
		t.Error("something was written")
	}
	if metricSum(t, w, "loop_ledger_writer_failed_total") != 1 || metricSum(t, w, "loop_ledger_writer_dlq_total") != 1 {
		t.Error("failed/dlq not counted")
	}
}

// TestStandingRefIsNoLedgerBypass: a reply whose ref is not a GitHub issue
// is not fanned out unrecorded, a standing session's original
// standing:<name> included: a standing session's replies are recorded on its
// ledger issue (docs/decisions/118-standing-sessions-keep-a-ledger-issue.md).
func TestStandingRefIsNoLedgerBypass(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer-1")
	reply := replyEv("slack:EvStanding", "standing:triage", "run this")
	e.publish(reply)
	testkit.WaitWithin(t, 60*time.Second, "the DLQ entry", func() bool { return len(e.dlq()) == 1 })
	if d := e.dlq()[0]; d.CEID != reply.GetId() || !strings.Contains(d.Reason, "bad-ref") {
		t.Errorf("DLQ entry = %s %q", d.CEID, d.Reason)
	}
	if len(e.fan.byID(reply.GetId())) != 0 {
		t.Error("a reply to standing:triage was fanned out unrecorded")
	}
}

// TestQuestionIsScrubbed: attack 6. A prompt-injected agent runs
// `the-loop ask "$(env)"`; the question record the ledger publishes on GitHub
// is scrubbed like every relayed text, so no token reaches GitHub.
func TestQuestionIsScrubbed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer-1")
	secrets := []string{
		"ghp_R4nd0mT0kenV4lue1234567890abcdefABCD",
		"xoxb-1234567890-0987654321-AbCdEfGhIjKlMnOpQrStUvWx",
		"AKIAIOSFODNN7EXAMPLE",
		"9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", // LOOP_ENVELOPE_KEY's value
		"hunter2-secret-value",                                             // the value of MY_API_TOKEN in the environment
	}
	text := "Which of these should I use?\n" +
		"GITHUB_TOKEN=" + secrets[0] + "\n" +
		"SLACK_BOT_TOKEN=" + secrets[1] + "\n" +
		"AWS_ACCESS_KEY_ID=" + secrets[2] + "\n" +
		"LOOP_ENVELOPE_KEY=" + secrets[3] + "\n" +
		"MY_API_TOKEN=" + secrets[4]
	ev := questionEv("loop:ask:env", "github:"+testRepo+"#4", text)
	e.publish(ev)
	testkit.WaitWithin(t, 60*time.Second, "the question's fan-out", func() bool { return len(e.fan.byID(ev.GetId())) == 1 })
	cs := e.gh.Comments(testRepo, 4)
	if len(cs) != 1 {
		t.Fatalf("%d comments, want 1", len(cs))
	}
	for _, s := range secrets {
		if strings.Contains(cs[0].Body, s) {
			t.Errorf("the question record on GitHub carries %q", s)
		}
	}
	if !strings.Contains(cs[0].Body, "Which of these should I use?") || !strings.Contains(cs[0].Body, "LOOP_ENVELOPE_KEY=") {
		t.Errorf("the question itself was lost: %q", cs[0].Body)
	}
	if _, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: 4}, cs[0].Body); err != nil {
		t.Errorf("the scrubbed record's envelope: %v", err)
	}
}
