package ghfake

import (
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// EnvApp, set to 1, runs the suites that talk to this fake with GitHub App
// authentication instead of a personal token (AppMode).
const EnvApp = "LOOP_TEST_GITHUB_APP"

// AppMode reports whether EnvApp asks the suites for GitHub App
// authentication.
func AppMode() bool { return os.Getenv(EnvApp) == "1" }

// App is a GitHub App registered on the fake and installed on every
// repository: what its client is configured with.
type App struct {
	ID             int64
	InstallationID int64
	// KeyFile is the PEM of the app's private key.
	KeyFile string
	// Slug names the app; Login is its bot's login, "<slug>[bot]", the
	// author of what its installation tokens write.
	Slug, Login string
}

// AppCounts are the app's authentication events.
type AppCounts struct {
	// Minted installation tokens; Expired requests refused because their
	// installation token had expired; BadJWT requests refused because the
	// app's JWT did not verify.
	Minted, Expired, BadJWT int
}

type appState struct {
	App
	pub *rsa.PublicKey
	ttl time.Duration
	// expires: every installation token minted, and when it expires.
	expires map[string]time.Time
	counts  AppCounts
}

// InstallApp registers a GitHub App named slug (once: a second call returns
// the first app), installed on every repository, whose installation tokens live ttl (GitHub's: one hour). Its
// JWTs are verified as GitHub does (RS256 with the app's key, issuer the
// app id, issued at most 60 s ahead, valid at most 10 minutes); an
// installation token is refused once expired, and cannot call GET /user.
func (s *Server) InstallApp(t TB, slug string, ttl time.Duration) App {
	t.Helper()
	s.mu.Lock()
	if s.app != nil {
		a := s.app.App
		s.mu.Unlock()
		return a
	}
	s.mu.Unlock()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), slug+".private-key.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	if err := os.WriteFile(file, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	a := App{ID: 90210, InstallationID: 4242, KeyFile: file, Slug: slug, Login: slug + "[bot]"}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.app = &appState{App: a, pub: &key.PublicKey, ttl: ttl, expires: map[string]time.Time{}}
	s.userLocked(a.Login)
	return a
}

// SetAppTokenTTL sets how long the installation tokens minted from now on
// live.
func (s *Server) SetAppTokenTTL(ttl time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.app != nil {
		s.app.ttl = ttl
	}
}

// ExpireAppTokens expires every installation token minted so far, as if
// their hour had passed: the next request with one is refused.
func (s *Server) ExpireAppTokens() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.app == nil {
		return
	}
	past := time.Now().Add(-time.Second)
	for tok := range s.app.expires {
		s.app.expires[tok] = past
	}
}

// AppCounts returns the app's authentication events so far.
func (s *Server) AppCounts() AppCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.app == nil {
		return AppCounts{}
	}
	return s.app.counts
}

// appLocked answers what only an app may ask (with its JWT) and refuses an
// expired installation token; nil lets the request through.
func (s *Server) appLocked(c *call) *response {
	a := s.app
	if exp, ok := a.expires[c.token]; ok {
		if !time.Now().Before(exp) {
			a.counts.Expired++
			return s.errorResponse(http.StatusUnauthorized, "Bad credentials", "https://docs.github.com/rest")
		}
		if c.method == http.MethodGet && c.path == "/user" {
			return s.errorResponse(http.StatusForbidden, "Resource not accessible by integration",
				"https://docs.github.com/rest/users/users#get-the-authenticated-user")
		}
		return nil
	}
	if strings.Count(c.token, ".") != 2 && !strings.HasPrefix(c.path, "/app") {
		return nil
	}
	if !s.verifyJWTLocked(c.token) {
		a.counts.BadJWT++
		return s.errorResponse(http.StatusUnauthorized, "A JSON web token could not be decoded", "https://docs.github.com/rest")
	}
	segs := c.segs
	switch {
	case c.method == http.MethodGet && c.path == "/app":
		return s.jsonResponse(http.StatusOK, map[string]any{"id": a.ID, "slug": a.Slug, "name": a.Slug,
			"html_url": "https://github.com/apps/" + a.Slug})
	case c.method == http.MethodGet && len(segs) == 4 && segs[0] == "repos" && segs[3] == "installation":
		if s.st.repos[repoKey(segs[1]+"/"+segs[2])] == nil {
			return s.errorResponse(http.StatusNotFound, "Not Found", "https://docs.github.com/rest/apps/apps#get-a-repository-installation-for-the-authenticated-app")
		}
		return s.jsonResponse(http.StatusOK, map[string]any{"id": a.InstallationID, "app_id": a.ID, "app_slug": a.Slug})
	case c.method == http.MethodPost && len(segs) == 4 && segs[0] == "app" && segs[1] == "installations" && segs[3] == "access_tokens":
		if segs[2] != strconv.FormatInt(a.InstallationID, 10) {
			return s.errorResponse(http.StatusNotFound, "Not Found", "https://docs.github.com/rest/apps/apps#create-an-installation-access-token-for-an-app")
		}
		raw := make([]byte, 18)
		_, _ = rand.Read(raw)
		tok := "ghs_" + hex.EncodeToString(raw)
		exp := time.Now().Add(a.ttl).Truncate(time.Second)
		a.expires[tok] = exp
		s.st.tokens[tok] = a.Login
		a.counts.Minted++
		return s.jsonResponse(http.StatusCreated, map[string]any{"token": tok, "expires_at": exp.UTC().Format(time.RFC3339)})
	}
	return s.errorResponse(http.StatusForbidden, "an app's JWT cannot call this; use an installation token", "https://docs.github.com/rest")
}

// verifyJWTLocked checks an app JWT as GitHub does. It is verified here
// with crypto/rsa, the way pkg/githubapp signs it, so that neither the
// demo (which links this fake) nor the product carries a JWT library.
func (s *Server) verifyJWTLocked(token string) bool {
	a := s.app
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return false
	}
	enc := base64.RawURLEncoding
	var header struct {
		Alg string `json:"alg"`
	}
	var claims struct {
		Iss      string `json:"iss"`
		Iat, Exp *int64
	}
	for i, v := range []any{&header, &claims} {
		raw, err := enc.DecodeString(parts[i])
		if err != nil || json.Unmarshal(raw, v) != nil {
			return false
		}
	}
	sig, err := enc.DecodeString(parts[2])
	if err != nil || header.Alg != "RS256" {
		return false
	}
	sum := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if rsa.VerifyPKCS1v15(a.pub, crypto.SHA256, sum[:], sig) != nil || claims.Iat == nil || claims.Exp == nil {
		return false
	}
	iat, exp := time.Unix(*claims.Iat, 0), time.Unix(*claims.Exp, 0)
	now := time.Now()
	return claims.Iss == strconv.FormatInt(a.ID, 10) &&
		!iat.After(now.Add(60*time.Second)) &&
		exp.Sub(iat) <= 10*time.Minute &&
		exp.After(now)
}
