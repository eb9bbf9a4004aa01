package slackrenderer

import (
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
)

// TestRequired: the bot token is required only when the operator config
// turns the Slack channel on.
func TestRequired(t *testing.T) {
	op := config.Default()
	if err := DefaultConfig().Required(op); err != nil {
		t.Errorf("Slack off: %v", err)
	}
	op.Channels.Slack.Enabled = true
	if err := DefaultConfig().Required(op); err == nil || !strings.Contains(err.Error(), "LOOP_SLACK_BOT_TOKEN is not set") {
		t.Errorf("Slack on: %v", err)
	}
	cfg := DefaultConfig()
	cfg.BotToken = config.NewSecret("xoxb")
	if err := cfg.Required(op); err != nil {
		t.Errorf("Slack on, with a token: %v", err)
	}
}
