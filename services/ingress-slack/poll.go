package ingressslack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/slack-go/slack"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/slackmsg"
	"github.com/the-loop/bus/pkg/threads"
)

// Poll mode (docs/requirements.md K18).
//
// One reader per shard: a bound thread (channel/thread ts) and the kickoff
// channel each fall in one of LOOP_PARTITIONS shards, and a replica reads only
// the shards whose lease it holds. A lease is a key in KV "cursors" claimed
// with Create (or, once it has expired, taken over with Update at the revision
// read), renewed every cycle and released on stop; so two replicas never read
// the same thread in the same period, and a replica that dies hands its shards
// over after LeaseTTL. Should two ever overlap (a replica stalled past its
// lease), nothing is published twice: cursors only move forward by
// compare-and-set, and a message's event id is its channel+ts.
//
// Cursors are per thread (the last ts processed; none means the thread root,
// so replies posted while no reader ran are still read) and one for the
// kickoff channel (none means "from now": a first poll never turns the
// channel's history into work items). A cursor moves past a message only once
// the message is settled, so a bus failure leaves it to the next cycle
// (at-least-once, deduplicated by id) rather than losing it.

// Keys in KV "cursors".
func leaseKey(shard int) string { return fmt.Sprintf("ingress-slack/lease/%03d", shard) }
func threadCursorKey(channel, ts string) string {
	return "ingress-slack/thread/" + channel + "/" + ts
}
func kickoffCursorKey(channel string) string { return "ingress-slack/kickoff/" + channel }

// shardOf places a unit of poll work in one of n shards.
func shardOf(unit string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(unit))
	return int(h.Sum32() % uint32(n))
}

type lease struct {
	Holder string    `json:"holder"`
	Until  time.Time `json:"until"`
}

// errRateLimited ends a cycle early: Slack asked us to wait.
var errRateLimited = errors.New("rate limited by Slack")

type poller struct {
	s       *Service
	kv      *stores
	api     *slack.Client
	shards  int
	blocked map[string]time.Time // method → not before
	held    map[int]bool
}

func (s *Service) runPoll(ctx context.Context) error {
	kv, err := s.stores()
	if err != nil {
		return err
	}
	p := &poller{s: s, kv: kv, api: s.api(), shards: max(1, s.deps.Partitions), blocked: map[string]time.Time{}, held: map[int]bool{}}
	s.learnOwnID(ctx, p.api)
	defer p.release()
	for {
		if err := p.cycle(ctx); err != nil && ctx.Err() == nil {
			s.deps.Log.Warn("ingress-slack: poll cycle ended early", "err", err)
		}
		if ctx.Err() == nil {
			s.setStatus("")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(s.pollInterval()):
		}
	}
}

func (s *Service) pollInterval() time.Duration {
	if s.opts.PollInterval > 0 {
		return s.opts.PollInterval
	}
	if d := s.deps.Config().Channels.Slack.Read.Interval(); d > 0 {
		return d
	}
	return 30 * time.Second
}

func (s *Service) leaseTTL() time.Duration {
	if s.opts.LeaseTTL > 0 {
		return s.opts.LeaseTTL
	}
	return max(30*time.Second, 3*s.pollInterval())
}

// cycle reads every bound thread and the kickoff channel of the shards this
// replica holds.
func (p *poller) cycle(ctx context.Context) error {
	sc := p.s.deps.Config().Channels.Slack
	if sc.Channel == "" {
		return nil
	}
	p.claim(ctx)
	list, err := p.boundThreads(ctx, sc.Channel)
	if err != nil {
		return err
	}
	for _, ts := range list {
		if !p.held[shardOf(sc.Channel+"/"+ts, p.shards)] {
			continue
		}
		if err := p.thread(ctx, sc.Channel, ts); err != nil {
			return err
		}
	}
	// Top-level messages only matter to a channel that may start work
	// items; without the grant every one of them would drop, and reading
	// them would spend rate limit on nothing (decision 015).
	if sc.CanPublish(catalog.WorkItemCreate) && p.held[shardOf("kickoff/"+sc.Channel, p.shards)] {
		return p.kickoff(ctx, sc.Channel)
	}
	return nil
}

// claim takes or renews the lease of every shard it can.
func (p *poller) claim(ctx context.Context) {
	now := p.s.opts.Now()
	mine, err := json.Marshal(lease{Holder: p.s.opts.ReplicaID, Until: now.Add(p.s.leaseTTL())})
	if err != nil {
		return
	}
	for shard := range p.shards {
		key := leaseKey(shard)
		e, err := p.kv.cursors.Get(ctx, key)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			_, err = p.kv.cursors.Create(ctx, key, mine)
		case err == nil:
			var l lease
			if json.Unmarshal(e.Value, &l) == nil && l.Holder != p.s.opts.ReplicaID && now.Before(l.Until) {
				p.held[shard] = false
				continue
			}
			_, err = p.kv.cursors.Update(ctx, key, mine, e.Revision)
		}
		p.held[shard] = err == nil
	}
}

// release gives back the leases held, so another replica takes over at once
// after a mode change or shutdown.
func (p *poller) release() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gone, _ := json.Marshal(lease{})
	for shard, held := range p.held {
		if !held {
			continue
		}
		e, err := p.kv.cursors.Get(ctx, leaseKey(shard))
		if err != nil {
			continue
		}
		var l lease
		if json.Unmarshal(e.Value, &l) == nil && l.Holder == p.s.opts.ReplicaID {
			_, _ = p.kv.cursors.Update(ctx, leaseKey(shard), gone, e.Revision)
		}
	}
}

// boundThreads lists the channel's bound threads, oldest first.
func (p *poller) boundThreads(ctx context.Context, channel string) ([]string, error) {
	kv, err := p.s.deps.Conn.KV(ctx, bus.BucketThreads)
	if err != nil {
		return nil, err
	}
	return threads.New(kv).List(ctx, channel)
}

// allowed reports whether method may be called now (no Retry-After running).
func (p *poller) allowed(method string) bool {
	return !p.s.opts.Now().Before(p.blocked[method])
}

// failed classifies a Web API error: a 429 blocks the method until its
// Retry-After and ends the cycle; anything else skips this unit only.
func (p *poller) failed(method string, err error) error {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		p.s.m.slackCalls.WithLabelValues(method, "ratelimited").Inc()
		p.s.m.ratelimit.WithLabelValues(method).Inc()
		p.blocked[method] = p.s.opts.Now().Add(max(rl.RetryAfter, time.Second))
		p.s.deps.Log.Warn("ingress-slack: Slack rate limit; waiting", "method", method, "retry_after", rl.RetryAfter)
		return errRateLimited
	}
	p.s.m.slackCalls.WithLabelValues(method, "error").Inc()
	p.s.deps.Log.Warn("ingress-slack: Slack call failed; skipped this cycle", "method", method, "err", err)
	return nil
}

// thread reads the replies of one bound thread past its cursor.
func (p *poller) thread(ctx context.Context, channel, root string) error {
	const method = "conversations.replies"
	if !p.allowed(method) {
		return errRateLimited
	}
	key := threadCursorKey(channel, root)
	cur, err := p.cursor(ctx, key)
	if err != nil {
		return err
	}
	if cur == "" {
		cur = root
	}
	params := &slack.GetConversationRepliesParameters{ChannelID: channel, Timestamp: root, Oldest: cur, Limit: 200}
	var msgs []slack.Message
	for page := 0; page < 10; page++ {
		batch, more, next, err := p.api.GetConversationRepliesContext(ctx, params)
		if err != nil {
			return p.failed(method, err)
		}
		p.s.m.slackCalls.WithLabelValues(method, "ok").Inc()
		msgs = append(msgs, batch...)
		if !more || next == "" {
			break
		}
		params.Cursor = next
	}
	return p.settle(ctx, key, cur, msgs, func(m slack.Message) *inbound {
		if m.Timestamp == root {
			return nil // the parent comes first in every answer
		}
		thread := m.ThreadTimestamp
		if thread == "" {
			thread = root
		}
		return fromMessage(viaPoll, channel, m.Timestamp, thread, m.User, m.BotID, m.SubType, m.Text)
	})
}

// kickoff reads the configured channel's new top-level messages.
func (p *poller) kickoff(ctx context.Context, channel string) error {
	const method = "conversations.history"
	if !p.allowed(method) {
		return errRateLimited
	}
	key := kickoffCursorKey(channel)
	cur, err := p.cursor(ctx, key)
	if err != nil {
		return err
	}
	if cur == "" {
		// First sight of the channel: start after its newest message.
		resp, err := p.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: channel, Limit: 1})
		if err != nil {
			return p.failed(method, err)
		}
		p.s.m.slackCalls.WithLabelValues(method, "ok").Inc()
		start := tsOf(p.s.opts.Now())
		if len(resp.Messages) > 0 && tsAfter(resp.Messages[0].Timestamp, "0") {
			start = resp.Messages[0].Timestamp
		}
		return p.advance(ctx, key, start)
	}
	params := &slack.GetConversationHistoryParameters{ChannelID: channel, Oldest: cur, Limit: 100}
	var msgs []slack.Message
	for page := 0; page < 10; page++ {
		resp, err := p.api.GetConversationHistoryContext(ctx, params)
		if err != nil {
			return p.failed(method, err)
		}
		p.s.m.slackCalls.WithLabelValues(method, "ok").Inc()
		msgs = append(msgs, resp.Messages...)
		if !resp.HasMore || resp.ResponseMetaData.NextCursor == "" {
			break
		}
		params.Cursor = resp.ResponseMetaData.NextCursor
	}
	return p.settle(ctx, key, cur, msgs, func(m slack.Message) *inbound {
		if m.ThreadTimestamp != "" && m.ThreadTimestamp != m.Timestamp {
			// A reply shown in the channel (thread_broadcast): read, if at
			// all, with its thread.
			return nil
		}
		return fromMessage(viaPoll, channel, m.Timestamp, "", m.User, m.BotID, m.SubType, m.Text)
	})
}

// settle runs the messages newer than cur through the pipeline, oldest first,
// moving the cursor past each one settled.
func (p *poller) settle(ctx context.Context, key, cur string, msgs []slack.Message, build func(slack.Message) *inbound) error {
	slices.SortStableFunc(msgs, func(a, b slack.Message) int { return slackmsg.CompareTS(a.Timestamp, b.Timestamp) })
	for _, m := range msgs {
		if !tsAfter(m.Timestamp, cur) {
			continue
		}
		if in := build(m); in != nil {
			if _, err := p.s.process(ctx, in); err != nil {
				p.s.m.retried.WithLabelValues(viaPoll).Inc()
				return err
			}
		}
		if err := p.advance(ctx, key, m.Timestamp); err != nil {
			return err
		}
		cur = m.Timestamp
	}
	return nil
}

func (p *poller) cursor(ctx context.Context, key string) (string, error) {
	e, err := p.kv.cursors.Get(ctx, key)
	if errors.Is(err, bus.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("cursor %s: %w", key, err)
	}
	return string(e.Value), nil
}

// markRead moves the poll cursor of a message's thread (or of the kickoff
// channel) past a message a push transport settled, so that switching the
// read mode to poll does not read it again. Best effort: a failure only
// costs a re-read, which the event id deduplicates.
func (s *Service) markRead(ctx context.Context, in *inbound) {
	if in.press != nil || in.ignore != "" || in.channel == "" || in.ts == "" {
		return
	}
	key := threadCursorKey(in.channel, in.threadTS)
	if in.topLevel() {
		key = kickoffCursorKey(in.channel)
	}
	kv, err := s.stores()
	if err != nil {
		return
	}
	if err := (&poller{s: s, kv: kv}).advance(ctx, key, in.ts); err != nil {
		s.deps.Log.Debug("ingress-slack: cursor not advanced", "err", err)
	}
}

// advance moves a cursor forward to ts by compare-and-set; it never moves
// one back, whoever else advanced it meanwhile.
func (p *poller) advance(ctx context.Context, key, ts string) error {
	for range 10 {
		e, err := p.kv.cursors.Get(ctx, key)
		switch {
		case errors.Is(err, bus.ErrNotFound):
			_, err = p.kv.cursors.Create(ctx, key, []byte(ts))
		case err != nil:
			return fmt.Errorf("cursor %s: %w", key, err)
		case !tsAfter(ts, string(e.Value)):
			return nil
		default:
			_, err = p.kv.cursors.Update(ctx, key, []byte(ts), e.Revision)
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, bus.ErrKeyExists) && !errors.Is(err, bus.ErrWrongRevision) {
			return fmt.Errorf("cursor %s: %w", key, err)
		}
	}
	return fmt.Errorf("cursor %s: too much contention", key)
}

func tsAfter(a, b string) bool { return slackmsg.CompareTS(a, b) > 0 }

func tsOf(t time.Time) string {
	us := t.UnixMicro()
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}
