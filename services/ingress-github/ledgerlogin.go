package ingressgithub

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/githubapp"
)

// ledgerLogin is the ledger's own GitHub login: LOOP_GITHUB_LOGIN, else
// GET /user with the token, asked at most once a minute until it answers and
// then remembered. onLearn, when set, hears of a login learned from GET /user
// (LOOP_GITHUB_LOGIN is known from the start).
type ledgerLogin struct {
	cfg     config.GitHub
	now     func() time.Time
	client  *http.Client
	onLearn func(login string)
	// app, when set, knows the login (its bot's) from GET /app: its
	// installation tokens cannot call GET /user.
	app *githubapp.App

	mu    sync.Mutex
	login string
	tried time.Time
}

const loginRetry = time.Minute

func newLedgerLogin(cfg config.GitHub, now func() time.Time) *ledgerLogin {
	return &ledgerLogin{cfg: cfg, now: now, login: cfg.Login, client: &http.Client{Timeout: 5 * time.Second}}
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
	if l.login != "" || (!l.cfg.Token.IsSet() && l.app == nil) {
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
	if l.app != nil {
		return l.app.Login(ctx)
	}
	u := strings.TrimSuffix(l.cfg.APIURL, "/") + "/user"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+l.cfg.Token.Reveal())
	req.Header.Set("Accept", "application/vnd.github+json")
	resp, err := l.client.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET /user: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /user: status %d", resp.StatusCode)
	}
	var me struct {
		Login string `json:"login"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&me); err != nil || me.Login == "" {
		return "", fmt.Errorf("GET /user: no login in the answer")
	}
	return me.Login, nil
}
