package ledgerwriter

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/service"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

const (
	testToken = "ghp_test_token_never_logged_0123456789"
	testRepo  = "octo/repo"
	kickRepo  = "octo/kick"
	parts     = 4
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// botLogin is the ledger's login: the token's user, or with
// LOOP_TEST_GITHUB_APP=1 (the whole suite as a GitHub App) the app's bot.
var botLogin = func() string {
	if ghfake.AppMode() {
		return appSlug + "[bot]"
	}
	return "loop-bot"
}()

// appSlug names the suite's GitHub App; appTokenTTL is how long the fake's
// installation tokens live: a minute and a second, so the client refreshes
// each one a second after it was minted and every test runs across several.
const (
	appSlug     = "the-loop"
	appTokenTTL = 61 * time.Second
)

// testScrub is a scrubber with fixed machine facts, so goldens do not depend
// on the host running the tests.
var testScrub = redact.New(redact.Options{
	Env:  map[string]string{"MY_API_TOKEN": "hunter2-secret-value"},
	Home: "/home/mona", User: "mona", Host: "build-box",
}).Scrub

func withScrub(f func(string) string) Option { return func(o *options) { o.scrub = f } }

func withHook(h func(step, string) error) Option { return func(o *options) { o.hook = h } }

func testPeople() []identity.Person {
	return []identity.Person{
		{GitHub: "octocat", Slack: "U123", Name: "Mona Lisa"},
		{GitHub: "anita-b", Slack: "UBUT42", Name: "Anita"},
		{Slack: "U999", Name: "Slack Only"},
	}
}

func testConfig(t testing.TB) *config.Config {
	t.Helper()
	cfg := config.Default()
	dir, problems := identity.New(testPeople())
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	cfg.Routing.AuthorizedUsers = dir
	cfg.Channels.Slack.Kickoff = config.Kickoff{Repo: kickRepo, Labels: []string{"the-loop", "kickoff"}}
	return cfg
}

// env is one test's world: a real JetStream server, the GitHub fake, the
// operator config, and a reader of the fan-out.
type env struct {
	t     testing.TB
	srv   *bustest.Server
	gh    *ghfake.Server
	cfg   *config.Config
	logs  *testkit.Logs
	pub   *bus.Conn
	fan   *collector
	parts int
	// app is the GitHub App the writers authenticate as, in app mode.
	app *ghfake.App
}

func newEnv(t testing.TB, topo bus.Topology, ghOpts ...ghfake.Option) *env {
	t.Helper()
	return newEnvOn(t, bustest.Options{InProcessOnly: true}, topo, ghOpts...)
}

// newEnvOn is newEnv on a server started with sopts.
func newEnvOn(t testing.TB, sopts bustest.Options, topo bus.Topology, ghOpts ...ghfake.Option) *env {
	t.Helper()
	srv := bustest.StartServer(t, sopts)
	srv.Provision(t, topo)
	gh := ghfake.New(t, ghOpts...)
	gh.AddRepo(testRepo)
	gh.AddRepo(kickRepo)
	gh.AddToken(testToken, botLogin)
	var app *ghfake.App
	if ghfake.AppMode() {
		a := gh.InstallApp(t, appSlug, appTokenTTL)
		app = &a
	}
	for i := 1; i <= 20; i++ {
		gh.AddIssue(testRepo, "octocat", fmt.Sprintf("work item %d", i), "body")
	}
	e := &env{t: t, srv: srv, gh: gh, cfg: testConfig(t), logs: &testkit.Logs{}, parts: topo.Partitions, app: app}
	e.pub = srv.Connect(t, "test-publisher")
	e.fan = newCollector(t, srv.Connect(t, "test-fanout-reader"), topo.Partitions)
	return e
}

// testTopology: short AckWait (2s) and PinnedTTL (1s) so crash recoveries
// take seconds; MaxDeliver 5.
func testTopology() bus.Topology {
	topo := bustest.FastTopology(parts)
	topo.MaxDeliver = 5
	return topo
}

type writer struct {
	s      *Service
	conn   *bus.Conn
	reg    *prometheus.Registry
	ready  *httpserver.Readiness
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

// start runs a ledger-writer replica named name until the test ends.
func (e *env) start(name string, opts ...Option) *writer {
	e.t.Helper()
	return e.startWith(name, nil, opts...)
}

// startWith is start with the deps and settings changed by mutate first.
func (e *env) startWith(name string, mutate func(*service.Deps, *Config), opts ...Option) *writer {
	e.t.Helper()
	conn := e.srv.Connect(e.t, name)
	reg := prometheus.NewRegistry()
	ready := httpserver.NewReadiness()
	log := slog.New(e.logs.Handler())
	deps := service.Deps{
		Conn: conn, Log: log, Events: eventlog.New(Name, log, nil), Registry: reg,
		Ready: ready, Partitions: e.parts,
		Config: func() *config.Config { return e.cfg },
	}
	cfg := DefaultConfig()
	cfg.GitHub = e.github()
	cfg.EnvelopeKey = config.NewSecret(string(testKey))
	if mutate != nil {
		mutate(&deps, &cfg)
	}
	base := []Option{
		WithHTTPTimeout(5 * time.Second), WithClaimLease(6 * time.Second),
		WithRetryBackoff(20*time.Millisecond, 500*time.Millisecond), withScrub(testScrub),
	}
	s, err := New(deps, cfg, append(base, opts...)...)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &writer{s: s, conn: conn, reg: reg, ready: ready, cancel: cancel, done: make(chan struct{})}
	go func() { w.err = s.Run(ctx); close(w.done) }()
	e.t.Cleanup(w.stop)
	return w
}

// github is the writers' GitHub settings: the token, or the app.
func (e *env) github() config.GitHub {
	if e.app != nil {
		return config.GitHub{APIURL: e.gh.URL(), App: config.App{AppID: e.app.ID, PrivateKeyFile: e.app.KeyFile}}
	}
	return config.GitHub{Token: config.NewSecret(testToken), APIURL: e.gh.URL()}
}

func (w *writer) stop() {
	w.cancel()
	select {
	case <-w.done:
	case <-time.After(60 * time.Second):
	}
}

// publish puts ev on the inbox as a channel would.
func (e *env) publish(ev *loopv1.Event) {
	e.t.Helper()
	if err := e.tryPublish(ev); err != nil {
		e.t.Fatal(err)
	}
}

// tryPublish is publish for another goroutine than the test's.
func (e *env) tryPublish(ev *loopv1.Event) error {
	m, err := envelope.ToMessage(ev, envelope.Inbox, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = e.pub.Publish(ctx, bus.FromEnvelope(m))
	return err
}

// collector reads LOOP_EVENTS through the dispatcher's partition consumers,
// recording every fan-out event in arrival order.
type collector struct {
	mu   sync.Mutex
	evs  []received
	conn *bus.Conn
}

type received struct {
	ev      *loopv1.Event
	subject string
	header  bus.Header
}

func newCollector(t testing.TB, conn *bus.Conn, n int) *collector {
	t.Helper()
	c := &collector{conn: conn}
	r, err := conn.NewRunner(bus.ConsumerSpec{Service: bus.ServiceDispatcher, Stream: bus.StreamEvents, Partitions: n},
		bus.HandlerFunc(func(_ context.Context, d *bus.Delivery) error {
			ev, err := envelope.FromMessage(envelope.Message{Subject: d.Subject, Header: d.Header, Data: d.Data})
			if err != nil {
				return bus.Permanent(err)
			}
			c.mu.Lock()
			c.evs = append(c.evs, received{ev: ev, subject: d.Subject, header: d.Header})
			c.mu.Unlock()
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

func (c *collector) all() []received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.evs)
}

func (c *collector) byID(id string) []received {
	var out []received
	for _, r := range c.all() {
		if r.ev.GetId() == id {
			out = append(out, r)
		}
	}
	return out
}

// fannedOutInOrder waits for want's fan-outs and for the inbox to drain,
// then checks that they came in that order, each once.
func (e *env) fannedOutInOrder(t *testing.T, want []string) {
	t.Helper()
	testkit.WaitWithin(t, 60*time.Second, "every fan-out", func() bool { return len(e.fan.all()) >= len(want) })
	testkit.WaitWithin(t, 30*time.Second, "the inbox to drain", e.inboxEmpty)
	var got []string
	for _, r := range e.fan.all() {
		got = append(got, r.ev.GetId())
	}
	if !slices.Equal(got, want) {
		t.Errorf("fan-out %v, want %v (in that order, each once)", got, want)
	}
}

// eventsStored is how many messages LOOP_EVENTS holds: a duplicate publish
// the stream dropped would not show in the collector either, but a second
// stored event would.
func (e *env) eventsStored() uint64 { return e.streamStats(bus.StreamEvents).Msgs }

// streamStats reads the counts of the stream called stream.
func (e *env) streamStats(stream string) bus.StreamStats {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := e.pub.StreamStats(ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func (e *env) dlq() []bus.DLQEntry {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := e.pub.ListDLQ(ctx, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

// Event builders.

var evTime = time.Date(2026, 11, 30, 1, 2, 3, 0, time.UTC)

func slackActor() *loopv1.Actor { return &loopv1.Actor{Slack: "U123"} }

func conv() *loopv1.Conversation {
	return &loopv1.Conversation{Channel: "C1", ThreadTs: "1700000000.000100", MessageTs: "1700000001.000200"}
}

func replyEv(id, ref, text string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "slack", Type: string(catalog.WorkItemReply), Subject: ref, Time: envelope.NewTime(evTime),
		Actor: slackActor(), Conversation: conv(), Body: &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: text}}}
}

func gateEv(id, ref, text string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "slack", Type: string(catalog.GateFeedback), Subject: ref, Time: envelope.NewTime(evTime),
		Actor: slackActor(), Conversation: conv(), Body: &loopv1.Event_GateFeedback{GateFeedback: &loopv1.GateFeedback{Text: text}}}
}

func controlEv(id, ref, command, text string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "slack", Type: string(catalog.ControlCommand), Subject: ref, Time: envelope.NewTime(evTime),
		Actor: slackActor(), Conversation: conv(),
		Body: &loopv1.Event_ControlCommand{ControlCommand: &loopv1.ControlCommand{Command: command, Text: text}}}
}

// overrideEv is an operator's `the-loop graph skip REF --reason TEXT --as
// octocat`.
func overrideEv(id, ref, reason string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: catalog.SourceCLI, Type: string(catalog.GraphOverride), Subject: ref, Time: envelope.NewTime(evTime),
		Actor: &loopv1.Actor{Github: "octocat"},
		Body: &loopv1.Event_GraphOverride{GraphOverride: &loopv1.GraphOverride{Action: "skip", From: "requirements",
			Graph: "work-item", Reason: reason}}}
}

func questionEv(id, ref, text string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: catalog.SourceSession, Type: string(catalog.SessionAwaitingInput), Subject: ref, Time: envelope.NewTime(evTime),
		Actor: &loopv1.Actor{Name: "session"}, Body: &loopv1.Event_Question{Question: &loopv1.Question{Text: text, SessionId: "s1"}}}
}

func createEv(id, text string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "slack", Type: string(catalog.WorkItemCreate), Subject: "slack:C1/1700000001.000200",
		Time: envelope.NewTime(evTime), Actor: slackActor(),
		Conversation: &loopv1.Conversation{Channel: "C1", MessageTs: "1700000001.000200"},
		// The message names a repository and labels of its own: both must
		// be ignored for config's (abuse case 7).
		Body: &loopv1.Event_WorkItemCreate{WorkItemCreate: &loopv1.WorkItemCreate{Repo: "evil/repo", Body: text, Labels: []string{"auto-merge"}}}}
}

func notifyEv(id, ref string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "loop", Type: string(catalog.PhaseApprovalPending), Subject: ref, Time: envelope.NewTime(evTime),
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{Text: "design waits for approval", Url: "https://github.com/octo/repo/issues/1"}}}
}

// golden compares got with testdata/name; UPDATE=1 rewrites the file.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testkit.Golden(t, name, []byte(got))
}

// gauge and counter read a metric (summed over its labels) from a writer's
// registry.
func gauge(t testing.TB, w *writer, name string) float64 { return metricSum(t, w, name) }

func counter(t testing.TB, w *writer, name string) float64 { return metricSum(t, w, name) }

func metricSum(t testing.TB, w *writer, name string) float64 {
	t.Helper()
	mfs, err := w.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			switch {
			case m.GetCounter() != nil:
				sum += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				sum += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				sum += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return sum
}
