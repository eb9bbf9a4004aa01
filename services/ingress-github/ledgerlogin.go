package ingressgithub

import (
	"context"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/githubclient"
)

// ledgerLogin is the ledger's own GitHub login: LOOP_GITHUB_LOGIN, else
// GET /user with the token (GET /app with a GitHub App), asked at most once a
// minute until it answers and then remembered. onLearn, when set, hears of a
// login learned from GitHub (LOOP_GITHUB_LOGIN is known from the start).
type ledgerLogin struct {
	cfg     config.GitHub
	now     func() time.Time
	gh      *githubclient.Client
	onLearn func(login string)

	mu    sync.Mutex
	login string
	tried time.Time
}

const loginRetry = time.Minute

func newLedgerLogin(cfg config.GitHub, gh *githubclient.Client, now func() time.Time) *ledgerLogin {
	return &ledgerLogin{cfg: cfg, now: now, login: cfg.Login, gh: gh}
}

// get returns the login, or "" when it is not known (yet).
func (l *ledgerLogin) get(ctx context.Context) string {
	login, learned := l.lookup(ctx)
	if learned && l.onLearn != nil {
		l.onLearn(login)
	}
	return login
}

// lookup is get without the notice; learned says this call fetched it.
func (l *ledgerLogin) lookup(ctx context.Context) (login string, learned bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.login != "" || (!l.cfg.Token.IsSet() && l.gh.App == nil) {
		return l.login, false
	}
	if !l.tried.IsZero() && l.now().Sub(l.tried) < loginRetry {
		return "", false
	}
	l.tried = l.now()
	login, err := l.fetch(ctx)
	if err != nil {
		return "", false
	}
	l.login = login
	return login, true
}

func (l *ledgerLogin) fetch(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	return l.gh.Login(ctx)
}
