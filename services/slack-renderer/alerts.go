package slackrenderer

import (
	"context"
	"log/slog"
	"strings"

	"github.com/slack-go/slack"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/slackmsg"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// skipNoRecipients: an alert whose kind the operator config sends to nobody.
const skipNoRecipients = "no-recipients"

// alert posts ev, a loop.alert, to every conversation the operator config
// names for its kind (collaborators and notifications), mentioning the
// people of its roles there, whatever the channel subscribes to
// (docs/decisions/115-alerts-reactions-and-phase-labels.md). Each
// conversation gets one message per alert, as any delivery does (its own
// `posted` key): a redelivery after the first conversation was served edits
// that message and goes on to the next.
func (s *Service) alert(ctx context.Context, cfg config.SlackChannel, ev *loopv1.Event, d *bus.Delivery) error {
	kind := ev.GetNotification().GetDetail()["alert"]
	targets := s.deps.Config().AlertTargets(kind)
	attrs := service.EventAttrs(ev, d)
	switch {
	case !cfg.Enabled:
		s.m.skipped.WithLabelValues(skipDisabled).Inc()
		return nil
	case len(targets) == 0:
		s.m.skipped.WithLabelValues(skipNoRecipients).Inc()
		s.deps.Log.LogAttrs(ctx, slog.LevelDebug, "alert for nobody", append(attrs, slog.String("alert", kind))...)
		return nil
	case s.api == nil:
		s.warnOnce.Do(func() {
			s.deps.Log.Warn("channels.slack is enabled but LOOP_SLACK_BOT_TOKEN is not set: events are acknowledged undelivered")
		})
		s.failed(ctx, ev, cfg.Channel, "no-bot-token", false)
		return nil
	}
	for _, t := range targets {
		to := cfg
		to.Channel = t.Conversation
		if err := s.deliver(ctx, to, ev, plan{answer: true, mention: t.Mention}, d); err != nil {
			return err
		}
	}
	return nil
}

// withMentions puts the members to mention in front of m's text and blocks.
// The ids come from the operator config, which accepts only Slack ids.
func withMentions(m slackmsg.Message, members []string) slackmsg.Message {
	tags := make([]string, len(members))
	for i, id := range members {
		tags[i] = "<@" + id + ">"
	}
	line := strings.Join(tags, " ")
	m.Text = line + " " + m.Text
	block := slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, line, false, false), nil, nil)
	block.BlockID = "the-loop.mention"
	m.Blocks = append([]slack.Block{block}, m.Blocks...)
	return m
}
