package ingressslack

import (
	"slices"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// started is an env with one service in socket mode, ready, whose HTTP
// handler is also served (events mode's handler works in any mode).
func started(t *testing.T) (*env, *svc) {
	t.Helper()
	e := newEnv(t)
	s := e.start()
	e.waitReady(s)
	return e, s
}

var seq int

// send posts one message event through the Events API handler and returns
// what became of it.
func (e *env) send(s *svc, ev map[string]any) (outcome, map[string]any) {
	e.t.Helper()
	seq++
	i := e.logs.Len()
	if r := e.post(s, PathEvents, messageBody("EvTest"+itoa(seq), ev)); r.status != 200 {
		e.t.Fatalf("POST %s = %d %s, want 200", PathEvents, r.status, r.body)
	}
	return e.settledSince(i)
}

func (e *env) press(s *svc, body []byte) (outcome, map[string]any) {
	e.t.Helper()
	i := e.logs.Len()
	if r := e.post(s, PathInteractions, form(body)); r.status != 200 {
		e.t.Fatalf("POST %s = %d %s, want 200", PathInteractions, r.status, r.body)
	}
	return e.settledSince(i)
}

func itoa(n int) string {
	return string(rune('a'+n%26)) + string(rune('a'+n/26%26)) + string(rune('a'+n/676%26))
}

func nextTS() string {
	seq++
	return "1700001000." + string([]byte{byte('0' + seq/100000%10), byte('0' + seq/10000%10), byte('0' + seq/1000%10), byte('0' + seq/100%10), byte('0' + seq/10%10), byte('0' + seq%10)})
}

func reply(user, thread, text string) map[string]any {
	return map[string]any{"user": user, "channel": testChannel, "ts": nextTS(), "thread_ts": thread, "text": text}
}

func topLevel(user, text string) map[string]any {
	return map[string]any{"user": user, "channel": testChannel, "ts": nextTS(), "text": text}
}

// TestClassification: a bound-thread reply becomes exactly one type, by
// decision 015's precedence — control keyword, then gate (with the grant), then
// reply — and a top-level message in the configured channel a kickoff.
func TestClassification(t *testing.T) {
	e, s := started(t)
	cases := []struct {
		name string
		msg  map[string]any
		want catalog.Type
	}{
		{"prose in a thread not at a gate", reply("UALICE", thread1, "please also handle the empty case"), catalog.WorkItemReply},
		{"prose at a human gate with the grant", reply("UALICE", gate, "looks good to me"), catalog.GateFeedback},
		{"control keyword, even at a gate", reply("UALICE", gate, "the-loop stop"), catalog.ControlCommand},
		{"control keyword in prose", reply("UALICE", thread1, "ok, the-loop pause for now"), catalog.ControlCommand},
		{"top-level in the configured channel", topLevel("UALICE", "Fix the login redirect"), catalog.WorkItemCreate},
	}
	for _, c := range cases {
		got, _ := e.send(s, c.msg)
		if got != (outcome{typ: c.want}) {
			t.Errorf("%s: %v, want published:%s", c.name, got, c.want)
		}
	}
	// Without the gate.feedback grant the same reply at a gate is
	// work-item.reply, exactly today (R6.3).
	e.update(func(c *config.Config) {
		c.Channels.Slack.Publish = slices.DeleteFunc(c.Channels.Slack.Publish, func(t catalog.Type) bool { return t == catalog.GateFeedback })
	})
	if got, _ := e.send(s, reply("UALICE", gate, "looks good to me")); got != (outcome{typ: catalog.WorkItemReply}) {
		t.Errorf("at a gate without the grant: %v, want published:work-item.reply", got)
	}
}

// TestEventContent: the published events carry the actor from config, the
// conversation, and the body of their type; a kickoff's repo and labels come
// from config only (abuse 7).
func TestEventContent(t *testing.T) {
	e, s := started(t)
	msg := reply("UALICE", thread1, "ship the fix")
	_, rec := e.send(s, msg)
	ev := e.waitEvent(rec["event_id"].(string))
	if ev.GetId() != messageID(testChannel, msg["ts"].(string)) || ev.GetSource() != "slack" || ev.GetSubject() != refOne {
		t.Errorf("event attributes = %s %s %s", ev.GetId(), ev.GetSource(), ev.GetSubject())
	}
	if a := ev.GetActor(); a.GetGithub() != "alice" || a.GetSlack() != "UALICE" || a.GetName() != "Alice" {
		t.Errorf("actor = %v, want alice's entry", a)
	}
	if c := ev.GetConversation(); c.GetChannel() != testChannel || c.GetThreadTs() != thread1 || c.GetMessageTs() != msg["ts"] {
		t.Errorf("conversation = %v", c)
	}
	if ev.GetReply().GetText() != "ship the fix" {
		t.Errorf("reply text = %q", ev.GetReply().GetText())
	}

	top := topLevel("UALICE", "Add dark mode\n\nrepo: evil/repo labels: auto-merge")
	_, rec = e.send(s, top)
	ev = e.waitEvent(rec["event_id"].(string))
	c := ev.GetWorkItemCreate()
	if c.GetRepo() != kickoffRepo || !slices.Equal(c.GetLabels(), []string{"the-loop"}) || c.GetTitle() != "Add dark mode" {
		t.Errorf("create = repo %q labels %v title %q, want config's repo and labels", c.GetRepo(), c.GetLabels(), c.GetTitle())
	}
	if ev.GetSubject() != "slack:"+testChannel+"/"+top["ts"].(string) || ev.GetConversation().GetThreadTs() != "" {
		t.Errorf("create subject %q conversation %v", ev.GetSubject(), ev.GetConversation())
	}

	_, rec = e.send(s, reply("UALICE", thread1, "the-loop stop"))
	if cc := e.waitEvent(rec["event_id"].(string)).GetControlCommand(); cc.GetCommand() != "stop" || cc.GetText() != "the-loop stop" {
		t.Errorf("control = %v", cc)
	}
}

// TestDropReasons: each drop reason, with its record.
func TestDropReasons(t *testing.T) {
	e, s := started(t)
	other := topLevel("UALICE", "hi")
	other["channel"] = "C0THER"
	cases := []struct {
		name   string
		msg    map[string]any
		setup  func(*config.Config)
		reason string
	}{
		{"reply in an unbound thread", reply("UALICE", "1600000000.000001", "hi"), nil, reasonUnmapped},
		{"top-level outside the configured channel", other, nil, reasonUnmapped},
		{"another app's message", map[string]any{"user": "UOTHERBOT", "bot_id": "B0OTHER", "channel": testChannel, "ts": nextTS(), "thread_ts": thread1, "text": "beep"}, nil, reasonSelfAuthored},
		{"bot_message subtype", map[string]any{"subtype": "bot_message", "bot_id": "B1", "channel": testChannel, "ts": nextTS(), "thread_ts": thread1, "text": "beep"}, nil, reasonSelfAuthored},
		{"our own user (auth.test)", reply(slackfake.BotUserID, thread1, "echo"), nil, reasonSelfAuthored},
		{"a member not in authorizedUsers", reply("UMALLORY", thread1, "hi"), nil, reasonUnauthorized},
		{"a Slack-only person answering a gate (decision 015)", reply("USLACKONLY", gate, "approved"), nil, reasonUnauthorized},
		{"a reply without the reply grant", reply("UALICE", thread1, "hi"), func(c *config.Config) {
			c.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemCreate}
		}, reasonUnpublishable},
		{"a kickoff with no repo", topLevel("UALICE", "new thing"), func(c *config.Config) { c.Channels.Slack.Kickoff.Repo = "" }, reasonKickoffDisabled},
		{"two different control keywords", reply("UALICE", thread1, "the-loop stop and the-loop resume"), nil, reasonAmbiguousControl},
		{"an edit", map[string]any{"subtype": "message_changed", "channel": testChannel, "ts": nextTS(),
			"message": map[string]any{"user": "UALICE", "text": "edited", "ts": "1"}}, nil, reasonIgnored},
		{"the channel disabled", reply("UALICE", thread1, "hi"), func(c *config.Config) { c.Channels.Slack.Enabled = false }, reasonChannelDisabled},
	}
	base := e.config()
	for _, c := range cases {
		e.update(func(cfg *config.Config) {
			*cfg = *base
			if c.setup != nil {
				c.setup(cfg)
			}
		})
		before := e.stored()
		got, rec := e.send(s, c.msg)
		if got.reason != c.reason {
			t.Errorf("%s: %v, want dropped:%s", c.name, got, c.reason)
		}
		if _, has := rec["text"]; has {
			t.Errorf("%s: the record carries text", c.name)
		}
		if n := e.stored(); n != before {
			t.Errorf("%s: the inbox stored %d message(s)", c.name, n-before)
		}
	}
	if metric(t, s.m.dropped.WithLabelValues(reasonUnauthorized, viaEvents)) != 2 {
		t.Errorf("dropped{unauthorized-actor} = %v, want 2", metric(t, s.m.dropped.WithLabelValues(reasonUnauthorized, viaEvents)))
	}
}

// TestAbuse1Unauthorized: a member in no entry replies, presses a button and
// posts top-level; nothing is published and each is unauthorized-actor —
// in a bound thread or not: authorization comes before mapping, so a reply
// in an unbound thread and a press on an unbound message are no different.
func TestAbuse1Unauthorized(t *testing.T) {
	e, s := started(t)
	before := e.stored()
	if got, rec := e.send(s, reply("UMALLORY", gate, "approved")); got.reason != reasonUnauthorized || rec["actor"] != "UMALLORY" {
		t.Errorf("reply: %v %v", got, rec)
	}
	if got, _ := e.press(s, pressBody("UMALLORY", testChannel, gate, "", slackmsg.ApproveActionID, slackmsg.ApproveValue)); got.reason != reasonUnauthorized {
		t.Errorf("press: %v", got)
	}
	if got, _ := e.send(s, topLevel("UMALLORY", "create a thing")); got.reason != reasonUnauthorized {
		t.Errorf("top-level: %v", got)
	}
	if got, rec := e.send(s, reply("UMALLORY", "1600000000.000001", "approved")); got.reason != reasonUnauthorized || rec["work_item"] != nil {
		t.Errorf("reply in an unbound thread: %v %v", got, rec)
	}
	if got, _ := e.press(s, pressBody("UMALLORY", testChannel, "1600000000.000009", "", slackmsg.ApproveActionID, slackmsg.ApproveValue)); got.reason != reasonUnauthorized {
		t.Errorf("press on an unbound message: %v", got)
	}
	other := topLevel("UMALLORY", "hello")
	other["channel"] = "C0ELSEWHERE"
	if got, _ := e.send(s, other); got.reason != reasonUnauthorized {
		t.Errorf("top-level outside the configured channel: %v", got)
	}
	if n := e.stored(); n != before {
		t.Errorf("the inbox stored %d message(s), want none", n-before)
	}
}

// TestAbuse2ControlWithoutGrant: an authorized member's control keyword on a
// channel without the control.command grant is dropped, never delivered as a
// reply.
func TestAbuse2ControlWithoutGrant(t *testing.T) {
	e, s := started(t)
	e.update(func(c *config.Config) {
		c.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemReply, catalog.GateFeedback}
	})
	before := e.stored()
	got, rec := e.send(s, reply("UALICE", thread1, "please the-loop stop now"))
	if got.reason != reasonUnpublishable || rec["event_type"] != string(catalog.ControlCommand) {
		t.Errorf("%v %v, want dropped:unpublishable-event of control.command", got, rec)
	}
	// Typed top-level on a channel that may open issues: the keyword makes
	// it a control command, dropped without the grant, not an issue.
	e.update(func(c *config.Config) {
		c.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemReply, catalog.GateFeedback, catalog.WorkItemCreate}
	})
	got, rec = e.send(s, topLevel("UALICE", "the-loop stop"))
	if got.reason != reasonUnpublishable || rec["event_type"] != string(catalog.ControlCommand) {
		t.Errorf("top-level: %v %v, want dropped:unpublishable-event of control.command", got, rec)
	}
	if n := e.stored(); n != before {
		t.Errorf("the inbox stored %d message(s), want none", n-before)
	}
	// With the grant a top-level command still names no work item.
	e.update(func(c *config.Config) {
		c.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemReply, catalog.ControlCommand, catalog.WorkItemCreate}
	})
	if got, rec := e.send(s, topLevel("UALICE", "the-loop stop")); got.reason != reasonUnmapped || rec["event_type"] != string(catalog.ControlCommand) {
		t.Errorf("top-level with the grant: %v %v, want dropped:unmapped", got, rec)
	}
	if n := e.stored(); n != before {
		t.Errorf("the inbox stored %d message(s), want none", n-before)
	}
}

// TestAbuse6KickoffDisabled: with no kickoff.repo nothing is created,
// whatever the grant says: kickoff-disabled with the work-item.create grant
// and without it.
func TestAbuse6KickoffDisabled(t *testing.T) {
	e, s := started(t)
	e.update(func(c *config.Config) { c.Channels.Slack.Kickoff = config.Kickoff{Labels: []string{"x"}} })
	before := e.stored()
	if got, _ := e.send(s, topLevel("UALICE", "Build it")); got.reason != reasonKickoffDisabled {
		t.Errorf("%v, want dropped:kickoff-disabled", got)
	}
	e.update(func(c *config.Config) { c.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemReply} })
	if got, _ := e.send(s, topLevel("UALICE", "Build it")); got.reason != reasonKickoffDisabled {
		t.Errorf("without the grant: %v, want dropped:kickoff-disabled", got)
	}
	if n := e.stored(); n != before {
		t.Errorf("the inbox stored %d message(s), want none", n-before)
	}
}

// TestAbuse8ActorFromConfig: the actor is the author's entry, whatever the
// text claims.
func TestAbuse8ActorFromConfig(t *testing.T) {
	e, s := started(t)
	_, rec := e.send(s, reply("W222", gate, "This is <@UALICE> (alice, Alice): approved"))
	ev := e.waitEvent(rec["event_id"].(string))
	if a := ev.GetActor(); a.GetGithub() != "hubot" || a.GetSlack() != "W222" || a.GetName() != "" {
		t.Errorf("actor = %v, want hubot's entry", a)
	}
}

// TestAbuse9CraftedActionValue: a press whose action id and value the-loop
// never rendered is free text (its value) through the ordinary path with the
// same checks; a rendered press carries the fixed text.
func TestAbuse9CraftedActionValue(t *testing.T) {
	e, s := started(t)
	// Rendered Approved at a gate: gate.feedback with graph's fixed text
	// and the visit the button names.
	value := e.gateValue(refGate)
	got, rec := e.press(s, pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, value))
	if got.typ != catalog.GateFeedback {
		t.Fatalf("rendered approve: %v", got)
	}
	gf := e.waitEvent(rec["event_id"].(string)).GetGateFeedback()
	if gf.GetText() != graph.ApproveText || gf.GetAction() != value || gf.GetGateVisit() != e.visit(refGate) {
		t.Errorf("rendered approve = %v", gf)
	}
	// Request changes on a message inside the thread.
	got, rec = e.press(s, pressBody("UALICE", testChannel, "1700000000.000300", gate, slackmsg.RequestChangesActionID, value))
	if gf := e.waitEvent(rec["event_id"].(string)).GetGateFeedback(); got.typ != catalog.GateFeedback || gf.GetText() != graph.RequestChangesText {
		t.Errorf("rendered request changes: %v %v", got, gf)
	}
	// A crafted value is the text: a keyword in it is a control command
	// (with the grant) exactly as typed; never a gate answer by value.
	got, rec = e.press(s, pressBody("UALICE", testChannel, thread1, "", "evil", "the-loop stop"))
	if cc := e.waitEvent(rec["event_id"].(string)).GetControlCommand(); got.typ != catalog.ControlCommand || cc.GetCommand() != "stop" {
		t.Errorf("crafted keyword: %v %v", got, cc)
	}
	// The rendered value with a forged action id is free text "approved",
	// carrying no rendered action.
	got, rec = e.press(s, pressBody("W222", testChannel, gate, "", "forged", slackmsg.ApproveValue))
	if gf := e.waitEvent(rec["event_id"].(string)).GetGateFeedback(); got.typ != catalog.GateFeedback || gf.GetText() != slackmsg.ApproveValue || gf.GetAction() != "" {
		t.Errorf("forged action id: %v %v", got, gf)
	}
	// Without the control grant the crafted keyword is dropped like a
	// typed one.
	e.update(func(c *config.Config) { c.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemReply} })
	if got, _ := e.press(s, pressBody("W111", testChannel, thread1, "", "evil", "the-loop stop")); got.reason != reasonUnpublishable {
		t.Errorf("crafted keyword without grant: %v", got)
	}
	// A press never starts a work item, and a link button is ignored.
	if got, _ := e.press(s, pressBody("UALICE", testChannel, "1600000000.000009", "", "evil", "make an issue")); got.reason != reasonUnmapped {
		t.Errorf("press on an unbound top-level message: %v", got)
	}
	if got, rec := e.press(s, pressBody("UALICE", testChannel, gate, "", slackmsg.LinkActionID, "")); got.reason != reasonIgnored || rec["detail"] != "link-button" {
		t.Errorf("link button: %v %v", got, rec)
	}
}

// TestPressPerPersonID: two people pressing one button are two events; one
// person pressing twice is one.
func TestPressPerPersonID(t *testing.T) {
	e, s := started(t)
	before := e.stored()
	value := e.gateValue(refGate)
	for _, u := range []string{"UALICE", "UALICE", "W111"} {
		e.press(s, pressBody(u, testChannel, gate, "", slackmsg.ApproveActionID, value))
	}
	if n := e.stored() - before; n != 2 {
		t.Errorf("stored %d events, want 2 (one per person)", n)
	}
}
