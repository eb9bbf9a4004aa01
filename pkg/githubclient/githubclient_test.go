package githubclient

import (
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/pkg/githubapp"
)

// TestLoginWithTokenAndApp: the same constructor reaches GitHub with a
// token (GET /user answers the token's user) and as a GitHub App (GET /app
// answers the app's bot; its installation tokens cannot call GET /user).
func TestLoginWithTokenAndApp(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddRepo("octo/repo")
	gh.AddToken("tok", "the-loop-bot")
	gh.AddIssue("octo/repo", "alice", "Work", "")
	app := gh.InstallApp(t, "loop-app", time.Hour)

	tok, err := New(Options{APIURL: strings.TrimSuffix(gh.URL(), "/"), Token: "tok", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if tok.App != nil {
		t.Error("a token client has an app")
	}
	if got, err := tok.Login(t.Context()); err != nil || got != "the-loop-bot" {
		t.Errorf("token login = %q, %v; want the-loop-bot", got, err)
	}
	if got := tok.GitHub.BaseURL.String(); got != gh.URL() {
		t.Errorf("base URL = %s, want %s (a trailing slash added)", got, gh.URL())
	}

	viaApp, err := New(Options{APIURL: gh.URL(), Token: "ignored", App: githubapp.Options{AppID: app.ID, PrivateKeyFile: app.KeyFile}})
	if err != nil {
		t.Fatal(err)
	}
	if viaApp.App == nil {
		t.Fatal("an app client has no app")
	}
	if got, err := viaApp.Login(t.Context()); err != nil || got != app.Login {
		t.Errorf("app login = %q, %v; want %s", got, err, app.Login)
	}
	is, _, err := viaApp.GitHub.Issues.Get(t.Context(), "octo", "repo", 1)
	if err != nil || is.GetTitle() != "Work" {
		t.Errorf("GET issue 1 as the app: %v, %v", is, err)
	}
	if c := gh.AppCounts(); c.Minted == 0 {
		t.Errorf("no installation token minted for a repository call: %+v", c)
	}
}

// TestBadURLRefusedWithoutEchoingIt: the URL may embed credentials, so the
// error names the setting only.
func TestBadURLRefusedWithoutEchoingIt(t *testing.T) {
	_, err := New(Options{APIURL: "user:s3cret@no-scheme"})
	if err == nil {
		t.Fatal("a relative URL was accepted")
	}
	if strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "LOOP_GITHUB_API_URL") {
		t.Errorf("error = %q: want the setting named and the URL not echoed", err)
	}
	if _, err := New(Options{}); err != nil {
		t.Errorf("no URL: %v, want GitHub's default", err)
	}
}
