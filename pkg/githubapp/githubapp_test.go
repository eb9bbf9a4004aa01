package githubapp_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/pkg/githubapp"
)

const repo = "octo/widgets"

func comment(t *testing.T, hc *http.Client, api string, n int) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("%s/repos/%s/issues/1/comments", api, repo), bytes.NewReader([]byte(fmt.Sprintf(`{"body":"record %d"}`, n))))
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("comment %d: status %d", n, resp.StatusCode)
	}
}

// TestInstallationTokensAreMintedRefreshedAndRenewed: the app finds its
// installation on the repository, writes as its bot, renews a token the
// fake expired under it without losing the write, and learns its login
// from GET /app.
func TestInstallationTokensAreMintedRefreshedAndRenewed(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddRepo(repo)
	gh.AddIssue(repo, "octocat", "work", "body")
	app := gh.InstallApp(t, "the-loop", time.Hour)
	a, err := githubapp.New(githubapp.Options{AppID: app.ID, PrivateKeyFile: app.KeyFile, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: a, Timeout: 10 * time.Second}
	api := gh.URL()
	comment(t, hc, api, 1)
	comment(t, hc, api, 2)
	if c := gh.AppCounts(); c.Minted != 1 || c.BadJWT != 0 {
		t.Errorf("after two writes: %+v, want one token minted and reused", c)
	}
	gh.ExpireAppTokens()
	comment(t, hc, api, 3)
	c := gh.AppCounts()
	if c.Expired != 1 || c.Minted != 2 {
		t.Errorf("after the token expired: %+v, want the refusal seen once and a second token minted", c)
	}
	cs := gh.Comments(repo, 1)
	if len(cs) != 3 {
		t.Fatalf("%d comments, want 3 (none lost)", len(cs))
	}
	for _, x := range cs {
		if x.Login != app.Login {
			t.Errorf("comment by %q, want the app's bot %q", x.Login, app.Login)
		}
	}
	login, err := a.Login(context.Background())
	if err != nil || login != "the-loop[bot]" {
		t.Errorf("Login = %q, %v", login, err)
	}
	for _, r := range gh.Requests() {
		if r.Path == "/user" {
			t.Error("the app called GET /user")
		}
	}
}

// TestTokensShortOfTheirHourAreRefreshedBeforeExpiry: with tokens that
// live 61 s, the transport refreshes each a minute ahead, so writes go on
// across several tokens and none is refused.
func TestTokensShortOfTheirHourAreRefreshedBeforeExpiry(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddRepo(repo)
	gh.AddIssue(repo, "octocat", "work", "body")
	app := gh.InstallApp(t, "the-loop", 61*time.Second)
	a, err := githubapp.New(githubapp.Options{AppID: app.ID, InstallationID: app.InstallationID, PrivateKeyFile: app.KeyFile, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: a, Timeout: 10 * time.Second}
	deadline := time.Now().Add(2500 * time.Millisecond)
	n := 0
	for time.Now().Before(deadline) {
		n++
		comment(t, hc, gh.URL(), n)
		time.Sleep(100 * time.Millisecond)
	}
	c := gh.AppCounts()
	if c.Minted < 2 || c.Expired != 0 || c.BadJWT != 0 {
		t.Errorf("%+v: want several tokens, none used past its expiry", c)
	}
	if got := len(gh.Comments(repo, 1)); got != n {
		t.Errorf("%d comments, want %d", got, n)
	}
}

// TestAJWTOfAnotherKeyIsRefused: the fake verifies the JWT's signature.
func TestAJWTOfAnotherKeyIsRefused(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddRepo(repo)
	app := gh.InstallApp(t, "the-loop", time.Hour)
	other, _ := rsa.GenerateKey(rand.Reader, 2048)
	file := filepath.Join(t.TempDir(), "other.pem")
	_ = os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(other)}), 0o600)
	a, err := githubapp.New(githubapp.Options{AppID: app.ID, PrivateKeyFile: file, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Login(context.Background()); err == nil {
		t.Fatal("GET /app with a JWT of another key answered")
	}
	if gh.AppCounts().BadJWT == 0 {
		t.Error("the fake did not count the bad JWT")
	}
	if _, err := githubapp.New(githubapp.Options{AppID: app.ID, PrivateKeyFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil {
		t.Error("a missing key file was accepted")
	}
}

// TestAMintRefusedIsAWrappedErrorWithoutSecrets: an installation GitHub
// does not know fails the request with an error that wraps GitHub's answer
// and carries neither the JWT nor the key.
func TestAMintRefusedIsAWrappedErrorWithoutSecrets(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddRepo(repo)
	gh.AddIssue(repo, "octocat", "work", "body")
	app := gh.InstallApp(t, "the-loop", time.Hour)
	a, err := githubapp.New(githubapp.Options{AppID: app.ID, InstallationID: app.InstallationID + 1, PrivateKeyFile: app.KeyFile, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: a, Timeout: 10 * time.Second}
	req, _ := http.NewRequest(http.MethodPost, gh.URL()+"/repos/"+repo+"/issues/1/comments", bytes.NewReader([]byte(`{"body":"x"}`)))
	_, err = hc.Do(req)
	if err == nil {
		t.Fatal("a request with no installation token was sent")
	}
	var ge *github.ErrorResponse
	if !errors.As(err, &ge) || ge.Response.StatusCode != http.StatusNotFound {
		t.Errorf("%v: want GitHub's 404 wrapped", err)
	}
	key, _ := os.ReadFile(app.KeyFile)
	for _, line := range strings.Split(string(key), "\n") {
		if len(line) > 16 && strings.Contains(err.Error(), line) {
			t.Errorf("the error quotes the key: %v", err)
		}
	}
	if strings.Contains(err.Error(), "eyJ") || strings.Contains(err.Error(), "Bearer") {
		t.Errorf("the error carries the JWT: %v", err)
	}
	if len(gh.Comments(repo, 1)) != 0 {
		t.Error("the comment was written")
	}
	// A key file that is not a key: the error names the setting, not the
	// content.
	bad := filepath.Join(t.TempDir(), "bad.pem")
	_ = os.WriteFile(bad, []byte("not-a-key-but-a-secret"), 0o600)
	if _, err := githubapp.New(githubapp.Options{AppID: app.ID, PrivateKeyFile: bad}); err == nil ||
		!strings.Contains(err.Error(), "LOOP_GITHUB_APP_PRIVATE_KEY_FILE") || strings.Contains(err.Error(), "secret") {
		t.Errorf("a file that is not a key: %v", err)
	}
}

// TestRequestsRefusedTogetherMintOneToken: requests in flight when their
// token is revoked are each sent again, with one new token between them.
func TestRequestsRefusedTogetherMintOneToken(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddRepo(repo)
	gh.AddIssue(repo, "octocat", "work", "body")
	app := gh.InstallApp(t, "the-loop", time.Hour)
	a, err := githubapp.New(githubapp.Options{AppID: app.ID, InstallationID: app.InstallationID, PrivateKeyFile: app.KeyFile, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: a, Timeout: 10 * time.Second}
	comment(t, hc, gh.URL(), 0)
	gh.ExpireAppTokens()
	const n = 8
	var wg sync.WaitGroup
	for i := 1; i <= n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not comment: t.Fatal belongs to the test's own goroutine.
			req, _ := http.NewRequest(http.MethodPost, gh.URL()+"/repos/"+repo+"/issues/1/comments", strings.NewReader(fmt.Sprintf(`{"body":"record %d"}`, i)))
			resp, err := hc.Do(req)
			if err != nil {
				t.Errorf("comment %d: %v", i, err)
				return
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusCreated {
				t.Errorf("comment %d: status %d", i, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	if c := gh.AppCounts(); c.Minted != 2 || c.Expired < 1 {
		t.Errorf("%+v: want the refusals answered by one second token", c)
	}
	if got := len(gh.Comments(repo, 1)); got != n+1 {
		t.Errorf("%d comments, want %d", got, n+1)
	}
}
