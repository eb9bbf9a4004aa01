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
// The app's JWT is signed here (RS256, crypto/rsa) and installation tokens
// are minted with go-github's Apps API, the one GitHub client the binary
// links (docs/decisions/104-one-workspace-lean-product-module.md); this
// package also routes each request to its repository's installation.
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
	jwt     *github.Client // the app's own calls, with its JWT
	api     string         // no trailing slash
	fixed   int64
	base    http.RoundTripper
	timeout time.Duration
	now     func() time.Time
	mu      sync.Mutex
	byRepo  map[string]int64
	inst    map[int64]*installation
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
	rsaKey, err := parseKey(key)
	if err != nil {
		// The reason names the format, never the file's content.
		return nil, fmt.Errorf("githubapp: LOOP_GITHUB_APP_PRIVATE_KEY_FILE is not an RSA private key in PEM: %w", err)
	}
	api := strings.TrimSuffix(o.APIURL, "/")
	if api == "" {
		api = "https://api.github.com"
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	a := &App{api: api, fixed: o.InstallationID, base: base, timeout: timeout, now: time.Now,
		byRepo: map[string]int64{}, inst: map[int64]*installation{}}
	apps := &jwtTransport{key: rsaKey, appID: o.AppID, base: base, now: func() time.Time { return a.now() }}
	a.jwt = github.NewClient(&http.Client{Transport: apps, Timeout: timeout})
	if a.jwt.BaseURL, err = url.Parse(api + "/"); err != nil {
		return nil, fmt.Errorf("githubapp: LOOP_GITHUB_API_URL: %w", err)
	}
	return a, nil
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

// installationFor is the installation to use for a request to path.
func (a *App) installationFor(ctx context.Context, path string) (int64, error) {
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

// installationOf is the token source of installation id, made on first
// use; it is also the installation of requests naming no repository from
// now on.
func (a *App) installationOf(id int64) *installation {
	a.mu.Lock()
	defer a.mu.Unlock()
	in := a.inst[id]
	if in == nil {
		in = &installation{app: a, id: id}
		a.inst[id] = in
	}
	a.lastUse = id
	return in
}

// RoundTrip sends req as the installation on the repository it names.
func (a *App) RoundTrip(req *http.Request) (*http.Response, error) {
	id, err := a.installationFor(req.Context(), req.URL.Path)
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
	in := a.installationOf(id)
	resp, used, err := in.roundTrip(req, "")
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
	resp, _, err = in.roundTrip(retry, used)
	return resp, err
}

// refreshAhead is how long before its expiry an installation token is
// replaced, so that a request never leaves with a token about to lapse
// (docs/decisions/078-github-app-authentication.md).
const refreshAhead = time.Minute

// installation holds one installation's token, minted with the app's JWT
// and replaced before it expires.
type installation struct {
	app *App
	id  int64
	// mu is held while a token is minted, so that concurrent requests
	// wait for one token rather than mint one each.
	mu      sync.Mutex
	token   string
	expires time.Time
}

// tokenFor returns a token good for at least refreshAhead, minting one when
// the one held is closer to its expiry or is refused, the token GitHub
// refused ("" for none): requests refused together mint one token between
// them. The error never carries a token or the JWT.
func (in *installation) tokenFor(ctx context.Context, refused string) (string, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.token != "" && in.token != refused && in.app.now().Add(refreshAhead).Before(in.expires) {
		return in.token, nil
	}
	// The request's own deadline may be short or absent: the mint is
	// bounded by the app's timeout, and ends with the request.
	ctx, cancel := context.WithTimeout(ctx, in.app.timeout)
	defer cancel()
	tok, _, err := in.app.jwt.Apps.CreateInstallationToken(ctx, in.id, nil)
	if err != nil {
		return "", fmt.Errorf("githubapp: mint a token for installation %d: %w", in.id, err)
	}
	if tok.GetToken() == "" {
		return "", fmt.Errorf("githubapp: mint a token for installation %d: no token in the answer", in.id)
	}
	in.token, in.expires = tok.GetToken(), tok.GetExpiresAt().Time
	return in.token, nil
}

// roundTrip sends req with the installation's token (another than refused)
// and says which token it used.
func (in *installation) roundTrip(req *http.Request, refused string) (*http.Response, string, error) {
	tok, err := in.tokenFor(req.Context(), refused)
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, "", err
	}
	r := req.Clone(req.Context())
	r.Header.Set("Authorization", "token "+tok)
	resp, err := in.app.base.RoundTrip(r)
	return resp, tok, err
}
