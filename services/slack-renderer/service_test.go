package slackrenderer

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/slackmsg"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestFiftyEventsInOrderInOneThread: the first event on a work item starts
// its thread (and binds it), the next 49 reply in it, in publish order, each
// once — with a 429 in the middle, whose Retry-After is waited out without
// reordering the thread.
func TestFiftyEventsInOrderInOneThread(t *testing.T) {
	e := newEnv(t)
	e.setSlack(func(s *config.SlackChannel) {
		s.Subscribe = []catalog.Type{catalog.SessionAwaitingInput, catalog.CommentHuman, catalog.PhaseApprovalPending}
	})
	var want []string
	for i := range 50 {
		id := fmt.Sprintf("loop:ev-%02d", i)
		var ev *loopv1.Event
		switch i % 3 {
		case 0:
			ev = ask(id, workItem, fmt.Sprintf("question %d", i))
		case 1:
			ev = comment(id, workItem)
		default:
			ev = note(id, catalog.PhaseApprovalPending, workItem)
		}
		want = append(want, id)
		e.publish(ev)
	}
	var limited atomic.Bool
	remove := e.fake.AfterPost(func(m slackfake.Message) {
		if eventIDOf(m) == "loop:ev-20" && limited.CompareAndSwap(false, true) {
			e.fake.RateLimit("chat.postMessage", time.Second)
		}
	})
	defer remove()
	e.start(startOpts{})

	e.fake.Wait(t, waitLong, "50 messages", func() bool { return len(e.fake.Messages(testChannel)) >= 50 })
	top := e.fake.TopLevel(testChannel)
	if len(top) != 1 || eventIDOf(top[0]) != want[0] {
		t.Fatalf("top-level messages = %v, want only the thread root %s", ids(top), want[0])
	}
	replies := e.fake.Thread(testChannel, top[0].TS)
	if got := append(ids(top), ids(replies)...); !slices.Equal(got, want) {
		t.Errorf("thread order:\n got %v\nwant %v", got, want)
	}
	if ts, ok := e.threadOf(workItem); !ok || ts != top[0].TS {
		t.Errorf("thread binding of %s = %q %v, want %s", workItem, ts, ok, top[0].TS)
	}
	if n := e.fake.Count("chat.postMessage", http.StatusTooManyRequests); n < 1 {
		t.Errorf("the injected 429 was never hit")
	}
	for _, r := range e.fake.Requests() {
		if r.Early {
			t.Errorf("a %s request at %s ignored the Retry-After", r.Method, r.At.Format(time.RFC3339Nano))
		}
	}
	if got := testutil.ToFloat64(e.m.rateLimited); got < 1 {
		t.Errorf("rate-limited metric = %v", got)
	}
	e.checkAllValid()
}

// TestRetryAfterIsWaitedOut: a 429 with Retry-After: 2 holds the work item's
// next post until the wait is over (a client that retried on its own 1 s
// backoff would be counted early), then everything lands in order.
func TestRetryAfterIsWaitedOut(t *testing.T) {
	e := newEnv(t)
	e.fake.RateLimit("chat.postMessage", 2*time.Second)
	e.start(startOpts{})
	for i := range 3 {
		e.publish(ask(fmt.Sprintf("loop:ask-%d", i), workItem, "q"))
	}
	e.fake.Wait(t, waitLong, "3 messages", func() bool { return len(e.fake.Messages(testChannel)) == 3 })
	reqs := e.fake.Requests()
	var first429, firstOK time.Time
	for _, r := range reqs {
		if r.Method != "chat.postMessage" {
			continue
		}
		if r.Early {
			t.Errorf("request at %s ignored the Retry-After", r.At.Format(time.RFC3339Nano))
		}
		if r.Status == http.StatusTooManyRequests && first429.IsZero() {
			first429 = r.At
		}
		if r.Status == http.StatusOK && firstOK.IsZero() {
			firstOK = r.At
		}
	}
	if first429.IsZero() {
		t.Fatal("no 429 was served")
	}
	if firstOK.Sub(first429) < 2*time.Second {
		t.Errorf("posted %s after the 429, before its Retry-After of 2s", firstOK.Sub(first429))
	}
	if got := ids(e.fake.Messages(testChannel)); !slices.Equal(got, []string{"loop:ask-0", "loop:ask-1", "loop:ask-2"}) {
		t.Errorf("order after the 429: %v", got)
	}
	if len(e.recs.Find("channel.post_failed", nil)) == 0 {
		t.Error("the 429 left no channel.post_failed record")
	}
}

// TestKilledAfterPostBeforeRecordPostsOnce: the renderer dies after Slack
// stored the message and before the ts reached KV (or the ack the server).
// The restarted renderer finds the message by its metadata and edits it: one
// message, not two.
func TestKilledAfterPostBeforeRecordPostsOnce(t *testing.T) {
	e := newEnv(t)
	var first *instance
	var killed atomic.Bool
	e.fake.AfterPost(func(m slackfake.Message) {
		if eventIDOf(m) == "loop:crash-1" && killed.CompareAndSwap(false, true) {
			first.kill()
		}
	})
	first = e.start(startOpts{})
	e.publish(ask("loop:crash-0", workItem, "the thread root"))
	e.publish(ask("loop:crash-1", workItem, "posted, then the process dies"))
	e.fake.Wait(t, waitLong, "the post before the crash", killed.Load)
	first.stop()

	e.start(startOpts{})
	e.publish(ask("loop:crash-2", workItem, "after the restart"))
	e.fake.Wait(t, waitLong, "the message after the restart", func() bool {
		return slices.Contains(ids(e.fake.Messages(testChannel)), "loop:crash-2")
	})
	got := ids(e.fake.Messages(testChannel))
	if !slices.Equal(got, []string{"loop:crash-0", "loop:crash-1", "loop:crash-2"}) {
		t.Fatalf("messages = %v, want each event once, in order", got)
	}
	if m := e.fake.Messages(testChannel)[1]; m.Edits != 1 {
		t.Errorf("the message posted before the crash was edited %d times, want 1 (found, then refreshed)", m.Edits)
	}
	if e.fake.Count("conversations.replies", http.StatusOK) == 0 {
		t.Error("the restarted renderer did not search the thread")
	}
	if !slices.ContainsFunc(e.recs.Find("channel.posted", nil), func(r eventlog.Record) bool { return r.Fields["op"] == "recovered" }) {
		t.Error("no channel.posted record with op=recovered")
	}
}

// TestKilledAfterRecordBeforeAckEdits: the ts reached KV but the ack never
// reached the server; the redelivery edits the message instead of posting.
func TestKilledAfterRecordBeforeAckEdits(t *testing.T) {
	e := newEnv(t)
	var killed atomic.Bool
	e.start(startOpts{afterRecord: func(_ *Service, conn *bus.Conn, ev *loopv1.Event) {
		if ev.GetId() == "loop:ack-0" && killed.CompareAndSwap(false, true) {
			conn.Close()
		}
	}})
	e.publish(ask("loop:ack-0", workItem, "recorded, ack lost"))
	e.fake.Wait(t, waitLong, "the first post", killed.Load)

	e.start(startOpts{})
	e.fake.Wait(t, waitLong, "the edit on redelivery", func() bool {
		ms := e.fake.Messages(testChannel)
		return len(ms) == 1 && ms[0].Edits == 1
	})
	if n := e.fake.Count("chat.postMessage", 0); n != 1 {
		t.Errorf("chat.postMessage called %d times, want 1", n)
	}
	if n := e.fake.Count("conversations.history", 0) + e.fake.Count("conversations.replies", 0); n != 0 {
		t.Errorf("searched %d times although the ts was recorded", n)
	}
}

// TestLostResponseIsFoundNotReposted: Slack stored the message but the
// answer never arrived; the retry finds it instead of posting twice.
func TestLostResponseIsFoundNotReposted(t *testing.T) {
	e := newEnv(t)
	e.fake.DropResponseAfterPost(1)
	e.start(startOpts{})
	e.publish(ask("loop:lost-0", workItem, "first"))
	e.publish(ask("loop:lost-1", workItem, "second"))
	e.fake.Wait(t, waitLong, "both messages", func() bool {
		return slices.Contains(ids(e.fake.Messages(testChannel)), "loop:lost-1")
	})
	if got := ids(e.fake.Messages(testChannel)); !slices.Equal(got, []string{"loop:lost-0", "loop:lost-1"}) {
		t.Fatalf("messages = %v", got)
	}
	if e.fake.Count("conversations.history", http.StatusOK) == 0 {
		t.Error("no search for the thread root whose answer was lost")
	}
	if ts, ok := e.threadOf(workItem); !ok || ts != e.fake.TopLevel(testChannel)[0].TS {
		t.Errorf("the recovered root was not bound: %q %v", ts, ok)
	}
}

// TestKickoffAndRecordFailedAnsweredInOriginatingThread: the kickoff's
// fan-out replies to the person's top-level message with the new issue's
// link and binds that thread to the issue, so the issue's later events land
// there; a failure notice from the ledger is answered in the thread too —
// neither needs a subscription (R6.5, decision 017).
func TestKickoffAndRecordFailedAnsweredInOriginatingThread(t *testing.T) {
	e := newEnv(t)
	e.setSlack(func(s *config.SlackChannel) { s.Publish = append(s.Publish, catalog.WorkItemCreate) })
	root := e.fake.AddMessage(testChannel, "", "U0PERSON", "please add dark mode")
	conv := &loopv1.Conversation{Channel: testChannel, MessageTs: root}
	e.publish(&loopv1.Event{Id: "slack:Ev0KICK", Source: "slack", Type: string(catalog.WorkItemCreate),
		Subject: "slack:" + testChannel + "/" + root, Time: evTime, Conversation: conv,
		Ledger: &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: 42, Url: "https://github.com/octo/repo/issues/42"},
		Body:   &loopv1.Event_WorkItemCreate{WorkItemCreate: &loopv1.WorkItemCreate{Repo: "octo/repo", Title: "Dark mode"}}})
	e.start(startOpts{})
	e.fake.Wait(t, waitLong, "the kickoff answer", func() bool { return len(e.fake.Thread(testChannel, root)) == 1 })
	answer := e.fake.Thread(testChannel, root)[0]
	if !strings.Contains(string(answer.Blocks), "https://github.com/octo/repo/issues/42") || !strings.Contains(answer.Text, "issues/42") {
		t.Errorf("kickoff answer lacks the issue link: %s", answer.Blocks)
	}
	testkit.WaitFor(t, "the kickoff thread bound to the new issue", func() bool {
		ts, ok := e.threadOf("github:octo/repo#42")
		return ok && ts == root
	})

	e.publish(ask("loop:ask-42", "github:octo/repo#42", "first question on the new issue"))
	notice := note("loop:record-failed-1", catalog.RecordFailed, "github:octo/repo#42")
	notice.Conversation = &loopv1.Conversation{Channel: testChannel, ThreadTs: root, MessageTs: "1700000009.000900"}
	notice.CausationId = "slack:Ev0GATE"
	e.publish(notice)
	e.fake.Wait(t, waitLong, "the question and the notice in the kickoff thread", func() bool {
		return len(e.fake.Thread(testChannel, root)) == 3
	})
	if got := ids(e.fake.Thread(testChannel, root)); !slices.Equal(got, []string{"slack:Ev0KICK", "loop:ask-42", "loop:record-failed-1"}) {
		t.Errorf("kickoff thread = %v", got)
	}
	if n := len(e.fake.TopLevel(testChannel)); n != 1 {
		t.Errorf("%d top-level messages, want only the person's", n)
	}
	e.checkAllValid()
}

// TestNothingEchoedToTheOriginChannel: a reply raised on this channel, the
// ledger's read-back carrying its envelope, and a comment carrying this
// channel's conversation are all acknowledged without a message, even when
// subscribed; a sentinel on the same work item (same partition, in order)
// proves they were handled.
func TestNothingEchoedToTheOriginChannel(t *testing.T) {
	e := newEnv(t)
	e.setSlack(func(s *config.SlackChannel) { s.Subscribe = catalog.Types() })
	here := &loopv1.Conversation{Channel: testChannel, ThreadTs: "1700000000.000100", MessageTs: "1700000001.000100"}
	reply := &loopv1.Event{Id: "slack:Ev0REPLY", Source: "slack", Type: string(catalog.WorkItemReply), Subject: workItem, Time: evTime,
		Conversation: here, Body: &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "my own words"}}}
	readBack := &loopv1.Event{Id: "gh:readback", Source: "github", Type: string(catalog.LedgerRecord), Subject: workItem, Time: evTime,
		Conversation: here, Body: &loopv1.Event_LedgerRecord{LedgerRecord: &loopv1.LedgerRecord{EventId: "slack:Ev0REPLY", EventType: "work-item.reply"}}}
	echo := comment("gh:echo", workItem)
	echo.Conversation = here
	for _, ev := range []*loopv1.Event{reply, readBack, echo, ask("loop:sentinel", workItem, "sentinel")} {
		e.publish(ev)
	}
	e.start(startOpts{})
	e.fake.Wait(t, waitLong, "the sentinel", func() bool { return len(e.fake.Messages(testChannel)) >= 1 })
	if got := ids(e.fake.Messages(testChannel)); !slices.Equal(got, []string{"loop:sentinel"}) {
		t.Errorf("messages = %v, want only the sentinel", got)
	}
	for _, reason := range []string{skipOrigin, skipUnsubscribable, skipEcho} {
		if got := testutil.ToFloat64(e.m.skipped.WithLabelValues(reason)); got != 1 {
			t.Errorf("skipped{%s} = %v, want 1", reason, got)
		}
	}
}

// TestOffOrTokenlessChannelAcksAndMovesOn: with Slack disabled, or enabled
// without a bot token, the renderer keeps consuming and acknowledges what it
// cannot deliver (recording post_failed in the second case); when the config
// turns the channel on, later events on the same work item — held behind
// the earlier ones in their partition if those were not acknowledged — are
// delivered.
func TestOffOrTokenlessChannelAcksAndMovesOn(t *testing.T) {
	e := newEnv(t)
	e.setSlack(func(s *config.SlackChannel) { s.Enabled = false })
	first := e.start(startOpts{})
	for i := range 3 {
		e.publish(ask(fmt.Sprintf("loop:off-%d", i), workItem, "q"))
	}
	testkit.WaitFor(t, "3 events skipped as disabled", func() bool { return testutil.ToFloat64(e.m.skipped.WithLabelValues(skipDisabled)) == 3 })
	first.stop()

	e.setSlack(func(s *config.SlackChannel) { s.Enabled = true })
	tokenless := e.start(startOpts{noToken: true})
	for i := range 3 {
		e.publish(ask(fmt.Sprintf("loop:notoken-%d", i), workItem, "q"))
	}
	testkit.WaitFor(t, "3 post_failed records without a token", func() bool { return len(e.recs.Find("channel.post_failed", nil)) == 3 })
	for _, r := range e.recs.Find("channel.post_failed", nil) {
		if r.Fields["error"] != "no-bot-token" {
			t.Errorf("post_failed error = %v, want no-bot-token", r.Fields["error"])
		}
	}
	tokenless.stop()

	e.start(startOpts{})
	e.publish(ask("loop:on-0", workItem, "delivered at last"))
	e.fake.Wait(t, waitLong, "the first delivered event", func() bool { return len(e.fake.Messages(testChannel)) == 1 })
	if got := ids(e.fake.Messages(testChannel)); !slices.Equal(got, []string{"loop:on-0"}) {
		t.Errorf("messages = %v", got)
	}
}

// TestGateButtonsFollowTheLiveConfig: the same approval notification gets
// the buttons only while the channel holds the gate.feedback grant and reads
// in socket mode; the config is read per event, so a reload applies at once.
func TestGateButtonsFollowTheLiveConfig(t *testing.T) {
	e := newEnv(t)
	e.setSlack(func(s *config.SlackChannel) {
		s.Subscribe = []catalog.Type{catalog.PhaseApprovalPending}
		s.Read.Mode = config.ReadPoll
		s.Publish = append(s.Publish, catalog.GateFeedback)
	})
	e.start(startOpts{})
	e.publish(gateNote("loop:gate-poll", workItem, "requirements-approval.3.1"))
	e.fake.Wait(t, waitLong, "the poll-mode message", func() bool { return len(e.fake.Messages(testChannel)) == 1 })
	e.setSlack(func(s *config.SlackChannel) { s.Read.Mode = config.ReadSocket })
	e.publish(gateNote("loop:gate-socket", workItem, "requirements-approval.3.1"))
	e.fake.Wait(t, waitLong, "the socket-mode message", func() bool { return len(e.fake.Messages(testChannel)) == 2 })
	ms := e.fake.Messages(testChannel)
	if strings.Contains(string(ms[0].Blocks), slackmsg.ApproveActionID) {
		t.Error("poll mode: gate buttons drawn")
	}
	if !strings.Contains(string(ms[1].Blocks), slackmsg.ApproveActionID) || !strings.Contains(string(ms[1].Blocks), slackmsg.RequestChangesActionID) {
		t.Errorf("socket mode with the grant: no gate buttons: %s", ms[1].Blocks)
	}
}

// TestPermanentSlackErrorGoesToTheDLQ: a refusal no retry can fix
// (channel_not_found) is recorded and dead-lettered, and the partition
// moves on to the next event.
func TestPermanentSlackErrorGoesToTheDLQ(t *testing.T) {
	e := newEnv(t)
	e.fake.FailWith("chat.postMessage", 1, "channel_not_found")
	e.start(startOpts{})
	e.publish(ask("loop:dead-0", workItem, "refused"))
	e.publish(ask("loop:dead-1", workItem, "delivered"))
	e.fake.Wait(t, waitLong, "the next event", func() bool { return len(e.fake.Messages(testChannel)) == 1 })
	if got := ids(e.fake.Messages(testChannel)); !slices.Equal(got, []string{"loop:dead-1"}) {
		t.Errorf("messages = %v", got)
	}
	testkit.WaitFor(t, "the DLQ copy", func() bool {
		st, err := e.pub.StreamStats(t.Context(), bus.StreamDLQ)
		return err == nil && st.Msgs == 1
	})
	failed := e.recs.Find("channel.post_failed", nil)
	if len(failed) != 1 || failed[0].Fields["error"] != "channel_not_found" || failed[0].Fields["retry"] != false {
		t.Errorf("post_failed records = %+v", failed)
	}
}

// TestServerErrorIsRetried: a 5xx may or may not have posted; the retry
// searches, finds nothing, posts once.
func TestServerErrorIsRetried(t *testing.T) {
	e := newEnv(t)
	e.fake.Fail("chat.postMessage", 1, http.StatusServiceUnavailable)
	e.start(startOpts{})
	e.publish(ask("loop:5xx-0", workItem, "q"))
	e.fake.Wait(t, waitLong, "the message", func() bool { return len(e.fake.Messages(testChannel)) == 1 })
	if n := e.fake.Count("conversations.history", http.StatusOK); n != 1 {
		t.Errorf("searched %d times after an uncertain failure, want 1", n)
	}
	if got := e.recs.Find("channel.post_failed", nil); len(got) != 1 || got[0].Fields["error"] != "http-503" {
		t.Errorf("post_failed = %+v", got)
	}
}
