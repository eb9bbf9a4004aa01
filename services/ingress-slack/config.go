package ingressslack

import (
	"errors"

	"github.com/the-loop/bus/pkg/config"
)

// Config is ingress-slack's settings, read from the environment by its host;
// the tags are the one place their names, defaults and descriptions are
// declared. Which tokens are needed depends on the operator YAML's read mode
// (Require).
type Config struct {
	// Slack is the bot token and API, shared with slack-renderer.
	config.Slack
	AppToken      config.Secret `envconfig:"SLACK_APP_TOKEN" desc:"Slack app-level token (xapp-…); needed by read.mode socket"`
	SigningSecret config.Secret `envconfig:"SLACK_SIGNING_SECRET" desc:"Slack signing secret; needed by read.mode events"`
	EventsAddr    string        `envconfig:"SLACK_EVENTS_ADDR" default:":8788" desc:"listen address of POST /slack/events and /slack/interactions (read.mode events)"`
}

// DefaultConfig is the settings of an empty environment.
func DefaultConfig() Config { return config.DefaultsOf[Config]() }

// Validate checks the values the environment reader cannot check by type.
func (c Config) Validate() error {
	return errors.Join(c.Slack.Validate(), config.CheckAddr("LOOP_SLACK_EVENTS_ADDR", c.EventsAddr))
}

// Require fails unless the tokens the given read mode needs are set: the bot
// token always, the app token for Socket Mode, the signing secret for the
// Events API.
func (c Config) Require(mode config.ReadMode) error {
	var errs []error
	if !c.BotToken.IsSet() {
		errs = append(errs, errors.New("LOOP_SLACK_BOT_TOKEN is not set: the Slack channel is enabled"))
	}
	if mode == config.ReadSocket && !c.AppToken.IsSet() {
		errs = append(errs, errors.New("LOOP_SLACK_APP_TOKEN is not set: channels.slack.read.mode is socket"))
	}
	if mode == config.ReadEvents && !c.SigningSecret.IsSet() {
		errs = append(errs, errors.New("LOOP_SLACK_SIGNING_SECRET is not set: channels.slack.read.mode is events"))
	}
	return errors.Join(errs...)
}

// Required fails, naming each setting, when the operator config op turns
// the Slack channel on and the tokens its read mode needs are not set
// (Require): `serve` refuses to start ingress-slack so. With the channel
// off, or a read mode that reads nothing, it needs nothing.
func (c Config) Required(op *config.Config) error {
	sc := op.Channels.Slack
	switch {
	case !sc.Enabled:
		return nil
	case sc.Read.Mode != config.ReadPoll && sc.Read.Mode != config.ReadSocket && sc.Read.Mode != config.ReadEvents:
		return nil
	}
	return c.Require(sc.Read.Mode)
}
