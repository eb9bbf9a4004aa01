package ingressgithub

import (
	"errors"
	"fmt"
	"time"

	"github.com/the-loop/bus/pkg/config"
)

// Config is ingress-github's settings, read from the environment by its
// host; the tags are the one place their names, defaults and descriptions
// are declared.
type Config struct {
	// GitHub is the ledger's credential, API and envelope key, shared with
	// the ledger-writer.
	config.GitHub
	// AutoExecute is the label poll mode selects work items by, shared
	// with the dispatcher.
	config.AutoExecute
	WebhookSecret config.Secret `envconfig:"GITHUB_WEBHOOK_SECRET" desc:"webhook HMAC secret; ingress-github needs it to accept webhooks"`
	WebhookAddr   string        `envconfig:"GITHUB_WEBHOOK_ADDR" default:":8787" desc:"listen address of POST /gh-webhook"`
	// WebhookConcurrency bounds what a flood of requests, signed or not,
	// can hold of the service at once
	// (docs/decisions/037-webhook-intake-bounds.md): far above what
	// GitHub sends one endpoint at once.
	WebhookConcurrency int `envconfig:"GITHUB_WEBHOOK_CONCURRENCY" default:"64" desc:"webhook requests ingress-github handles at once; one more is answered 503 with Retry-After"`
	// Mode is how the service learns of GitHub activity (see Mode).
	Mode string `envconfig:"GITHUB_MODE" default:"webhook" desc:"ingress-github intake: webhook, poll (for deployments GitHub cannot reach) or both"`
	// InsecureNoSignature accepts webhooks without a signature check when
	// no secret is set, and says so on every request.
	InsecureNoSignature bool          `envconfig:"GITHUB_INSECURE_NO_SIGNATURE" default:"false" desc:"accept webhooks without a signature when no secret is set (never in production; every response says so)"`
	PollRepos           string        `envconfig:"GITHUB_POLL_REPOS" desc:"poll mode: comma-separated owner/repo list to poll"`
	PollInterval        time.Duration `envconfig:"GITHUB_POLL_INTERVAL" default:"60s" desc:"poll mode: time between polling cycles"`
}

// DefaultConfig is the settings of an empty environment.
func DefaultConfig() Config { return config.DefaultsOf[Config]() }

// Validate checks the values the environment reader cannot check by type.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.GitHub.Validate(), config.CheckAddr("LOOP_GITHUB_WEBHOOK_ADDR", c.WebhookAddr))
	if c.WebhookConcurrency < 1 {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_WEBHOOK_CONCURRENCY is %d: it must be at least 1", c.WebhookConcurrency))
	}
	switch Mode(c.Mode) {
	case ModeWebhook, ModePoll, ModeBoth:
	default:
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_MODE is %q: it must be webhook, poll or both", c.Mode))
	}
	if c.PollInterval < 5*time.Second {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_POLL_INTERVAL is %s: it must be at least 5s", c.PollInterval))
	}
	if Mode(c.Mode) != ModeWebhook && len(c.PollRepoList()) == 0 {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_MODE is %s but LOOP_GITHUB_POLL_REPOS names no repository", c.Mode))
	}
	return errors.Join(errs...)
}

// PollRepoList is LOOP_GITHUB_POLL_REPOS as a list.
func (c Config) PollRepoList() []string { return config.List(c.PollRepos) }

func (c Config) mode() Mode { return Mode(c.Mode) }

// Required fails, naming each setting, unless what the configured intake
// cannot work without is set: the envelope key; webhooks, their secret
// (or the explicit LOOP_GITHUB_INSECURE_NO_SIGNATURE); polling, the GitHub
// credential. `serve` refuses to start without them.
func (c Config) Required() error {
	errs := []error{c.RequireEnvelopeKey()}
	if c.mode().webhook() && !c.WebhookSecret.IsSet() && !c.InsecureNoSignature {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_WEBHOOK_SECRET is not set: LOOP_GITHUB_MODE is %s and webhooks are verified with it (or LOOP_GITHUB_MODE=poll)", c.Mode))
	}
	if c.mode().poll() && !c.Token.IsSet() && !c.App.Set() {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_TOKEN is not set: LOOP_GITHUB_MODE is %s and polling reads GitHub with it (or with a GitHub App: LOOP_GITHUB_APP_ID)", c.Mode))
	}
	return errors.Join(errs...)
}
