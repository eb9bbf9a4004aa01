package ingressgithub

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/service"
)

func noSecret(c *Config) { c.WebhookSecret = config.Secret{} }

// TestNoSecretUnderUp: without a webhook secret (and no insecure flag) the
// service does not crash its process: the listener stays off, the log says
// so loudly, and /readyz names why. Run still returns cleanly.
func TestNoSecretUnderUp(t *testing.T) {
	e := newEnvBare(t, withConfig(noSecret))
	err := e.svc.ready()
	if err == nil || !strings.Contains(err.Error(), "LOOP_GITHUB_WEBHOOK_SECRET") {
		t.Fatalf("ready = %v, want a reason naming LOOP_GITHUB_WEBHOOK_SECRET", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.svc.Run(ctx) }()
	short, stop := context.WithTimeout(ctx, 200*time.Millisecond)
	if addr := e.svc.WebhookAddr(short); addr != nil {
		t.Errorf("the webhook listens on %v without a secret", addr)
	}
	stop()
	failed := e.ready.Check()
	if !strings.Contains(failed[Name], "LOOP_GITHUB_WEBHOOK_SECRET") {
		t.Errorf("/readyz checks = %v, want %s failing with the reason", failed, Name)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if !strings.Contains(e.logs.String(), "webhook listener off") || !strings.Contains(e.logs.String(), "LOOP_GITHUB_WEBHOOK_SECRET is not set") {
		t.Error("no log line saying the listener is off and why")
	}
	// The handler itself is fail-closed too.
	if r := e.post("issue_comment", "ns-1", issueCommentJSON("created", 1, "alice", "OWNER", "x"), "-"); r.Code != http.StatusUnauthorized {
		t.Errorf("unsigned request with no secret configured: %d, want 401", r.Code)
	}
}

// TestNoSecretUnderServe: `serve ingress-github` (RequireWebhookSecret)
// refuses to start without a secret, naming the way out; poll mode needs none.
func TestNoSecretUnderServe(t *testing.T) {
	e := newEnvBare(t)
	deps, cfg := e.svc.deps, e.svc.cfg
	cfg.WebhookSecret = config.Secret{}
	serve := func(o *Options) { o.RequireWebhookSecret = true }
	_, err := New(deps, cfg, serve)
	if err == nil || !strings.Contains(err.Error(), "LOOP_GITHUB_WEBHOOK_SECRET") || !strings.Contains(err.Error(), "LOOP_GITHUB_INSECURE_NO_SIGNATURE") {
		t.Errorf("New without a secret = %v, want a refusal naming the secret and the insecure flag", err)
	}
	cfg.Mode, cfg.PollRepos = string(ModePoll), "octo/repo"
	cfg.Token = config.NewSecret("t")
	if _, err := New(deps, cfg, serve); err != nil {
		t.Errorf("poll mode without a webhook secret: %v", err)
	}
	cfg.Mode = "sometimes"
	if _, err := New(deps, cfg, serve); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestInsecureMode: with the explicit flag and no secret, unsigned
// deliveries are accepted, and every response says signatures are off.
func TestInsecureMode(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { noSecret(c); c.InsecureNoSignature = true }))
	if err := e.svc.ready(); err != nil {
		t.Errorf("ready = %v", err)
	}
	for i, sig := range []string{"-", "sha256=00"} {
		r := e.post("issue_comment", "ins-"+sig, issueCommentJSON("created", int64(800+i), "alice", "OWNER", "x"), sig)
		if r.Code != http.StatusAccepted || !strings.Contains(r.Header.Get("X-Loop-Warning"), "NOT verified") {
			t.Errorf("insecure, signature %q: %d, warning %q", sig, r.Code, r.Header.Get("X-Loop-Warning"))
		}
	}
	if r := e.post("ping", "ins-ping", []byte(`{}`), "-"); r.Header.Get("X-Loop-Warning") == "" {
		t.Error("a ping response lacks the warning")
	}
}

// TestRunServesWebhook: Run listens on LOOP_GITHUB_WEBHOOK_ADDR, reports
// ready, accepts a delivery, and stops cleanly (readiness first).
func TestRunServesWebhook(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.svc.Run(ctx) }()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	addr := e.svc.WebhookAddr(wctx)
	if addr == nil {
		t.Fatal("the webhook never listened")
	}
	if failed := e.ready.Check(); len(failed) != 0 {
		t.Errorf("not ready: %v", failed)
	}
	body := issueCommentJSON("created", 900, "alice", "OWNER", "over TCP")
	r := e.postTo("http://"+addr.String()+WebhookPath, "issue_comment", "run-1", body, "", "application/json")
	if r.Code != http.StatusAccepted {
		t.Errorf("%d %q", r.Code, r.Status)
	}
	e.waitEvents("gh:issue-comment:900")
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	if err := e.svc.ready(); err == nil || !strings.Contains(err.Error(), "shutting down") {
		t.Errorf("ready after stop = %v, want shutting down", err)
	}
	if _, err := http.Post("http://"+addr.String()+WebhookPath, "application/json", bytes.NewReader(body)); err == nil {
		t.Error("the listener still answers after Run returned")
	}
}

// TestLedgerLoginFromGitHub: without LOOP_GITHUB_LOGIN the ledger's login is
// asked of GET /user with the token, and its envelope comments are records.
func TestLedgerLoginFromGitHub(t *testing.T) {
	gh := ghfake.New(t)
	gh.AddToken("ledger-token", botLogin)
	e := newEnv(t, withConfig(func(c *Config) {
		c.Login = ""
		c.Token = config.NewSecret("ledger-token")
		c.APIURL = gh.URL()
	}))
	rec := envelopeFor(t, testKey, "slack:EvL", "control.command", envelope.LedgerActor{GitHub: "alice"}, "the-loop stop")
	r := e.post("issue_comment", "login-1", issueCommentJSON("created", 950, botLogin, "NONE", rec), "")
	if r.Code != http.StatusAccepted {
		t.Fatalf("%d %q %q", r.Code, r.Status, r.Reason)
	}
	ev := e.waitEvents(r.Events...)[0]
	if ev.GetType() != "ledger.record" || ev.GetActor().GetGithub() != "alice" {
		t.Errorf("%s by %v", ev.GetType(), ev.GetActor())
	}
	if strings.Contains(e.logs.String(), "ledger-token") {
		t.Error("the token appears in the logs")
	}
}

// ledgerLoginConfig is an operator config file authorizing alice and, when
// withBot, the ledger's own login in another case.
func ledgerLoginConfig(withBot bool) string {
	users := "[alice, bob]"
	if withBot {
		users = "[alice, bob, \"" + strings.ToUpper(botLogin) + "\"]"
	}
	return "version: \"0.7.0\"\nrouting:\n  authorizedUsers: " + users + "\n"
}

// watchConfig gives the service a real config watcher on a file holding body.
func watchConfig(t *testing.T, body string) (*config.Watcher, string, envOption) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "loop.yaml")
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	w, err := config.NewWatcher(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return w, path, withDeps(func(d *service.Deps) { d.Config, d.Checks = w.Current, w })
}

// TestLedgerLoginInAuthorizedUsersRefused: attack 4. An operator config
// that lists the ledger's own login (LOOP_GITHUB_LOGIN here, in another
// case) is refused: at start Run returns the reason and serves nothing; on a
// reload the edit is refused and the config in force stays.
func TestLedgerLoginInAuthorizedUsersRefused(t *testing.T) {
	t.Run("start", func(t *testing.T) {
		_, _, opt := watchConfig(t, ledgerLoginConfig(true))
		e := newEnvBare(t, opt)
		err := e.svc.Run(context.Background())
		if !errors.Is(err, config.ErrLedgerLogin) || !strings.Contains(err.Error(), "agents post with its token") {
			t.Fatalf("Run = %v, want the ledger login refused and why", err)
		}
		if addr := e.svc.WebhookAddr(canceled()); addr != nil {
			t.Errorf("the webhook listens on %v under a refused config", addr)
		}
	})
	t.Run("start, login from GET /user", func(t *testing.T) {
		gh := ghfake.New(t)
		gh.AddToken("ledger-token", botLogin)
		_, _, opt := watchConfig(t, ledgerLoginConfig(true))
		e := newEnvBare(t, opt, withConfig(func(c *Config) {
			c.Login = ""
			c.Token = config.NewSecret("ledger-token")
			c.APIURL = gh.URL()
		}))
		if err := e.svc.Run(context.Background()); !errors.Is(err, config.ErrLedgerLogin) {
			t.Fatalf("Run = %v, want the ledger login refused", err)
		}
	})
	t.Run("reload", func(t *testing.T) {
		w, path, opt := watchConfig(t, ledgerLoginConfig(false))
		e := newEnvBare(t, opt)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- e.svc.Run(ctx) }()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		defer wcancel()
		if e.svc.WebhookAddr(wctx) == nil {
			t.Fatal("the webhook never listened")
		}
		good := w.Current()
		if err := os.WriteFile(path, []byte(ledgerLoginConfig(true)), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := w.Reload(); !errors.Is(err, config.ErrLedgerLogin) {
			t.Fatalf("Reload = %v, want the ledger login refused", err)
		}
		if w.Current() != good {
			t.Fatal("the refused config is in force")
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

func canceled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
