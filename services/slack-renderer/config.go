package slackrenderer

import (
	"errors"
	"time"

	"github.com/the-loop/bus/pkg/config"
)

// Config is the slack-renderer's settings, read from the environment by its
// host; the tags are the one place their names, defaults and descriptions
// are declared.
type Config struct {
	// Slack is the bot token and API, shared with ingress-slack. Without a
	// bot token the renderer acknowledges every event undelivered.
	config.Slack
	// PostInterval paces the renderer; Slack allows about one message per
	// second per channel, with short bursts, so a shorter interval only
	// makes sense against a stand-in (the demo, tests).
	PostInterval time.Duration `envconfig:"SLACK_POST_INTERVAL" default:"1s" desc:"least time between two posts to one Slack channel (chat.postMessage allows about one per second per channel)"`
}

// DefaultConfig is the settings of an empty environment.
func DefaultConfig() Config { return config.DefaultsOf[Config]() }

// Validate checks the values the environment reader cannot check by type.
func (c Config) Validate() error {
	return errors.Join(c.Slack.Validate(), config.CheckNonNegative("LOOP_SLACK_POST_INTERVAL", c.PostInterval))
}

// Required fails, naming the setting, when the operator config op turns
// the Slack channel on and the bot token is not set: `serve` refuses to
// start the renderer so, rather than acknowledge every event undelivered.
// With the channel off the renderer needs nothing.
func (c Config) Required(op *config.Config) error {
	if op.Channels.Slack.Enabled && !c.BotToken.IsSet() {
		return errors.New("LOOP_SLACK_BOT_TOKEN is not set: channels.slack.enabled is true in the operator config and messages are posted with it")
	}
	return nil
}
