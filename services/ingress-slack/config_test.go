package ingressslack

import (
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
)

// Require asks for the tokens the read mode needs, naming them.
func TestRequire(t *testing.T) {
	t.Parallel()
	bot := config.Slack{BotToken: config.NewSecret("b")}
	tests := []struct {
		c    Config
		mode config.ReadMode
		want string
	}{
		{Config{}, config.ReadPoll, "LOOP_SLACK_BOT_TOKEN"},
		{Config{Slack: bot}, config.ReadSocket, "LOOP_SLACK_APP_TOKEN"},
		{Config{Slack: bot}, config.ReadEvents, "LOOP_SLACK_SIGNING_SECRET"},
		{Config{Slack: bot}, config.ReadPoll, ""},
		{Config{Slack: bot, AppToken: config.NewSecret("a"), SigningSecret: config.NewSecret("s")}, config.ReadEvents, ""},
	}
	for _, tt := range tests {
		err := tt.c.Require(tt.mode)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Require(%s) = %v, want %q", tt.mode, err, tt.want)
		}
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if c.EventsAddr != ":8788" || c.APIURL != "https://slack.com/api/" || c.BotToken.IsSet() {
		t.Errorf("defaults: %+v", c)
	}
	var bad Config
	if err := config.Process(config.Env{"LOOP_SLACK_EVENTS_ADDR": "nowhere"}, &bad); err == nil || !strings.Contains(err.Error(), "LOOP_SLACK_EVENTS_ADDR") {
		t.Errorf("a bad address: %v", err)
	}
}

// TestRequired: the tokens are required only when the operator config turns
// the Slack channel on, and then those of its read mode.
func TestRequired(t *testing.T) {
	op := config.Default()
	if err := (Config{}).Required(op); err != nil {
		t.Errorf("Slack off: %v", err)
	}
	op.Channels.Slack.Enabled, op.Channels.Slack.Read.Mode = true, config.ReadEvents
	err := (Config{}).Required(op)
	if err == nil || !strings.Contains(err.Error(), "LOOP_SLACK_BOT_TOKEN") || !strings.Contains(err.Error(), "LOOP_SLACK_SIGNING_SECRET") {
		t.Errorf("Slack on, events: %v", err)
	}
}
