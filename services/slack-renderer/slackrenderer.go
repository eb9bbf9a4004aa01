// Package slackrenderer is the slack-renderer service: it consumes the
// recorded events (loop.ev.>) and renders each one the Slack channel
// subscribes to natively in Slack, once (docs/requirements.md R1.4, R4, R6).
//
// Per event it decides (route.go) whether the channel gets it — subscribed,
// and not the channel it came from, with two answers that go back to the
// originating thread whatever the subscriptions: the kickoff's new-issue link
// and the ledger's record-failed notice — renders it with pkg/slackmsg, and
// posts it into the work item's thread (one thread per work item, bound in KV
// `threads`). Exactly one Slack message exists per (channel, event id): the
// KV `posted` claim is written before posting and the ts after, so a
// redelivery edits the message with chat.update instead of posting again
// (deliver.go explains the crash windows). A gate's message carries answer
// buttons only while the work item waits at the gate visit they were drawn
// for: the dispatcher's gate.moved, or the next gate, edits them away
// (gates.go). Rate limits are honoured by
// pacing each channel and by turning a 429's Retry-After into a delayed
// redelivery of the same message, which keeps the partition — and so the
// thread — in order.
//
// With Slack disabled, no channel id or no bot token, the service keeps
// consuming and acknowledges what it cannot deliver: a channel that is off
// never blocks the bus or the process.
package slackrenderer

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/threads"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Name is the service name used for consumers, logs and `serve`.
const Name = bus.ServiceSlackRenderer

// Service is the slack-renderer.
type Service struct {
	deps     service.Deps
	api      *slack.Client // nil without a bot token
	pace     *pacer
	m        *metrics
	interval time.Duration
	// searchBack is how far before a claim the crash-recovery search looks
	// for the message (Slack's ts and our clock may disagree a little).
	searchBack time.Duration

	posted  *bus.KV
	threads *threads.Store

	warnOnce sync.Once
	// afterRecord, set by tests only, runs after the ts is recorded in KV
	// and before the delivery is acknowledged: the crash window a restart
	// must survive.
	afterRecord func(ev *loopv1.Event)
}

// Option configures New.
type Option func(*Service)

// New returns the service. It needs no Slack token: without one it
// acknowledges every event undelivered.
func New(deps service.Deps, cfg Config, opts ...Option) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(deps.Registry)
	if err != nil {
		return nil, fmt.Errorf("%s: metrics: %w", Name, err)
	}
	s := &Service{deps: deps, m: m, interval: cfg.PostInterval, searchBack: 10 * time.Minute}
	for _, o := range opts {
		o(s)
	}
	s.pace = newPacer(s.interval)
	if cfg.BotToken.IsSet() {
		apiURL := cfg.APIURL
		if !strings.HasSuffix(apiURL, "/") {
			apiURL += "/"
		}
		// slack-go's own retries stay off: a retry is a redelivery of the
		// bus message, so the partition's order and the claim hold.
		s.api = slack.New(cfg.BotToken.Reveal(),
			slack.OptionAPIURL(apiURL),
			slack.OptionHTTPClient(&http.Client{Timeout: 30 * time.Second}))
	}
	return s, nil
}

// Run consumes the event stream until ctx is done, then drains.
func (s *Service) Run(ctx context.Context) error {
	posted, err := s.deps.Conn.KV(ctx, bus.BucketPosted)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	tkv, err := s.deps.Conn.KV(ctx, bus.BucketThreads)
	if err != nil {
		return fmt.Errorf("%s: %w", Name, err)
	}
	s.posted, s.threads = posted, threads.New(tkv)
	return service.Consume(ctx, s.deps, Name, bus.StreamEvents, s.handle)
}
