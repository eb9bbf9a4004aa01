package ingressslack

import (
	"context"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// pollEnv is an env in poll mode whose bound thread and kickoff channel live
// in the Slack fake.
func pollEnv(t *testing.T) (*env, string) {
	t.Helper()
	e := newEnv(t)
	e.update(func(c *config.Config) { c.Channels.Slack.Read.Mode = config.ReadPoll })
	root := e.slack.AddMessage(testChannel, "", slackfake.BotUserID, "the renderer's thread root")
	e.bind(testChannel, root, refOne)
	return e, root
}

func (e *env) cursor(key string) string {
	e.t.Helper()
	v, err := e.kv(bus.BucketCursors).Get(context.Background(), key)
	if err != nil {
		return ""
	}
	return string(v.Value)
}

// TestPoll reads bound threads through conversations.replies and the
// kickoff channel through conversations.history, with cursors in KV: each
// reply and each new top-level message once, none of the channel's history
// from before the first poll, and the bot's own replies dropped.
func TestPoll(t *testing.T) {
	e, root := pollEnv(t)
	old := e.slack.AddMessage(testChannel, "", "UALICE", "an old message, before the-loop read the channel")
	early := e.slack.AddMessage(testChannel, root, "UALICE", "a reply while no reader ran")
	s := e.start()
	e.waitReady(s)
	testkit.WaitWithin(e.t, waitFor, "the kickoff cursor", func() bool { return e.cursor(kickoffCursorKey(testChannel)) != "" })
	if c := e.cursor(kickoffCursorKey(testChannel)); slackmsg.CompareTS(c, old) < 0 {
		t.Errorf("kickoff cursor %s starts before the channel's newest message %s", c, old)
	}
	e.waitEvent(messageID(testChannel, early))

	r1 := e.slack.AddMessage(testChannel, root, "UALICE", "the-loop pause")
	own := e.slack.AddMessage(testChannel, root, slackfake.BotUserID, "the bot's own reply")
	top := e.slack.AddMessage(testChannel, "", "UALICE", "Poll me a work item")
	if ev := e.waitEvent(messageID(testChannel, r1)); ev.GetType() != string(catalog.ControlCommand) {
		t.Errorf("reply: %s", ev.GetType())
	}
	if ev := e.waitEvent(messageID(testChannel, top)); ev.GetType() != string(catalog.WorkItemCreate) {
		t.Errorf("top-level: %s", ev.GetType())
	}
	testkit.WaitWithin(e.t, waitFor, "the thread cursor to pass the bot's reply", func() bool {
		return slackmsg.CompareTS(e.cursor(threadCursorKey(testChannel, root)), own) >= 0
	})
	// Several more cycles: nothing is published again.
	n := e.stored()
	calls := e.slack.Count("conversations.replies", 0)
	testkit.WaitWithin(e.t, waitFor, "more poll cycles", func() bool { return e.slack.Count("conversations.replies", 0) >= calls+3 })
	if e.stored() != n {
		t.Errorf("later cycles published %d more", e.stored()-n)
	}
	if e.stored() != 3 {
		t.Errorf("stored %d events, want 3 (early reply, control, kickoff)", e.stored())
	}
	if e.has(messageID(testChannel, old)) {
		t.Errorf("a message from before the first poll became a work item")
	}
}

// TestPollHonoursRetryAfter: a 429 stops the method until its Retry-After
// has passed — no request arrives early — and reading resumes after it.
func TestPollHonoursRetryAfter(t *testing.T) {
	e, root := pollEnv(t)
	e.slack.RateLimit("conversations.replies", time.Second)
	s := e.start()
	e.waitReady(s)
	r := e.slack.AddMessage(testChannel, root, "UALICE", "after the limit")
	e.waitEvent(messageID(testChannel, r))
	for _, req := range e.slack.Requests() {
		if req.Early {
			t.Errorf("%s at %s arrived before its Retry-After ran out", req.Method, req.At)
		}
	}
	if n := e.slack.Count("conversations.replies", 429); n != 1 {
		t.Errorf("429s = %d, want 1", n)
	}
	if v := metric(t, s.m.ratelimit.WithLabelValues("conversations.replies")); v != 1 {
		t.Errorf("ratelimited metric = %v, want 1", v)
	}
}

// TestPollTwoReplicasReadOnce: two replicas poll the same threads; each
// shard is read by the one holding its lease, so only one replica calls
// Slack, every reply is published once, and when that replica stops the
// other takes over.
func TestPollTwoReplicasReadOnce(t *testing.T) {
	e, root := pollEnv(t)
	lease := func(_ *Config, o *Options) { o.LeaseTTL = time.Second }
	a := e.start(lease)
	b := e.start(lease)
	e.waitReady(a)
	e.waitReady(b)
	var ids []string
	for range 5 {
		ids = append(ids, messageID(testChannel, e.slack.AddMessage(testChannel, root, "UALICE", "reply")))
	}
	for _, id := range ids {
		e.waitEvent(id)
	}
	ca := metric(t, a.m.slackCalls.WithLabelValues("conversations.replies", "ok"))
	cb := metric(t, b.m.slackCalls.WithLabelValues("conversations.replies", "ok"))
	if (ca == 0) == (cb == 0) {
		t.Errorf("replies calls: replica a %v, replica b %v; want exactly one reader", ca, cb)
	}
	if e.stored() != 5 {
		t.Errorf("stored %d, want 5", e.stored())
	}
	reader, other := a, b
	if ca == 0 {
		reader, other = b, a
	}
	reader.stop()
	r := e.slack.AddMessage(testChannel, root, "UALICE", "after the reader stopped")
	e.waitEvent(messageID(testChannel, r))
	if metric(t, other.m.slackCalls.WithLabelValues("conversations.replies", "ok")) == 0 {
		t.Errorf("the standby replica never took over")
	}
}

// TestModeChange: a config reload that changes read.mode restarts the
// reader without restarting the service: socket → events (the listener
// comes up, the socket is closed) → poll → off (disabled, ready).
func TestModeChange(t *testing.T) {
	e := newEnv(t)
	s := e.start()
	e.sock.WaitConnected(t, 1, waitFor)
	e.waitReady(s)

	e.update(func(c *config.Config) { c.Channels.Slack.Read.Mode = config.ReadEvents })
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	addr := s.EventsAddr(ctx)
	if addr == nil {
		t.Fatal("the events listener never came up")
	}
	testkit.WaitWithin(e.t, waitFor, "the socket to close", func() bool { return !e.sock.Live() })
	e.waitReady(s)
	listener := &svc{Service: s.Service, http: httptestServerAt(addr.String())}
	if got, _ := e.send(listener, reply("UALICE", thread1, "via the events listener")); got.typ != catalog.WorkItemReply {
		t.Errorf("events mode: %v", got)
	}

	root := e.slack.AddMessage(testChannel, "", slackfake.BotUserID, "root")
	e.bind(testChannel, root, refOne)
	e.update(func(c *config.Config) { c.Channels.Slack.Read.Mode = config.ReadPoll })
	r := e.slack.AddMessage(testChannel, root, "UALICE", "via poll")
	e.waitEvent(messageID(testChannel, r))

	e.update(func(c *config.Config) { c.Channels.Slack.Read.Mode = "bogus" })
	e.waitReady(s)
	calls := e.slack.Count("conversations.replies", 0)
	e.slack.AddMessage(testChannel, root, "UALICE", "nobody reads this")
	time.Sleep(500 * time.Millisecond) // several poll intervals: proves a negative, not a timing
	if n := e.slack.Count("conversations.replies", 0); n > calls+1 {
		t.Errorf("an unknown mode kept polling (%d calls)", n-calls)
	}
}
