package ingressgithub

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/service"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/ingress-github/internal/route"
)

// Test identities. alice and bob are authorized; slackonly is a person
// without a GitHub login; carol is a collaborator, mallory a stranger; the
// ledger posts as the-loop-bot, which is not in authorizedUsers
// (docs/requirements.md R3.5).
const (
	testSecret = "webhook-secret-for-tests"
	testKey    = "envelope-key-for-tests-0123456789abcdef"
	parts      = 2
)

// botLogin is the ledger's login: the token's user, or with
// LOOP_TEST_GITHUB_APP=1 (the suite as a GitHub App) the app's bot.
var botLogin = func() string {
	if ghfake.AppMode() {
		return appSlug + "[bot]"
	}
	return "the-loop-bot"
}()

// appSlug names the suite's GitHub App; its installation tokens live a
// minute and a second, so each is refreshed a second after it was minted.
const (
	appSlug     = "the-loop"
	appTokenTTL = 61 * time.Second
)

// asApp, in app mode, turns the token a test gave the service into the
// GitHub App of the fake that test pointed it at: the same calls, with the
// app's JWT and installation tokens.
func asApp(t testing.TB, c *Config) {
	if !ghfake.AppMode() || !c.Token.IsSet() {
		return
	}
	gh := ghfake.ByURL(c.APIURL)
	if gh == nil {
		return
	}
	app := gh.InstallApp(t, appSlug, appTokenTTL)
	c.Token = config.Secret{}
	c.App = config.App{AppID: app.ID, PrivateKeyFile: app.KeyFile}
}

var people = []identity.Person{
	{GitHub: "alice", Slack: "UALICE", Name: "Alice"},
	{GitHub: "bob"},
	{Slack: "USLACKONLY", Name: "Slack Only"},
	{GitHub: "Codertocat"}, // the sender of the shared example payloads
}

// env is one ingress-github on a real in-process JetStream, served over
// real HTTP, with a consumer that collects what reaches the inbox.
type env struct {
	t     testing.TB
	srv   *bustest.Server
	conn  *bus.Conn
	svc   *Service
	http  *httptest.Server
	logs  *testkit.Logs
	ready *httpserver.Readiness
	reg   *prometheus.Registry

	cfgMu sync.Mutex
	cfg   *config.Config

	mu     sync.Mutex
	errs   []string // problems the collector saw
	events map[string]*loopv1.Event
	order  []string
	change chan struct{}
}

type envOption func(*service.Deps, *Config, *Options)

func withOptions(f func(*Options)) envOption {
	return func(_ *service.Deps, _ *Config, o *Options) { f(o) }
}
func withDeps(f func(*service.Deps)) envOption {
	return func(d *service.Deps, _ *Config, _ *Options) { f(d) }
}
func withConfig(f func(*Config)) envOption {
	return func(_ *service.Deps, c *Config, _ *Options) { f(c) }
}

func newEnv(t testing.TB, opts ...envOption) *env {
	t.Helper()
	e := newEnvBare(t, opts...)
	e.collect()
	return e
}

// newEnvBare is newEnv without the inbox consumer.
func newEnvBare(t testing.TB, opts ...envOption) *env {
	t.Helper()
	srv := bustest.StartServer(t, bustest.Options{InProcessOnly: true})
	srv.Provision(t, bustest.FastTopology(parts))
	e := &env{t: t, srv: srv, conn: srv.Connect(t, "ingress-github-test"), logs: &testkit.Logs{},
		events: map[string]*loopv1.Event{}, change: make(chan struct{})}
	dir, problems := identity.New(people)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	e.cfg = config.Default()
	e.cfg.Routing.AuthorizedUsers = dir
	e.svc = e.newService(opts...)
	e.http = httptest.NewServer(e.svc.Handler())
	t.Cleanup(e.http.Close)
	return e
}

func (e *env) newService(opts ...envOption) *Service {
	e.t.Helper()
	e.ready = httpserver.NewReadiness()
	e.reg = prometheus.NewRegistry()
	log := slog.New(e.logs.Handler())
	deps := service.Deps{
		Conn:     e.conn,
		Log:      log,
		Events:   eventlog.New(Name, log, nil),
		Registry: e.reg,
		Ready:    e.ready,
		Config: func() *config.Config {
			e.cfgMu.Lock()
			defer e.cfgMu.Unlock()
			return e.cfg
		},
	}
	cfg := DefaultConfig()
	cfg.WebhookSecret = config.NewSecret(testSecret)
	cfg.Login = botLogin
	cfg.WebhookAddr = "127.0.0.1:0"
	cfg.APIURL = "http://127.0.0.1:1/"
	cfg.EnvelopeKey = config.NewSecret(testKey)
	o := DefaultOptions()
	o.PublishTimeout = 5 * time.Second
	for _, f := range opts {
		f(&deps, &cfg, &o)
	}
	asApp(e.t, &cfg)
	svc, err := New(deps, cfg, func(p *Options) { *p = o })
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	return svc
}

func (e *env) setAuthorized(ps ...identity.Person) {
	dir, _ := identity.New(ps)
	cfg := config.Default()
	cfg.Routing.AuthorizedUsers = dir
	e.cfgMu.Lock()
	e.cfg = cfg
	e.cfgMu.Unlock()
}

// collect runs a real partitioned consumer of the inbox (the
// ledger-writer's consumers) and keeps every event by id.
func (e *env) collect() {
	ctx, cancel := context.WithCancel(context.Background())
	r, err := e.conn.NewRunner(bus.ConsumerSpec{Service: bus.ServiceLedgerWriter, Stream: bus.StreamInbox, Partitions: parts},
		bus.HandlerFunc(func(_ context.Context, d *bus.Delivery) error {
			ev, err := envelope.FromMessage(envelope.Message{Subject: d.Subject, Header: d.Header, Data: d.Data})
			e.mu.Lock()
			defer e.mu.Unlock()
			if err != nil {
				e.errs = append(e.errs, fmt.Sprintf("inbox message %s does not decode: %v", d.Subject, err))
				return nil
			}
			if d.MsgID != ev.GetId() {
				e.errs = append(e.errs, fmt.Sprintf("Nats-Msg-Id %q != ce-id %q", d.MsgID, ev.GetId()))
			}
			if _, dup := e.events[ev.GetId()]; dup {
				e.errs = append(e.errs, fmt.Sprintf("event %s reached the inbox twice", ev.GetId()))
			}
			e.events[ev.GetId()] = ev
			e.order = append(e.order, ev.GetId())
			close(e.change)
			e.change = make(chan struct{})
			return nil
		}))
	if err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t := e.t
	t.Cleanup(func() {
		cancel()
		<-done
		e.checkCollector(t)
	})
}

// checkCollector reports what the inbox consumer found wrong.
func (e *env) checkCollector(t testing.TB) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.errs {
		t.Error(s)
	}
	e.errs = nil
}

// waitEvents waits (generously) until every id has reached the inbox and
// returns those events.
func (e *env) waitEvents(ids ...string) []*loopv1.Event {
	e.t.Helper()
	deadline := time.After(60 * time.Second)
	for {
		e.mu.Lock()
		var out []*loopv1.Event
		for _, id := range ids {
			if ev, ok := e.events[id]; ok {
				out = append(out, ev)
			}
		}
		ch := e.change
		e.mu.Unlock()
		if len(out) == len(ids) {
			return out
		}
		select {
		case <-ch:
		case <-deadline:
			e.t.Fatalf("events %v did not all reach the inbox (have %d)", ids, len(out))
		}
	}
}

// stored is how many messages the inbox has ever stored: the last
// sequence. WorkQueue consumption removes messages but not sequences, so
// this counts publications exactly, without waiting for anything.
func (e *env) stored() uint64 {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := e.conn.StreamStats(ctx, bus.StreamInbox)
	if err != nil {
		e.t.Fatal(err)
	}
	return st.LastSeq
}

func sign(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

type response struct {
	Code   int
	Header http.Header
	Status string   `json:"status"`
	Reason string   `json:"reason"`
	Events []string `json:"events"`
}

// post sends a delivery over HTTP. sig "" signs with the test secret;
// "-" sends no signature.
func (e *env) post(event, delivery string, body []byte, sig string) response {
	e.t.Helper()
	return e.postTo(e.http.URL+WebhookPath, event, delivery, body, sig, "application/json")
}

func (e *env) postTo(url, event, delivery string, body []byte, sig, ctype string) response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if event != "" {
		req.Header.Set("X-GitHub-Event", event)
	}
	if delivery != "" {
		req.Header.Set("X-GitHub-Delivery", delivery)
	}
	switch sig {
	case "":
		req.Header.Set("X-Hub-Signature-256", sign(testSecret, body))
	case "-":
	default:
		req.Header.Set("X-Hub-Signature-256", sig)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	r := response{Code: resp.StatusCode, Header: resp.Header}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &r); err != nil {
			e.t.Fatalf("response %d is not JSON: %q", resp.StatusCode, raw)
		}
	}
	return r
}

// drops returns the reasons of the routing.dropped records so far, with
// "forged-envelope" for each routing.forged_envelope record among them.
func (e *env) drops() []string {
	var out []string
	for _, r := range e.logs.Events("routing.dropped", "routing.forged_envelope") {
		switch r["event"] {
		case "routing.dropped":
			out = append(out, fmt.Sprint(r["reason"]))
		case "routing.forged_envelope":
			out = append(out, route.NoteForgedEnvelope)
		}
	}
	return out
}

// envelopeFor returns a comment body on issue 15 of octo/repo (where the
// cases' payloads put it) carrying a signed envelope for a recorded event
// raised by actor.
func envelopeFor(t *testing.T, key, id, typ string, actor envelope.LedgerActor, text string) string {
	t.Helper()
	return envelopeAt(t, key, envelope.Binding{Repo: "octo/repo", Number: 15}, id, typ, actor, text)
}

// envelopeAt is envelopeFor for the record at b.
func envelopeAt(t *testing.T, key string, b envelope.Binding, id, typ string, actor envelope.LedgerActor, text string) string {
	t.Helper()
	body, err := envelope.SealLedger([]byte(key), envelope.Ledger{ID: id, Type: typ, Source: "slack", Actor: actor,
		Conversation: envelope.LedgerConversation{Channel: "C1", ThreadTS: "1700000000.000100"}}, nil, b,
		func(env string) string { return strings.TrimSpace(text) + "\n\n" + env })
	if err != nil {
		t.Fatal(err)
	}
	return body
}
