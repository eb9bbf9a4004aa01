package ledgerwriter

import (
	"errors"

	"github.com/the-loop/bus/pkg/config"
)

// Config is the ledger-writer's settings, read from the environment by its
// host; the tags are the one place their names, defaults and descriptions
// are declared.
type Config struct {
	// GitHub is the ledger's credential, API and envelope key, shared with
	// ingress-github.
	config.GitHub
	// WritesPerMinute and WritesPerHour pace content writes per credential
	// (per process). GitHub documents 80 content-creating requests per
	// minute and 500 per hour per credential (the REST API's secondary rate
	// limits).
	WritesPerMinute int `envconfig:"GITHUB_WRITES_PER_MINUTE" default:"80" desc:"ledger-writer: content writes per minute per process, under GitHub's secondary limit (divide by the replicas sharing one token)"`
	WritesPerHour   int `envconfig:"GITHUB_WRITES_PER_HOUR" default:"500" desc:"ledger-writer: content writes per hour per process (divide by the replicas sharing one token)"`
}

// DefaultConfig is the settings of an empty environment.
func DefaultConfig() Config { return config.DefaultsOf[Config]() }

// Validate checks the values the environment reader cannot check by type.
func (c Config) Validate() error {
	var errs []error
	errs = append(errs, c.GitHub.Validate())
	if c.WritesPerMinute < 1 || c.WritesPerHour < 1 {
		errs = append(errs, errors.New("LOOP_GITHUB_WRITES_PER_MINUTE and LOOP_GITHUB_WRITES_PER_HOUR must be at least 1"))
	}
	return errors.Join(errs...)
}

// Required fails, naming each setting, unless what the writer cannot work
// without is set: the GitHub credential and the envelope key. `serve`
// refuses to start without them, so a container fails visibly; `up` runs
// on a laptop that may have no token yet, and the writer holds its records
// instead (New).
func (c Config) Required() error {
	return errors.Join(c.RequireToken(), c.RequireEnvelopeKey())
}
