package slackrenderer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/slackmsg"
	"github.com/the-loop/bus/pkg/threads"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

const (
	testChannel = "C0LOOP"
	workItem    = "github:octo/repo#15"
	partitions  = 4
)

// env is one test's world: a real in-process JetStream, the Slack fake, the
// operator config (swappable, as a reload would) and what the services log.
type env struct {
	t   testing.TB
	srv *bustest.Server
	// parts is the partition count provisioned.
	parts int
	fake  *slackfake.Server
	pub   *bus.Conn
	cfg   atomic.Pointer[config.Config]
	reg   *prometheus.Registry
	logs  *testkit.SyncBuffer
	recs  *eventlog.Recorder
	n     atomic.Int64
	// m is the services' metrics (instances share one set of collectors).
	m *metrics
}

func newEnv(t testing.TB, fakeOpts ...slackfake.Option) *env {
	t.Helper()
	return newEnvOn(t, bustest.Options{}, partitions, fakeOpts...)
}

// newEnvOn is newEnv on a server started with sopts, with parts partitions.
func newEnvOn(t testing.TB, sopts bustest.Options, parts int, fakeOpts ...slackfake.Option) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs JetStream and the Slack fake")
	}
	e := &env{t: t, srv: bustest.StartServer(t, sopts), fake: slackfake.New(t, fakeOpts...), parts: parts,
		reg: prometheus.NewRegistry(), logs: &testkit.SyncBuffer{}, recs: &eventlog.Recorder{}}
	e.srv.Provision(t, bustest.FastTopology(parts))
	e.pub = e.srv.Connect(t, "slack-renderer-test-publisher")
	cfg := config.Default()
	cfg.Channels.Slack.Enabled = true
	cfg.Channels.Slack.Channel = testChannel
	e.cfg.Store(cfg)
	t.Cleanup(func() {
		// Secrets never appear in logs or event-log records (SECURITY.md).
		if bytes.Contains(e.logs.Bytes(), []byte(slackfake.Token)) {
			t.Error("the bot token appears in the service's logs")
		}
		raw, _ := json.Marshal(e.recs.Find("channel.posted", nil))
		raw2, _ := json.Marshal(e.recs.Find("channel.post_failed", nil))
		if bytes.Contains(raw, []byte(slackfake.Token)) || bytes.Contains(raw2, []byte(slackfake.Token)) {
			t.Error("the bot token appears in event-log records")
		}
	})
	return e
}

// setSlack edits channels.slack of the config in force; the service reads
// it per event, as after a reload.
func (e *env) setSlack(edit func(*config.SlackChannel)) {
	c := *e.cfg.Load()
	s := c.Channels.Slack
	s.Subscribe = slices.Clone(s.Subscribe)
	s.Publish = slices.Clone(s.Publish)
	edit(&s)
	c.Channels.Slack = s
	e.cfg.Store(&c)
}

// instance is one running renderer: its own connection, as its own process
// would have.
type instance struct {
	svc    *Service
	conn   *bus.Conn
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

type startOpts struct {
	noToken     bool
	afterRecord func(*Service, *bus.Conn, *loopv1.Event)
	// concurrency is LOOP_CONCURRENCY (0: one per partition owned).
	concurrency int
	// identity, with authorization on, is the identity the instance
	// connects as (default the operator, as Connect does).
	identity string
}

func (e *env) start(o startOpts) *instance {
	e.t.Helper()
	name := fmt.Sprintf("slack-renderer-%d", e.n.Add(1))
	conn := e.srv.Connect(e.t, name)
	if o.identity != "" {
		conn = e.srv.ConnectAs(e.t, o.identity, name)
	}
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	cfg := DefaultConfig()
	cfg.APIURL, cfg.PostInterval = e.fake.URL(), 0
	if !o.noToken {
		cfg.BotToken = config.NewSecret(slackfake.Token)
	}
	deps := service.Deps{
		Conn: conn, Log: log, Events: eventlog.New(Name, log, e.recs), Registry: e.reg,
		Ready: httpserver.NewReadiness(), Partitions: e.parts, Concurrency: o.concurrency, Config: e.cfg.Load,
	}
	svc, err := New(deps, cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.m = svc.m
	in := &instance{svc: svc, conn: conn, done: make(chan error, 1)}
	if o.afterRecord != nil {
		svc.afterRecord = func(ev *loopv1.Event) { o.afterRecord(svc, conn, ev) }
	}
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel = cancel
	go func() { in.done <- svc.Run(ctx) }()
	e.t.Cleanup(in.stop)
	return in
}

// stop ends the instance and waits for it (bounded).
func (in *instance) stop() {
	in.once.Do(func() {
		in.cancel()
		select {
		case <-in.done:
		case <-time.After(60 * time.Second):
		}
	})
}

// kill is a crash: the connection goes away under the instance, so nothing
// it does afterwards (KV writes, the ack) reaches the server.
func (in *instance) kill() {
	in.conn.Close()
	in.cancel()
}

// publish fans ev out on the event stream as the ledger-writer does.
func (e *env) publish(ev *loopv1.Event) {
	e.t.Helper()
	m, err := envelope.ToMessage(ev, envelope.Events, "")
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := e.pub.Publish(ctx, bus.FromEnvelope(m)); err != nil {
		e.t.Fatal(err)
	}
}

var evTime = envelope.NewTime(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))

func ask(id, subject, text string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "loop", Type: string(catalog.SessionAwaitingInput), Subject: subject, Time: evTime,
		Ledger: &loopv1.LedgerRef{Repo: "octo/repo", IssueNumber: 15, CommentId: 1, Url: "https://github.com/octo/repo/issues/15#issuecomment-1"},
		Body:   &loopv1.Event_Question{Question: &loopv1.Question{Text: text}}}
}

func note(id string, t catalog.Type, subject string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "loop", Type: string(t), Subject: subject, Time: evTime,
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{Text: "at a gate", Url: "https://github.com/octo/repo/issues/15"}}}
}

// gateNote is the dispatcher's approval ping for the gate visit visit.
func gateNote(id, subject, visit string) *loopv1.Event {
	ev := note(id, catalog.PhaseApprovalPending, subject)
	n := ev.GetNotification()
	n.Node, n.GateVisit = strings.SplitN(visit, ".", 2)[0], visit
	n.Artifact, n.ArtifactExcerpt = "requirements.md", "# Requirements\n\nThe widget SHALL frobnicate."
	return ev
}

func comment(id, subject string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: "github", Type: string(catalog.CommentHuman), Subject: subject, Time: evTime,
		Body: &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 7, Url: "https://github.com/octo/repo/issues/15#issuecomment-7",
			Author: "octocat", AuthorAssociation: "MEMBER", Body: "<!channel> **LGTM**"}}}
}

// eventIDOf reads the event id a message carries in its metadata.
func eventIDOf(m slackfake.Message) string {
	if m.Metadata == nil || m.Metadata.EventType != slackmsg.MetadataEventType {
		return ""
	}
	id, _ := m.Metadata.EventPayload["event_id"].(string)
	return id
}

// ids lists the event ids of msgs in order.
func ids(msgs []slackfake.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = eventIDOf(m)
	}
	return out
}

// checkAllValid runs the Block Kit validator over everything the fake got.
func (e *env) checkAllValid() {
	e.t.Helper()
	for _, m := range e.fake.Messages(testChannel) {
		if m.BotID == "" {
			continue
		}
		raw, _ := json.Marshal(map[string]any{"text": m.Text, "blocks": m.Blocks})
		if err := slackmsg.CheckPayload(raw); err != nil {
			e.t.Errorf("message %s fails the Block Kit check: %v", m.TS, err)
		}
	}
}

// threadOf returns the thread bound to ref in the test channel.
func (e *env) threadOf(ref string) (string, bool) {
	e.t.Helper()
	kv, err := e.pub.KV(context.Background(), bus.BucketThreads)
	if err != nil {
		e.t.Fatal(err)
	}
	ts, ok, err := threads.New(kv).ThreadFor(context.Background(), testChannel, ref)
	if err != nil {
		e.t.Fatal(err)
	}
	return ts, ok
}

const waitLong = 90 * time.Second
