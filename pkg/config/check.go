package config

import (
	"errors"
	"fmt"

	"github.com/the-loop/bus/pkg/identity"
)

// Check is a rule an operator config must pass beyond its own validation,
// one that only a running service can know (see Watcher.AddCheck).
type Check func(*Config) error

// ErrLedgerLogin: routing.authorizedUsers names the ledger's own login.
var ErrLedgerLogin = errors.New("routing.authorizedUsers lists the ledger's own GitHub login")

// RefuseLedgerLogin is the Check that refuses a config whose
// routing.authorizedUsers names login, the ledger's own GitHub login
// (LOOP_GITHUB_LOGIN, or the token's GET /user), in any case. Agents post with
// that login's token, so listing it would make every comment an agent posts
// an authorized person's (docs/decisions/027-ledger-login-is-not-a-person.md).
// An empty login checks nothing.
func RefuseLedgerLogin(login string) Check {
	return func(c *Config) error {
		if login == "" || c == nil {
			return nil
		}
		p, ok := c.Routing.AuthorizedUsers.ByChannel(identity.ChannelGitHub, login)
		if !ok {
			return nil
		}
		return fmt.Errorf("%w %q (entry %s; LOOP_GITHUB_LOGIN or the login of LOOP_GITHUB_TOKEN): agents post with its token, "+
			"so every comment an agent posts would pass as that person's; list people only", ErrLedgerLogin, login, p)
	}
}

func runChecks(checks []Check, c *Config) error {
	for _, check := range checks {
		if err := check(c); err != nil {
			return err
		}
	}
	return nil
}
