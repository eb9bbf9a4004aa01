package slackrenderer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/slack-go/slack"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/slackmsg"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Exactly one message per (channel, event id). The KV `posted` entry of key
// "<channel>/<event id>" moves claimed → posted:
//
//   - claimed is written (Create) before chat.postMessage, with the thread
//     the message goes to, so every retry posts to the same place;
//   - posted, with the message's ts, is written (Update) right after.
//
// A redelivery that finds posted edits the message (chat.update: same ts, so
// still one message, now rendered with the config in force). A redelivery that
// finds claimed does not know whether the post landed — the process may have
// died, or the answer been lost, after Slack stored the message and before the
// ts was written — so it first looks for the message: every message carries
// metadata naming its event id, and the recent messages of the thread (or of
// the channel, for a thread's first message) are searched for it
// (conversations.replies / conversations.history, include_all_metadata). Found,
// the ts is recorded and the message edited; not found, it is posted.
// A definite refusal (a 429, an ok:false answer) marks the claim rejected so
// the retry posts without searching.
//
// Residual risk: a second message appears only if the search misses a message
// that did land — it is older than the claim by more than searchBack (clock
// skew), Slack's history is not yet consistent with the post, or the bot lacks
// the history scope for the conversation (missing_scope: the renderer then
// prefers posting twice to never). The `posted` bucket keeps no TTL
// (docs/architecture.md#streams-and-state).

const (
	stateClaimed  = "claimed"
	stateRejected = "rejected"
	statePosted   = "posted"
)

// record is the value of a `posted` key. Ids and ts only, never content.
type record struct {
	State     string    `json:"state"`
	Channel   string    `json:"channel"`
	ThreadTS  string    `json:"thread_ts,omitempty"`
	TS        string    `json:"ts,omitempty"`
	ClaimedAt time.Time `json:"claimed_at"`
}

func postedKey(channel, eventID string) string { return channel + "/" + eventID }

// handle is the consumer's handler: decide, then deliver.
func (s *Service) handle(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) error {
	cfg := s.deps.Config().Channels.Slack
	switch catalog.Type(ev.GetType()) {
	case catalog.GateMoved:
		// Not a message: an edit of the gate's own message (gates.go).
		return s.moved(ctx, cfg, ev, d)
	case catalog.Alert:
		// For people, wherever their alerts go (alerts.go).
		return s.alert(ctx, cfg, ev, d)
	}
	p, skip := route(cfg, ev)
	log := s.deps.Log.With(slog.String("component", Name))
	attrs := service.EventAttrs(ev, d)
	if skip != "" {
		s.m.skipped.WithLabelValues(skip).Inc()
		log.LogAttrs(ctx, slog.LevelDebug, "event not for the Slack channel", append(attrs, slog.String("reason", skip))...)
		return nil
	}
	if s.api == nil {
		// Enabled without a token: nothing can be delivered, and holding
		// the partition would only stall it. Recorded, then acknowledged.
		s.warnOnce.Do(func() {
			log.Warn("channels.slack is enabled but LOOP_SLACK_BOT_TOKEN is not set: events are acknowledged undelivered")
		})
		s.failed(ctx, ev, cfg.Channel, "no-bot-token", false)
		return nil
	}
	start := time.Now()
	err := s.deliver(ctx, cfg, ev, p, d)
	if err == nil {
		s.m.latency.Observe(time.Since(start).Seconds())
	}
	return err
}

// deliver makes sure ev has its one message in the channel: it claims the
// event's `posted` key, finds a message an earlier delivery posted but did
// not remember, then edits that message or posts a new one.
func (s *Service) deliver(ctx context.Context, cfg config.SlackChannel, ev *loopv1.Event, p plan, d *bus.Delivery) error {
	ch := cfg.Channel
	key := postedKey(ch, ev.GetId())
	thread := p.thread
	if thread == "" && p.bindRef != "" {
		ts, ok, err := s.threads.ThreadFor(ctx, ch, p.bindRef)
		if err != nil {
			return err
		}
		if ok {
			thread = ts
		}
	}
	rec, rev, fresh, err := s.claim(ctx, key, record{State: stateClaimed, Channel: ch, ThreadTS: thread, ClaimedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	msg, buttons, err := s.render(ctx, cfg, ev)
	if err != nil {
		return err
	}
	if len(p.mention) > 0 {
		msg = withMentions(msg, p.mention)
	}
	rec, rev, outcome, err := s.recover(ctx, ev, ch, key, rec, rev, fresh)
	if err != nil {
		return err
	}
	if err := s.pace.wait(ctx, ch); err != nil {
		return err
	}
	rec, stands, err := s.send(ctx, ev, ch, key, rec, rev, msg)
	if err != nil || stands {
		return err
	}
	if buttons {
		if err := s.remember(ctx, ev, rec); err != nil {
			return err
		}
	}
	if p.bindRef != "" && (rec.ThreadTS == "" || p.answer) {
		root := rec.ThreadTS
		if root == "" {
			root = rec.TS
		}
		if err := s.threads.Bind(ctx, ch, root, p.bindRef); err != nil {
			return err
		}
	}
	if s.afterRecord != nil {
		s.afterRecord(ev)
	}
	s.m.delivered.WithLabelValues(outcome).Inc()
	s.deps.Events.Emit(ctx, "channel.posted",
		slog.String("channel", "slack"), slog.String("slack_channel", ch),
		slog.String("event_id", ev.GetId()), slog.String("event_type", ev.GetType()),
		slog.String("work_item", ev.GetSubject()), slog.String("thread", rec.ThreadTS),
		slog.String("ts", rec.TS), slog.String("op", outcome), slog.Uint64("delivery", d.NumDelivered))
	return nil
}

// render is ev's message, with the gate buttons when a press can be
// received (buttons).
func (s *Service) render(ctx context.Context, cfg config.SlackChannel, ev *loopv1.Event) (msg slackmsg.Message, buttons bool, err error) {
	buttons, err = s.buttonsFor(ctx, cfg, ev)
	if err != nil {
		return slackmsg.Message{}, false, err
	}
	msg = slackmsg.Render(ev, slackmsg.Options{
		Verbosity:   slackmsg.Verbosity(cfg.Verbosity),
		MaxChars:    cfg.MaxChars,
		GateButtons: buttons,
	})
	if err := slackmsg.Check(msg); err != nil {
		// A renderer bug must not cost the person the message: the
		// fallback text alone is always valid.
		s.deps.Log.Error("rendered blocks fail the Block Kit check; posting the text only", "event_id", ev.GetId(), "err", err)
		msg.Blocks = nil
	}
	return msg, buttons, nil
}

// recover settles what an earlier delivery left in rec: a message it posted
// (updated), or one it posted without remembering it, found by its metadata
// (recovered); otherwise the message is still to post (posted). A claim
// whose post was rejected is claimed again before posting.
func (s *Service) recover(ctx context.Context, ev *loopv1.Event, ch, key string, rec record, rev uint64, fresh bool) (record, uint64, string, error) {
	outcome := "posted"
	switch {
	case rec.State == statePosted:
		outcome = "updated"
	case rec.State == stateClaimed && !fresh:
		ts, err := s.find(ctx, rec, ev.GetId())
		if err != nil {
			return rec, rev, "", s.slackErr(ctx, ev, ch, "search", err, key, rec, rev)
		}
		if ts != "" {
			rec.State, rec.TS = statePosted, ts
			if rev, err = s.update(ctx, key, rec, rev); err != nil {
				return rec, rev, "", err
			}
			outcome = "recovered"
		}
	}
	if rec.State == stateRejected {
		// About to post again: until the answer is in, the outcome is
		// unknown once more.
		rec.State = stateClaimed
		var err error
		if rev, err = s.update(ctx, key, rec, rev); err != nil {
			return rec, rev, "", err
		}
	}
	return rec, rev, outcome, nil
}

// send edits the message rec names, or posts it and remembers its ts. stands
// is true when the delivery ends here, successful: the message to edit is
// gone or not ours, and posting again would break "one message".
func (s *Service) send(ctx context.Context, ev *loopv1.Event, ch, key string, rec record, rev uint64, msg slackmsg.Message) (_ record, stands bool, err error) {
	if rec.State == statePosted {
		if err := s.edit(ctx, rec, msg); err != nil {
			var se slack.SlackErrorResponse
			if errors.As(err, &se) && (se.Err == "message_not_found" || se.Err == "cant_update_message") {
				// Someone deleted the message (or it is not ours): the
				// edit is only a refresh, so the delivery stands.
				s.failed(ctx, ev, ch, se.Err, false)
				return rec, true, nil
			}
			return rec, false, s.slackErr(ctx, ev, ch, "chat.update", err, key, rec, rev)
		}
		return rec, false, nil
	}
	ts, err := s.post(ctx, rec, msg)
	if err != nil {
		return rec, false, s.slackErr(ctx, ev, ch, "chat.postMessage", err, key, rec, rev)
	}
	rec.State, rec.TS = statePosted, ts
	if _, err := s.update(ctx, key, rec, rev); err != nil {
		// The message is out but not remembered: the redelivery finds it
		// by its metadata.
		return rec, false, err
	}
	return rec, false, nil
}

// claim creates the key, or reads the claim a previous delivery left.
func (s *Service) claim(ctx context.Context, key string, want record) (record, uint64, bool, error) {
	b, _ := json.Marshal(want)
	rev, err := s.posted.Create(ctx, key, b)
	if err == nil {
		return want, rev, true, nil
	}
	if !errors.Is(err, bus.ErrKeyExists) {
		return record{}, 0, false, err
	}
	e, err := s.posted.Get(ctx, key)
	if err != nil {
		return record{}, 0, false, err
	}
	var rec record
	if err := json.Unmarshal(e.Value, &rec); err != nil || rec.Channel == "" {
		// Unreadable: treat as a claim whose outcome is unknown.
		rec = want
		rec.State = stateClaimed
	}
	return rec, e.Revision, false, nil
}

func (s *Service) update(ctx context.Context, key string, rec record, rev uint64) (uint64, error) {
	b, _ := json.Marshal(rec)
	return s.posted.Update(ctx, key, b, rev)
}

func msgOptions(m slackmsg.Message) []slack.MsgOption {
	opts := []slack.MsgOption{
		slack.MsgOptionText(m.Text, false),
		slack.MsgOptionMetadata(m.Metadata),
		// Untrusted links must not unfurl previews into the channel.
		slack.MsgOptionDisableLinkUnfurl(),
		slack.MsgOptionDisableMediaUnfurl(),
	}
	if len(m.Blocks) > 0 {
		opts = append(opts, slack.MsgOptionBlocks(m.Blocks...))
	}
	return opts
}

func (s *Service) post(ctx context.Context, rec record, m slackmsg.Message) (string, error) {
	opts := func(m slackmsg.Message) []slack.MsgOption {
		o := msgOptions(m)
		if rec.ThreadTS != "" {
			o = append(o, slack.MsgOptionTS(rec.ThreadTS))
		}
		return o
	}
	_, ts, err := s.api.PostMessageContext(ctx, rec.Channel, opts(m)...)
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && blocksRefused(se.Err) && len(m.Blocks) > 0 {
		// Slack disagrees with our limits: the text alone still tells
		// the person.
		s.deps.Log.Warn("Slack refused the blocks; posting the text only", "error", se.Err)
		m.Blocks = nil
		_, ts, err = s.api.PostMessageContext(ctx, rec.Channel, opts(m)...)
	}
	if err == nil && ts == "" {
		err = errors.New("chat.postMessage answered ok without a ts")
	}
	return ts, err
}

func (s *Service) edit(ctx context.Context, rec record, m slackmsg.Message) error {
	_, _, _, err := s.api.UpdateMessageContext(ctx, rec.Channel, rec.TS, msgOptions(m)...)
	var se slack.SlackErrorResponse
	if errors.As(err, &se) && blocksRefused(se.Err) && len(m.Blocks) > 0 {
		m.Blocks = nil
		_, _, _, err = s.api.UpdateMessageContext(ctx, rec.Channel, rec.TS, msgOptions(m)...)
	}
	return err
}

func blocksRefused(code string) bool {
	switch code {
	case "invalid_blocks", "invalid_blocks_format", "msg_blocks_too_long":
		return true
	}
	return false
}

// find looks for the message of eventID among the messages posted since the
// claim, in the claimed thread or, for a thread's first message, in the
// channel. It returns "" when there is none.
func (s *Service) find(ctx context.Context, rec record, eventID string) (string, error) {
	oldest := strconv.FormatFloat(float64(rec.ClaimedAt.Add(-s.searchBack).UnixMicro())/1e6, 'f', 6, 64)
	cursor := ""
	for page := 0; page < 20; page++ {
		var (
			msgs    []slack.Message
			hasMore bool
			err     error
		)
		if rec.ThreadTS != "" {
			msgs, hasMore, cursor, err = s.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
				ChannelID: rec.Channel, Timestamp: rec.ThreadTS, Oldest: oldest, Cursor: cursor,
				Limit: 200, Inclusive: true, IncludeAllMetadata: true,
			})
		} else {
			var resp *slack.GetConversationHistoryResponse
			resp, err = s.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
				ChannelID: rec.Channel, Oldest: oldest, Cursor: cursor,
				Limit: 200, Inclusive: true, IncludeAllMetadata: true,
			})
			if resp != nil {
				msgs, hasMore, cursor = resp.Messages, resp.HasMore, resp.ResponseMetaData.NextCursor
			}
		}
		if err != nil {
			var se slack.SlackErrorResponse
			if errors.As(err, &se) && se.Err != "ratelimited" && se.Err != "internal_error" {
				// No way to look (missing_scope, not_in_channel,
				// thread_not_found…): post, accepting the small risk of
				// a second message over the certainty of none.
				s.deps.Log.Warn("cannot search for a message posted before a crash; posting", "event_id", eventID, "error", se.Err)
				return "", nil
			}
			return "", err
		}
		for _, m := range msgs {
			if id, ok := slackmsg.EventID(m.Metadata); ok && id == eventID {
				return m.Timestamp, nil
			}
		}
		if !hasMore || cursor == "" {
			return "", nil
		}
	}
	return "", nil
}

// slackErr turns a failed Slack call into the handler's answer: a 429 waits
// out its Retry-After on this same message (the partition, and so the thread,
// stays in order); a definite refusal marks the claim rejected and is retried
// (transient codes) or dead-lettered (the rest: a wrong channel, a revoked
// token — `the-loop dlq replay` once fixed); anything else (5xx, timeout, a
// dropped connection) may or may not have posted, so the claim stays and the
// retry searches first.
func (s *Service) slackErr(ctx context.Context, ev *loopv1.Event, ch, call string, err error, key string, rec record, rev uint64) error {
	code := errorCode(err)
	var rl *slack.RateLimitedError
	var se slack.SlackErrorResponse
	switch {
	case errors.As(err, &rl):
		s.m.rateLimited.Inc()
		wait := max(rl.RetryAfter, time.Second)
		s.pace.block(ch, wait)
		s.reject(ctx, key, rec, rev, call)
		s.failed(ctx, ev, ch, code, true)
		return bus.Retry(fmt.Errorf("%s: %w", call, err), wait)
	case errors.As(err, &se):
		s.reject(ctx, key, rec, rev, call)
		switch se.Err {
		case "ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout", "team_added_to_org":
			s.failed(ctx, ev, ch, code, true)
			return fmt.Errorf("%s: %w", call, err)
		}
		s.failed(ctx, ev, ch, code, false)
		return bus.Permanent(fmt.Errorf("%s: %w", call, err))
	}
	s.failed(ctx, ev, ch, code, true)
	return fmt.Errorf("%s: %w", call, err)
}

// reject records that a post was refused, so the retry need not search. Only
// a post's refusal says nothing landed; best effort, as the search is the
// fallback.
func (s *Service) reject(ctx context.Context, key string, rec record, rev uint64, call string) {
	if call != "chat.postMessage" || rec.State != stateClaimed {
		return
	}
	rec.State = stateRejected
	_, _ = s.update(ctx, key, rec, rev)
}

// failed records a failed write: log event (ids and codes only) and metric.
func (s *Service) failed(ctx context.Context, ev *loopv1.Event, ch, code string, retry bool) {
	s.m.failed.WithLabelValues(code).Inc()
	s.deps.Events.Emit(ctx, "channel.post_failed",
		slog.String("channel", "slack"), slog.String("slack_channel", ch),
		slog.String("event_id", ev.GetId()), slog.String("event_type", ev.GetType()),
		slog.String("work_item", ev.GetSubject()), slog.String("error", code), slog.Bool("retry", retry))
}

// errorCode names a Slack failure without its text: Slack's error code, an
// HTTP status, or the kind of transport failure. Tokens never appear in it.
func errorCode(err error) string {
	var rl *slack.RateLimitedError
	var se slack.SlackErrorResponse
	var sc slack.StatusCodeError
	switch {
	case errors.As(err, &rl):
		return "rate-limited"
	case errors.As(err, &se):
		return se.Err
	case errors.As(err, &sc):
		return "http-" + strconv.Itoa(sc.Code)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	}
	return "transport"
}
