package inproc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/socketfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/pkg/slackmsg"
	"github.com/the-loop/bus/pkg/threads"
	"github.com/the-loop/bus/services/dispatcher"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
	ingressgithub "github.com/the-loop/bus/services/ingress-github"
	ingressslack "github.com/the-loop/bus/services/ingress-slack"
	ledgerwriter "github.com/the-loop/bus/services/ledger-writer"
	slackrenderer "github.com/the-loop/bus/services/slack-renderer"
)

func TestMain(m *testing.M) {
	tmuxtest.MaybeRunStandIn()
	os.Exit(m.Run())
}

// The cast. alice is authorized on GitHub and Slack; bob only on Slack (a
// person with no GitHub login: R5.5); carol is a work-item collaborator (a
// MEMBER on GitHub, not authorized); mallory is nobody (UMALLORY on Slack).
// The ledger writes as the-loop-bot, which is not in authorizedUsers: its
// signed records are records whatever the list says
// (docs/requirements.md R3.5).
const (
	repo          = "octo/repo"
	channel       = "C0LOOP"
	ledgerLogin   = "the-loop-bot"
	ghToken       = "ghp_inproc_test_token_0000000000000000"
	webhookSecret = "inproc-webhook-secret"
	envelopeKey   = "inproc-envelope-key-0123456789abcdef0123"
	alice         = "alice"
	aliceSlack    = "UALICE"
	bobSlack      = "UBOB"
	carol         = "carol"
	mallory       = "mallory"
	malSlack      = "UMALLORY"
	partitions    = 2
)

// armLabel is the auto-execute label's default.
var armLabel = dispatcher.DefaultLabel

// wait is the generous deadline of every wait: other engineers' tests share
// the two cores, and nothing here depends on wall-clock timing for
// correctness.
const wait = 90 * time.Second

// world is the whole system in one process: a real in-process JetStream, the
// five services built as cmd/the-loop's host builds them, the GitHub fake
// (which this world turns into a webhook sender: every write is delivered to
// ingress-github as a signed webhook, as GitHub would), the Slack Web API fake
// behind the Socket Mode fake, and a private tmux server running the stand-in
// harness in the sessions' workspace.
type world struct {
	t     testing.TB
	srv   *bustest.Server
	conn  *bus.Conn
	gh    *ghfake.Server
	slack *slackfake.Server
	sock  *socketfake.Server
	cfg   atomic.Pointer[config.Config]
	logs  *eventlog.Recorder
	// loopLog is the event log as read back from LOOP_LOG (loop.log.>),
	// where the services published it: what waitLog waits on.
	loopLog *loopLog
	work    string // the sessions' workspace
	agent   string // the stand-in's record directory
	hookAt  string // ingress-github's webhook URL
	// tmuxDir holds the sessions' tmux servers' sockets; faults,
	// with worldOptions.faults, the directory whose fail-<tmux command>
	// files make that tmux command fail.
	tmuxDir, faults string

	// elsewhere maps a repository whose webhooks go somewhere other than
	// ingress-github to what receives its writes instead (a benchmark's
	// baseline has one of its own).
	elsewhere sync.Map // repository → func(ghfake.Write)
	seq       atomic.Int64
	relayMu   sync.Mutex
	relays    sync.WaitGroup
	closing   atomic.Bool
}

// servicePublisher sends a service's event-log records to loop.log as the
// host does, over the service's own connection (its grant covers
// loop.log.<service>.>), and keeps a copy in the world's recorder.
type servicePublisher struct {
	keep *eventlog.Recorder
	conn *bus.Conn
}

func (p servicePublisher) PublishLog(ctx context.Context, subject string, data []byte) error {
	_ = p.keep.PublishLog(ctx, subject, data)
	return p.conn.PublishCore(bus.Message{Subject: subject, Data: data})
}

// loopLog keeps the records read back from the LOOP_LOG stream.
type loopLog struct {
	mu   sync.Mutex
	recs []eventlog.Record
}

// follow reads loop.log.> from the stream's first record until ctx ends,
// as `the-loop events --follow` does.
func (l *loopLog) follow(ctx context.Context, t testing.TB, conn *bus.Conn) {
	err := conn.TailLog(ctx, bus.TailOptions{Last: 1 << 30}, func(r bus.LogRecord) error {
		var rec eventlog.Record
		if err := json.Unmarshal(r.Data, &rec); err != nil {
			return fmt.Errorf("loop.log record %d: %w", r.Seq, err)
		}
		l.mu.Lock()
		l.recs = append(l.recs, rec)
		l.mu.Unlock()
		return nil
	})
	if err != nil && ctx.Err() == nil {
		t.Errorf("following loop.log: %v", err)
	}
}

// find returns the records called name whose fields hold every pair of
// match (compared as printed), as eventlog.Recorder.Find does.
func (l *loopLog) find(name string, match map[string]any) []eventlog.Record {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []eventlog.Record
next:
	for _, x := range l.recs {
		if x.Event != name {
			continue
		}
		for k, v := range match {
			if fmt.Sprint(x.Fields[k]) != fmt.Sprint(v) {
				continue next
			}
		}
		out = append(out, x)
	}
	return out
}

// logDump is the event log as JSON lines, for a failed test's output.
func logDump(r *eventlog.Recorder) string {
	var b strings.Builder
	for _, x := range r.Since(0) {
		j, _ := json.Marshal(x)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// baseConfig is the operator config of these tests: alice, bob and the
// grants of a Slack channel that may do everything (socket mode, so gate
// buttons are rendered), subscribed to the comments, the ask, the graph's
// notifications and replies.
func baseConfig(t testing.TB) *config.Config {
	dir, problems := identity.New([]identity.Person{
		{GitHub: alice, Slack: aliceSlack, Name: "Alice"},
		{Slack: bobSlack, Name: "Bob"},
	})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	cfg := config.Default()
	cfg.Routing.AuthorizedUsers = dir
	s := &cfg.Channels.Slack
	s.Enabled = true
	s.Channel = channel
	s.Read.Mode = config.ReadSocket
	s.Subscribe = []catalog.Type{catalog.SessionAwaitingInput, catalog.CommentHuman, catalog.CommentAgent,
		catalog.DecisionPending, catalog.PhaseApprovalPending, catalog.PRReviewPending, catalog.ConflictEscalated,
		catalog.WorkItemComplete}
	s.Publish = []catalog.Type{catalog.WorkItemReply, catalog.GateFeedback, catalog.ControlCommand, catalog.WorkItemCreate}
	s.MaxChars = 120
	s.Kickoff = config.Kickoff{Repo: repo, Labels: []string{"the-loop", "from-slack"}}
	return cfg
}

// worldOptions shape a world beyond its operator config.
type worldOptions struct {
	// faults runs the dispatcher's tmux through a wrapper that fails a tmux
	// command while the file fail-<command> exists in w.faults (a tmux that
	// breaks under a running dispatcher).
	faults bool
	// unpaced lifts GitHub's secondary limits (80 content writes a minute
	// and 500 an hour per credential) on both sides: the ledger-writer's
	// pacing under them, and the GitHub fake's enforcing of them. A
	// benchmark of the pipeline's own latency keeps that designed wait off
	// its figures, as it keeps the Slack renderer's. Lifting the pacer
	// alone would not: the fake would refuse what the pacer let through
	// (403 and a Retry-After), and the figures would hold GitHub's
	// penalty, which a paced deployment never pays.
	unpaced bool
}

func newWorld(t testing.TB, edit ...func(*config.Config)) *world {
	t.Helper()
	return newWorldWith(t, worldOptions{}, edit...)
}

func newWorldWith(t testing.TB, o worldOptions, edit ...func(*config.Config)) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("in-process end-to-end: needs JetStream, tmux and the fakes")
	}
	// Sessions' HOME is the test's own: the dispatcher answers Claude
	// Code's first-run questions in it, never in the user's.
	t.Setenv("HOME", t.TempDir())
	w := &world{t: t, work: t.TempDir(), agent: t.TempDir(), loopLog: &loopLog{}}
	socket := tmuxtest.Dir(t) // skips without tmux
	w.tmuxDir = socket
	tmuxBinary := ""
	if o.faults {
		w.faults = t.TempDir()
		tmuxBinary = filepath.Join(w.faults, "tmux")
		script := fmt.Sprintf("#!/bin/sh\nfor a in \"$@\"; do\n  if [ -e %q/\"fail-$a\" ]; then echo \"tmux $a: injected failure\" >&2; exit 1; fi\ndone\nexec tmux \"$@\"\n", w.faults)
		if err := os.WriteFile(tmuxBinary, []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// Authorization on, as under `the-loop up`: every service connects as
	// its own identity, so the whole story runs inside the grants; the
	// test itself reads and writes as the operator.
	topo := bustest.FastTopology(partitions)
	// The topology's caps (about 7 GiB) are reserved up front; what the
	// world writes is a few megabytes, so the store's cap is set above
	// them rather than read off a test machine's free disk, with room for
	// a benchmark's baseline streams beside them.
	w.srv = bustest.StartServer(t, bustest.Options{InProcessOnly: true, Auth: true, Topology: &topo, MaxStore: 16 << 30})
	w.srv.Provision(t, topo)
	w.conn = w.srv.Connect(t, "inproc-test")
	w.logs = &eventlog.Recorder{}
	followCtx, stopFollowing := context.WithCancel(context.Background())
	followed := make(chan struct{})
	go func() { defer close(followed); w.loopLog.follow(followCtx, t, w.conn) }()
	t.Cleanup(func() { stopFollowing(); <-followed })
	cfg := baseConfig(t)
	for _, f := range edit {
		f(cfg)
	}
	w.cfg.Store(cfg)

	var ghOpts []ghfake.Option
	if o.unpaced {
		ghOpts = append(ghOpts, ghfake.WithSecondaryLimits(0, 0))
	}
	w.gh = ghfake.New(t, ghOpts...)
	w.gh.AddRepo(repo)
	w.gh.AddToken(ghToken, ledgerLogin)
	w.gh.SetAuthorAssociation(repo, alice, "OWNER")
	w.gh.SetAuthorAssociation(repo, carol, "MEMBER")
	w.slack = slackfake.New(t, slackfake.WithChannels(channel))
	w.sock = socketfake.New(t, socketfake.WithAPI(w.slack.URL()))

	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := dispatcher.ClaudeCode(exe, map[string]string{tmuxtest.EnvDir: w.agent})

	reg := prometheus.NewRegistry()
	metrics, err := bus.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ready := httpserver.NewReadiness()
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	if os.Getenv("LOOP_TEST_VERBOSE") != "" {
		log = slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	type svc struct {
		name string
		run  func(context.Context) error
	}
	var svcs []svc
	var ingress *ingressgithub.Service
	// The start order and constructors of cmd/the-loop/host.go; only the
	// pacing of the Slack renderer is shortened.
	for _, name := range []string{ledgerwriter.Name, slackrenderer.Name, dispatcher.Name, ingressgithub.Name, ingressslack.Name} {
		conn := w.srv.ConnectAs(t, name, name)
		deps := service.Deps{
			Conn:       conn,
			Log:        log.With("service", name),
			Events:     eventlog.New(name, log.With("service", name), servicePublisher{w.logs, conn}),
			Registry:   reg,
			Ready:      ready,
			Partitions: partitions,
			Metrics:    metrics,
			Config:     w.cfg.Load,
		}
		github := config.GitHub{
			Token: config.NewSecret(ghToken), APIURL: w.gh.URL() + "/", Login: ledgerLogin,
			EnvelopeKey: config.NewSecret(envelopeKey),
		}
		slack := config.Slack{BotToken: config.NewSecret(slackfake.Token), APIURL: w.sock.URL()}
		var r interface{ Run(context.Context) error }
		switch name {
		case ledgerwriter.Name:
			cfg := ledgerwriter.DefaultConfig()
			cfg.GitHub = github
			if o.unpaced {
				cfg.WritesPerMinute, cfg.WritesPerHour = 1<<30, 1<<30
			}
			r, err = ledgerwriter.New(deps, cfg)
		case slackrenderer.Name:
			cfg := slackrenderer.DefaultConfig()
			cfg.Slack, cfg.PostInterval = slack, 20*time.Millisecond
			r, err = slackrenderer.New(deps, cfg)
		case dispatcher.Name:
			r, err = dispatcher.New(deps, dispatcher.Config{}, dispatcher.WithSettings(dispatcher.Settings{
				Harness: h, TmuxBinary: tmuxBinary, TmuxDir: socket, Host: "inproc", Workdir: w.work,
				Label: armLabel, SpawnOnUnmatched: dispatcher.SpawnLabeled, ResumeProbe: -1,
				Workspace: dispatcher.WorkspaceConfig{Strategy: dispatcher.WorkspaceDir},
			}))
		case ingressgithub.Name:
			cfg := ingressgithub.DefaultConfig()
			cfg.GitHub, cfg.Mode = github, string(ingressgithub.ModeWebhook)
			cfg.WebhookSecret, cfg.WebhookAddr = config.NewSecret(webhookSecret), "127.0.0.1:0"
			ingress, err = ingressgithub.New(deps, cfg, func(o *ingressgithub.Options) { o.RequireWebhookSecret = true })
			r = ingress
		case ingressslack.Name:
			cfg := ingressslack.DefaultConfig()
			cfg.Slack, cfg.AppToken, cfg.EventsAddr = slack, config.NewSecret(socketfake.AppToken), "127.0.0.1:0"
			r, err = ingressslack.New(deps, cfg)
		}
		if err != nil {
			cancel()
			t.Fatalf("%s: %v", name, err)
		}
		svcs = append(svcs, svc{name, r.Run})
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(svcs))
	for _, s := range svcs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.run(ctx); err != nil {
				errs <- fmt.Errorf("%s: %w", s.name, err)
			}
		}()
	}
	t.Cleanup(func() {
		// GitHub stops delivering first: a webhook in flight finishes, none
		// starts, and none is sent to a stopped ingress.
		w.relayMu.Lock()
		w.closing.Store(true)
		w.relayMu.Unlock()
		w.relays.Wait()
		cancel()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(wait):
			t.Error("the services did not stop")
		}
		close(errs)
		for err := range errs {
			t.Errorf("Run: %v", err)
		}
		if t.Failed() {
			t.Logf("event log:\n%s", logDump(w.logs))
		}
	})
	actx, acancel := context.WithTimeout(ctx, wait)
	addr := ingress.WebhookAddr(actx)
	acancel()
	if addr == nil {
		t.Fatal("ingress-github's webhook is not listening")
	}
	w.hookAt = "http://" + addr.String() + ingressgithub.WebhookPath
	w.gh.AfterWrite(w.relay)
	w.sock.WaitConnected(t, 1, wait)
	testkit.WaitWithin(w.t, wait, "every service ready", func() bool { return len(ready.Check()) == 0 })
	return w
}

// agentSession is the session endpoint's client as the agent session of ref
// holds it: the endpoint and token in the environment its last boot
// recorded.
func (w *world) agentSession(ref string) sessionapi.Client {
	w.t.Helper()
	var c sessionapi.Client
	testkit.WaitWithin(w.t, wait, "a session of "+ref+" with an endpoint token", func() bool {
		for _, b := range tmuxtest.Boots(w.t, w.agent) {
			tok := b.Env[dispatcher.EnvSessionToken]
			if r, ok := sessionapi.TokenRef(tok); ok && r == ref {
				c = sessionapi.Client{URL: b.Env[dispatcher.EnvSessionURL], Token: tok}
			}
		}
		return c.Token != ""
	})
	return c
}

// update changes the live config, as a reload of the operator file does.
func (w *world) update(f func(*config.Config)) {
	c := *w.cfg.Load()
	c.Channels.Slack.Publish = append([]catalog.Type(nil), c.Channels.Slack.Publish...)
	f(&c)
	w.cfg.Store(&c)
}

// waitLog waits for an event-log record called name holding match, read
// back from loop.log.
func (w *world) waitLog(name string, match map[string]any) eventlog.Record {
	w.t.Helper()
	var got []eventlog.Record
	testkit.WaitWithin(w.t, wait, fmt.Sprintf("%s %v on loop.log", name, match), func() bool {
		got = w.loopLog.find(name, match)
		return len(got) > 0
	})
	return got[0]
}

// ---- GitHub: the fake's state, delivered as signed webhooks ----

func sign(secret string, body []byte) string { return ghfake.SignWebhook(secret, body) }

// post delivers one webhook with the given signature header value and
// returns the status.
func (w *world) post(event string, body []byte, signature string) int {
	w.t.Helper()
	st, _ := w.postID(event, body, signature)
	return st
}

// postID is post, also returning the delivery id (X-GitHub-Delivery).
func (w *world) postID(event string, body []byte, signature string) (int, string) {
	w.t.Helper()
	delivery := fmt.Sprintf("inproc-%d-%d", time.Now().UnixNano(), w.seq.Add(1))
	req, err := http.NewRequest(http.MethodPost, w.hookAt, bytes.NewReader(body))
	if err != nil {
		w.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", event)
	req.Header.Set("X-GitHub-Delivery", delivery)
	if signature != "" {
		req.Header.Set("X-Hub-Signature-256", signature)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		w.t.Errorf("webhook %s: %v", event, err)
		return 0, delivery
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, delivery
}

// webhook delivers a signed webhook, as GitHub does, and checks GitHub's
// delivery was taken (2xx).
func (w *world) webhook(event string, body []byte) int {
	w.t.Helper()
	st := w.post(event, body, sign(webhookSecret, body))
	if st/100 != 2 {
		w.t.Errorf("webhook %s answered %d", event, st)
	}
	return st
}

// commentHook is the issue_comment "created" delivery GitHub sends for c.
func (w *world) commentHook(c ghfake.Comment) []byte { return w.gh.CommentWebhook(c) }

// issueHook is an issues delivery for is (opened or labeled).
func (w *world) issueHook(action string, is ghfake.Issue, sender, label string) []byte {
	return w.gh.IssueWebhook(action, is, sender, label)
}

// relay is the GitHub side of the world: every comment or issue the
// ledger-writer writes is delivered to ingress-github as GitHub would
// deliver it, signed, in write order.
func (w *world) relay(wr ghfake.Write) {
	if f, ok := w.elsewhere.Load(wr.Repo); ok {
		f.(func(ghfake.Write))(wr)
		return
	}
	w.relayMu.Lock()
	if w.closing.Load() {
		w.relayMu.Unlock()
		return
	}
	w.relays.Add(1)
	w.relayMu.Unlock()
	go func() {
		defer w.relays.Done()
		w.relayMu.Lock()
		defer w.relayMu.Unlock()
		if w.closing.Load() {
			return
		}
		switch wr.Kind {
		case ghfake.WriteComment:
			c, ok := w.gh.Comment(wr.ID)
			if ok {
				w.webhook("issue_comment", w.commentHook(c))
			}
		case ghfake.WriteIssue:
			if is, ok := w.gh.Issue(wr.Repo, wr.IssueNumber); ok {
				w.webhook("issues", w.issueHook("opened", is, wr.Login, ""))
			}
		}
	}()
}

// comment is a person commenting on the issue on GitHub: the fake stores it
// and GitHub delivers the webhook.
func (w *world) comment(number int, login, body string) ghfake.Comment {
	w.t.Helper()
	c, _ := w.commentID(number, login, body)
	return c
}

// commentID is comment, also returning the webhook's delivery id.
func (w *world) commentID(number int, login, body string) (ghfake.Comment, string) {
	w.t.Helper()
	c := w.gh.AddComment(repo, number, login, body)
	w.relayMu.Lock()
	defer w.relayMu.Unlock()
	hook := w.commentHook(c)
	st, delivery := w.postID("issue_comment", hook, sign(webhookSecret, hook))
	if st/100 != 2 {
		w.t.Errorf("webhook issue_comment answered %d", st)
	}
	return c, delivery
}

func ref(number int) string { return fmt.Sprintf("github:%s#%d", repo, number) }

// ---- the work item's graph and session ----

func (w *world) state(r string) *graph.State {
	w.t.Helper()
	store, err := graphstate.Open(context.Background(), w.conn)
	if err != nil {
		w.t.Fatal(err)
	}
	st, _, err := store.Get(context.Background(), r)
	if err != nil {
		w.t.Fatal(err)
	}
	return st
}

// waitNode waits until r's graph is at node.
func (w *world) waitNode(r, node string) *graph.State {
	w.t.Helper()
	var st *graph.State
	testkit.WaitWithin(w.t, wait, r+" at "+node, func() bool {
		st = w.state(r)
		return st != nil && st.Current == node
	})
	return st
}

// start opens issue N armed with the auto-execute label and starts it
// with alice's start comment, as a person does on GitHub; it returns once the
// session runs and the graph waits at phase selection, with the Slack thread
// bound (the decision-pending ping started it).
func (w *world) start(title string) (int, string) {
	w.t.Helper()
	is := w.gh.AddIssue(repo, alice, title, "Please do the thing.", armLabel)
	r := ref(is.Number)
	w.webhook("issues", w.issueHook("labeled", is, alice, armLabel))
	w.waitLog("dispatch.dropped", map[string]any{"work_item": r, "reason": dispatcher.DropAwaitingStart})
	w.comment(is.Number, alice, "the-loop start")
	w.waitLog("session.spawned", map[string]any{"work_item": r})
	w.waitNode(r, "phase-selection")
	w.thread(r)
	return is.Number, r
}

// toGate drives a started work item to its requirements-approval gate:
// alice's execute comment passes phase selection, the agent writes
// requirements.md and says its node is done.
func (w *world) toRequirementsGate(number int, r string, artifact string) {
	w.t.Helper()
	w.comment(number, alice, "the-loop execute")
	w.waitNode(r, "requirements")
	w.writeArtifact(r, "requirements.md", artifact)
	w.complete(r)
	w.waitNode(r, "requirements-approval")
}

// specDir is where work item r's session keeps its artifacts: the spec
// directory of its own workspace, as the session registry records it.
func (w *world) specDir(r string) string {
	w.t.Helper()
	store, err := sessions.Open(context.Background(), w.conn)
	if err != nil {
		w.t.Fatal(err)
	}
	rec, _, err := store.Get(context.Background(), r)
	if err != nil || rec.Session == nil || rec.Session.SpecDir == "" {
		w.t.Fatalf("%s has no session with a spec directory (%v)", r, err)
	}
	if err := os.MkdirAll(rec.Session.SpecDir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	return rec.Session.SpecDir
}

func (w *world) writeArtifact(r, name, text string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.specDir(r), name), []byte(text), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) readArtifact(r, name string) string {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.specDir(r), name))
	if err != nil {
		w.t.Fatal(err)
	}
	return string(b)
}

// complete is the agent's `the-loop graph complete REF`: what the CLI verb
// asks of the session endpoint, with the session's own token.
func (w *world) complete(r string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := w.agentSession(r).Complete(ctx, r, nil); err != nil {
		w.t.Fatalf("graph complete %s: %v", r, err)
	}
}

// inputs are the prompts typed into the sessions, in order.
func (w *world) inputs() []string {
	var out []string
	for _, in := range tmuxtest.Inputs(w.t, w.agent) {
		out = append(out, in.Text)
	}
	return out
}

// ---- Slack ----

// thread is the Slack thread bound to r (waiting for the binding).
func (w *world) thread(r string) string {
	w.t.Helper()
	kv, err := w.conn.KV(context.Background(), bus.BucketThreads)
	if err != nil {
		w.t.Fatal(err)
	}
	store := threads.New(kv)
	var ts string
	testkit.WaitWithin(w.t, wait, "the Slack thread of "+r, func() bool {
		var ok bool
		ts, ok, err = store.ThreadFor(context.Background(), channel, r)
		return err == nil && ok
	})
	return ts
}

// messageText is everything a person sees of m: its fallback text and its
// blocks.
func messageText(m slackfake.Message) string { return m.Text + "\n" + string(m.Blocks) }

// waitSlack waits for a message in the thread root (or, root "", at top
// level) that contains every one of parts, and returns it.
func (w *world) waitSlack(root string, parts ...string) slackfake.Message {
	w.t.Helper()
	var found slackfake.Message
	testkit.WaitWithin(w.t, wait, fmt.Sprintf("a Slack message with %q", parts), func() bool {
		var msgs []slackfake.Message
		if root == "" {
			msgs = w.slack.Messages(channel)
		} else {
			msgs = w.slack.Thread(channel, root)
		}
		for _, m := range msgs {
			text := messageText(m)
			ok := true
			for _, p := range parts {
				if !strings.Contains(text, p) {
					ok = false
					break
				}
			}
			if ok {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

// slackHas reports whether any message of the channel contains s.
func (w *world) slackHas(s string) bool {
	for _, m := range w.slack.Messages(channel) {
		if strings.Contains(messageText(m), s) {
			return true
		}
	}
	return false
}

// nextTS is a fresh Slack message ts.
func (w *world) nextTS() string {
	n := w.seq.Add(1)
	return fmt.Sprintf("%d.%06d", time.Now().Unix(), n)
}

// say is a Slack member's message over Socket Mode: a reply in thread root,
// or a top-level message when root is "". It returns the message's ts once
// Slack's envelope was acknowledged (the message is settled: published or
// dropped).
func (w *world) say(user, root, text string) string {
	w.t.Helper()
	ts := w.nextTS()
	id := w.sock.Send(w.t, "events_api", socketfake.MessageEvent(channel, user, text, ts, root))
	w.sock.WaitAck(w.t, id, wait)
	return ts
}

// pressButton is a Slack member pressing the button actionID of message msg
// of thread root, with the value the renderer drew on it (the value msg had
// when it was read: a person whose Slack has not refreshed still sees it).
func (w *world) pressButton(user string, msg slackfake.Message, root, actionID string) {
	w.t.Helper()
	value, ok := slackmsg.ButtonValue(msg.Blocks, actionID)
	if !ok {
		w.t.Fatalf("message %s has no %s button:\n%s", msg.TS, actionID, msg.Blocks)
	}
	w.press(user, msg, root, actionID, value)
}

// press is a Slack member pressing a button (actionID, value) on message
// msg of thread root.
func (w *world) press(user string, msg slackfake.Message, root, actionID, value string) {
	w.t.Helper()
	p := socketfake.Press{Channel: channel, User: user, MessageTS: msg.TS, MessageUser: msg.User, MessageBotID: msg.BotID,
		Root: root, ActionID: actionID, Value: value, ActionTS: w.nextTS()}
	id := w.sock.Send(w.t, "interactive", p.Payload())
	w.sock.WaitAck(w.t, id, wait)
}
