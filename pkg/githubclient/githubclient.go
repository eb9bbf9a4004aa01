// Package githubclient builds the one GitHub client every service uses: a
// go-github client on LOOP_GITHUB_API_URL, authenticated by a token or by a
// GitHub App's installation tokens (pkg/githubapp), with one timeout per
// request. The ledger-writer writes the ledger with it; ingress-github polls
// and asks for the ledger's login with it
// (docs/decisions/083-one-github-client.md).
package githubclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/the-loop/bus/pkg/githubapp"
)

// DefaultAPIURL is GitHub's REST base.
const DefaultAPIURL = "https://api.github.com/"

// DefaultTimeout bounds one request when Options.Timeout is 0.
const DefaultTimeout = 30 * time.Second

// Options say where GitHub is and who the loop is there.
type Options struct {
	// APIURL is the REST base (DefaultAPIURL when empty).
	APIURL string
	// Token authenticates every request, unless App.AppID is set.
	Token string
	// App, when App.AppID is not 0, authenticates as the app's
	// installations instead of Token. Its APIURL, Base and Timeout are
	// taken from these Options.
	App githubapp.Options
	// Base carries the requests (http.DefaultTransport when nil).
	Base http.RoundTripper
	// Timeout bounds one request, DefaultTimeout when 0.
	Timeout time.Duration
}

// Client is the go-github client and, with App authentication, the app
// behind it (it knows the ledger's login; installation tokens cannot call
// GET /user).
type Client struct {
	GitHub *github.Client
	App    *githubapp.App
}

// New builds the client. Errors name the setting at fault, never a secret
// nor the URL (which may embed credentials).
func New(o Options) (*Client, error) {
	api := o.APIURL
	if api == "" {
		api = DefaultAPIURL
	}
	if !strings.HasSuffix(api, "/") {
		api += "/"
	}
	base, err := url.Parse(api)
	if err != nil || base.Host == "" {
		return nil, errors.New("LOOP_GITHUB_API_URL is not an absolute URL")
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	c := &Client{}
	transport, token := o.Base, o.Token
	if o.App.AppID != 0 {
		a := o.App
		a.APIURL, a.Base, a.Timeout = api, o.Base, timeout
		if c.App, err = githubapp.New(a); err != nil {
			return nil, err
		}
		transport, token = c.App, ""
	}
	c.GitHub = github.NewClient(&http.Client{Transport: transport, Timeout: timeout})
	if token != "" {
		c.GitHub = c.GitHub.WithAuthToken(token)
	}
	c.GitHub.BaseURL = base
	return c, nil
}

// Login is the login the client acts as: the app's bot login ("<slug>[bot]",
// GET /app) with App authentication, else the token's user (GET /user).
func (c *Client) Login(ctx context.Context) (string, error) {
	if c.App != nil {
		return c.App.Login(ctx)
	}
	u, _, err := c.GitHub.Users.Get(ctx, "")
	if err != nil {
		return "", fmt.Errorf("GET /user: %w", err)
	}
	if u.GetLogin() == "" {
		return "", errors.New("GET /user: no login in the answer")
	}
	return u.GetLogin(), nil
}
