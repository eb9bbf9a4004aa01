// Package githubapp authenticates the loop to GitHub as a GitHub App, the
// alternative to a personal token: the app signs a short JWT with its
// private key, and mints an installation token for the installation on a
// repository (LOOP_GITHUB_APP_INSTALLATION_ID, or found per repository).
// Installation tokens are refreshed before they expire; a request that
// GitHub refuses because its token expired anyway is sent again once with a
// fresh token. The ledger's login is the app's bot login, "<slug>[bot]",
// read from GET /app: installation tokens cannot call GET /user
// (docs/decisions/078-github-app-authentication.md).
//
// JWTs and installation tokens are made by ghinstallation; this package
// routes each request to its repository's installation.
package githubapp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/google/go-github/v62/github"
)

// Options configure an App.
type Options struct {
	AppID int64
	// InstallationID, if not 0, is used for every repository; 0 finds each
	// repository's installation (GET /repos/{owner}/{repo}/installation).
	InstallationID int64
	// PrivateKeyFile is the app's PEM private key.
	PrivateKeyFile string
	// APIURL is GitHub's REST base (https://api.github.com/ by default).
	APIURL string
	// Base carries the requests (http.DefaultTransport if nil).
	Base http.RoundTripper
	// Timeout bounds the app's own calls (GET /app, the installation look-up).
	Timeout time.Duration
}

// App is an http.RoundTripper that authenticates each request as the
// app's installation on the repository it names.
type App struct {
	apps    *ghinstallation.AppsTransport
	jwt     *github.Client // the app's own calls, with its JWT
	api     string         // no trailing slash
	fixed   int64
	base    http.RoundTripper
	mu      sync.Mutex
	byRepo  map[string]int64
	inst    map[int64]*ghinstallation.Transport
	login   string
	lastUse int64 // the installation of the last request, for requests naming no repository
}

// New reads the private key and prepares the app's transports. The error
// names the setting, never the key.
func New(o Options) (*App, error) {
	if o.AppID == 0 {
		return nil, errors.New("githubapp: no app id (LOOP_GITHUB_APP_ID)")
	}
	key, err := os.ReadFile(o.PrivateKeyFile)
	if err != nil {
		return nil, fmt.Errorf("githubapp: read LOOP_GITHUB_APP_PRIVATE_KEY_FILE: %w", err)
	}
	base := o.Base
	if base == nil {
		base = http.DefaultTransport
	}
	apps, err := ghinstallation.NewAppsTransport(base, o.AppID, key)
	if err != nil {
		return nil, errors.New("githubapp: LOOP_GITHUB_APP_PRIVATE_KEY_FILE is not an RSA private key in PEM")
	}
	api := strings.TrimSuffix(o.APIURL, "/")
	if api == "" {
		api = "https://api.github.com"
	}
	apps.BaseURL = api
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	jwt := github.NewClient(&http.Client{Transport: apps, Timeout: timeout})
	if jwt.BaseURL, err = url.Parse(api + "/"); err != nil {
		return nil, fmt.Errorf("githubapp: LOOP_GITHUB_API_URL: %w", err)
	}
	return &App{apps: apps, jwt: jwt, api: api, fixed: o.InstallationID, base: base,
		byRepo: map[string]int64{}, inst: map[int64]*ghinstallation.Transport{}}, nil
}

// Login is the app's bot login, "<slug>[bot]" (GET /app with the app's
// JWT), asked once and then remembered.
func (a *App) Login(ctx context.Context) (string, error) {
	a.mu.Lock()
	login := a.login
	a.mu.Unlock()
	if login != "" {
		return login, nil
	}
	app, _, err := a.jwt.Apps.Get(ctx, "")
	if err != nil {
		return "", fmt.Errorf("GET /app as the app: %w", err)
	}
	if app.GetSlug() == "" {
		return "", errors.New("GET /app: no slug in the answer")
	}
	a.mu.Lock()
	a.login = app.GetSlug() + "[bot]"
	login = a.login
	a.mu.Unlock()
	return login, nil
}

// installation is the installation to use for a request to path.
func (a *App) installation(ctx context.Context, path string) (int64, error) {
	if a.fixed != 0 {
		return a.fixed, nil
	}
	owner, repo, ok := repoOf(path)
	a.mu.Lock()
	if !ok {
		id := a.lastUse
		a.mu.Unlock()
		if id == 0 {
			return 0, errors.New("githubapp: a request naming no repository, and no installation known yet (set LOOP_GITHUB_APP_INSTALLATION_ID)")
		}
		return id, nil
	}
	key := strings.ToLower(owner + "/" + repo)
	id, known := a.byRepo[key]
	a.mu.Unlock()
	if known {
		return id, nil
	}
	inst, _, err := a.jwt.Apps.FindRepositoryInstallation(ctx, owner, repo)
	if err != nil {
		return 0, fmt.Errorf("githubapp: the app's installation on %s/%s: %w", owner, repo, err)
	}
	a.mu.Lock()
	a.byRepo[key] = inst.GetID()
	a.mu.Unlock()
	return inst.GetID(), nil
}

// repoOf finds /repos/{owner}/{repo} in a request path (after any base
// prefix such as /api/v3).
func repoOf(path string) (owner, repo string, ok bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i+2 < len(segs); i++ {
		if segs[i] == "repos" {
			return segs[i+1], segs[i+2], segs[i+1] != "" && segs[i+2] != ""
		}
	}
	return "", "", false
}

func (a *App) transport(id int64, fresh bool) *ghinstallation.Transport {
	a.mu.Lock()
	defer a.mu.Unlock()
	t := a.inst[id]
	if t == nil || fresh {
		t = ghinstallation.NewFromAppsTransport(a.apps, id)
		t.BaseURL = a.api
		a.inst[id] = t
	}
	a.lastUse = id
	return t
}

// RoundTrip sends req as the installation on the repository it names.
func (a *App) RoundTrip(req *http.Request) (*http.Response, error) {
	id, err := a.installation(req.Context(), req.URL.Path)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, err
	}
	retry := req
	if req.Body != nil && req.GetBody != nil {
		if body, err := req.GetBody(); err == nil {
			retry = req.Clone(req.Context())
			retry.Body = body
		}
	} else if req.Body == nil || req.Body == http.NoBody {
		retry = req.Clone(req.Context())
	} else {
		retry = nil // a body that cannot be sent twice
	}
	resp, err := a.transport(id, false).RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || retry == nil {
		if retry != nil && retry != req && retry.Body != nil {
			retry.Body.Close()
		}
		return resp, err
	}
	// The installation token expired before its time (revoked, a clock
	// apart): GitHub did nothing with the request, so send it once more
	// with a fresh token.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return a.transport(id, true).RoundTrip(retry)
}
