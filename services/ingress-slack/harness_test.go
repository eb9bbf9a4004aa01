package ingressslack

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
	"net/url"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/socketfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/slackmsg"
	"github.com/the-loop/bus/pkg/threads"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

const (
	parts         = 2
	testChannel   = "C0LOOP"
	testSecret    = "8f742231b10e8888abcd99yyyzzz85a5"
	kickoffRepo   = "octo/repo"
	waitFor       = 30 * time.Second
	refOne        = "github:octo/repo#1"
	refGate       = "github:octo/repo#2"
	thread1, gate = "1700000000.000100", "1700000000.000200"
)

// people: alice acts everywhere, slackonly has no GitHub login (decision 015),
// mallory is nobody. The ids of the shared payloads are authorized too.
var people = []identity.Person{
	{GitHub: "alice", Slack: "UALICE", Name: "Alice"},
	{Slack: "USLACKONLY", Name: "Slack Only"},
	{GitHub: "octocat", Slack: "W111", Name: "Octo"},
	{GitHub: "hubot", Slack: "W222"},
	{GitHub: "monalisa", Slack: "U111"},
}

// env is one or more ingress-slack services on a real in-process JetStream,
// a Slack Web API fake, a Socket Mode fake in front of it, and a consumer
// (the ledger-writer's real partitioned consumers) collecting what reaches
// the inbox.
type env struct {
	t     testing.TB
	srv   *bustest.Server
	conn  *bus.Conn
	slack *slackfake.Server
	sock  *socketfake.Server
	logs  *testkit.Logs

	cfgMu sync.Mutex
	cfg   *config.Config

	mu     sync.Mutex
	errs   []string
	events map[string]*loopv1.Event
	change chan struct{}
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv := bustest.StartServer(t, bustest.Options{InProcessOnly: true})
	srv.Provision(t, bustest.FastTopology(parts))
	e := &env{t: t, srv: srv, conn: srv.Connect(t, "ingress-slack-test"), logs: &testkit.Logs{},
		events: map[string]*loopv1.Event{}, change: make(chan struct{})}
	e.slack = slackfake.New(t)
	e.sock = socketfake.New(t, socketfake.WithAPI(e.slack.URL()))
	dir, problems := identity.New(people)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	cfg := config.Default()
	cfg.Routing.AuthorizedUsers = dir
	cfg.Channels.Slack.Enabled = true
	cfg.Channels.Slack.Channel = testChannel
	cfg.Channels.Slack.Publish = []catalog.Type{catalog.WorkItemReply, catalog.GateFeedback, catalog.ControlCommand, catalog.WorkItemCreate}
	cfg.Channels.Slack.Read.Mode = config.ReadSocket
	cfg.Channels.Slack.Kickoff = config.Kickoff{Repo: kickoffRepo, Labels: []string{"the-loop"}}
	e.cfg = cfg
	e.collect()
	e.bind(testChannel, thread1, refOne)
	e.bind(testChannel, gate, refGate)
	e.setGraph(refGate, true)
	return e
}

// update changes the live config, as a reload does.
func (e *env) update(f func(*config.Config)) {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	c := *e.cfg
	c.Channels.Slack.Publish = append([]catalog.Type(nil), c.Channels.Slack.Publish...)
	f(&c)
	e.cfg = &c
}

func (e *env) config() *config.Config {
	e.cfgMu.Lock()
	defer e.cfgMu.Unlock()
	return e.cfg
}

// svc is one running service and its own registry and readiness.
type svc struct {
	*Service
	reg   *prometheus.Registry
	ready *httpserver.Readiness
	http  *httptest.Server
	stop  func()
}

type svcOption func(*Config, *Options)

func (e *env) start(opts ...svcOption) *svc {
	e.t.Helper()
	reg, ready := prometheus.NewRegistry(), httpserver.NewReadiness()
	log := slog.New(e.logs.Handler())
	deps := service.Deps{
		Conn: e.conn, Log: log, Events: eventlog.New(Name, log, nil), Registry: reg, Ready: ready,
		Partitions: parts, Config: e.config,
	}
	cfg := Config{
		Slack:         config.Slack{BotToken: config.NewSecret(slackfake.Token), APIURL: e.sock.URL()},
		AppToken:      config.NewSecret(socketfake.AppToken),
		SigningSecret: config.NewSecret(testSecret),
		EventsAddr:    "127.0.0.1:0",
	}
	o := DefaultOptions()
	o.SuperviseEvery = 50 * time.Millisecond
	o.PollInterval = 100 * time.Millisecond
	o.PingInterval = 5 * time.Second
	o.RestartBackoff = 200 * time.Millisecond
	for _, f := range opts {
		f(&cfg, &o)
	}
	s, err := New(deps, cfg, func(p *Options) { *p = o })
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	h := httptest.NewServer(s.Handler())
	out := &svc{Service: s, reg: reg, ready: ready, http: h}
	var once sync.Once
	out.stop = func() {
		once.Do(func() {
			h.Close()
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("Run = %v, want nil", err)
				}
			case <-time.After(waitFor):
				e.t.Errorf("Run did not return after cancel")
			}
		})
	}
	e.t.Cleanup(out.stop)
	return out
}

// waitReady waits until /readyz would say ready.
func (e *env) waitReady(s *svc) {
	e.t.Helper()
	testkit.WaitWithin(e.t, waitFor, "the service to be ready", func() bool { return len(s.ready.Check()) == 0 })
}

func (e *env) kv(bucket string) *bus.KV {
	e.t.Helper()
	kv, err := e.conn.KV(context.Background(), bucket)
	if err != nil {
		e.t.Fatal(err)
	}
	return kv
}

func (e *env) bind(channel, ts, ref string) {
	e.t.Helper()
	if err := threads.New(e.kv(bus.BucketThreads)).Bind(context.Background(), channel, ts, ref); err != nil {
		e.t.Fatal(err)
	}
}

// setGraph stores ref's graph state as the dispatcher will (KV graph, key
// catalog.SubjectKey(ref)): at the requirements-approval gate, or at the
// agent's requirements node.
func (e *env) setGraph(ref string, atGate bool) {
	e.t.Helper()
	g, _ := graph.Builtin(graph.WorkItemGraph)
	at := time.Unix(1700000000, 0)
	st, _, err := graph.New(g, ref, at)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := st.Advance(g, graph.OutcomeExecute, at); err != nil {
		e.t.Fatal(err)
	}
	if atGate {
		if _, err := st.Advance(g, graph.OutcomeDone, at); err != nil {
			e.t.Fatal(err)
		}
	}
	b, _ := st.Encode()
	if _, err := e.kv(bus.BucketGraph).Put(context.Background(), catalog.SubjectKey(ref), b); err != nil {
		e.t.Fatal(err)
	}
}

// visit is the gate visit ref's graph state in KV waits at ("" at none).
func (e *env) visit(ref string) string {
	e.t.Helper()
	ent, err := e.kv(bus.BucketGraph).Get(context.Background(), catalog.SubjectKey(ref))
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := graph.Decode(ent.Value)
	if err != nil {
		e.t.Fatal(err)
	}
	g, _ := graph.Builtin(graph.WorkItemGraph)
	return st.GateVisit(g)
}

// gateValue is the value the renderer draws on ref's gate buttons now.
func (e *env) gateValue(ref string) string {
	e.t.Helper()
	v := e.visit(ref)
	if v == "" {
		e.t.Fatalf("%s waits at no gate", ref)
	}
	return slackmsg.GateValue{Ref: ref, Visit: v}.String()
}

// collect runs the ledger-writer's real partitioned consumers of the inbox
// and keeps every event by id, complaining about any id seen twice.
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
		e.mu.Lock()
		defer e.mu.Unlock()
		for _, s := range e.errs {
			t.Error(s)
		}
	})
}

// waitEvent waits until id reached the inbox and returns it.
func (e *env) waitEvent(id string) *loopv1.Event {
	e.t.Helper()
	deadline := time.After(waitFor)
	for {
		e.mu.Lock()
		ev, ok := e.events[id]
		ch := e.change
		e.mu.Unlock()
		if ok {
			return ev
		}
		select {
		case <-ch:
		case <-deadline:
			e.t.Fatalf("event %s did not reach the inbox; log: %s", id, e.logs.String())
		}
	}
}

// stored is how many messages the inbox has ever stored (its last
// sequence): WorkQueue consumption removes messages but not sequences, so
// this counts publications exactly.
func (e *env) stored() uint64 {
	e.t.Helper()
	st, err := e.conn.StreamStats(context.Background(), bus.StreamInbox)
	if err != nil {
		e.t.Fatal(err)
	}
	return st.LastSeq
}

// sign computes Slack's v0 signature.
func sign(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(m, "v0:%s:", ts)
	m.Write(body)
	return "v0=" + hex.EncodeToString(m.Sum(nil))
}

type response struct {
	status int
	body   string
}

// post sends body to path on s, signed now with the right secret.
func (e *env) post(s *svc, path string, body []byte) response {
	e.t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	return e.postWith(s, path, body, map[string]string{
		"X-Slack-Request-Timestamp": ts,
		"X-Slack-Signature":         sign(testSecret, ts, body),
	})
}

func (e *env) postWith(s *svc, path string, body []byte, headers map[string]string) response {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.http.URL+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	ctype := "application/json"
	if path == PathInteractions {
		ctype = "application/x-www-form-urlencoded"
	}
	req.Header.Set("Content-Type", ctype)
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{status: resp.StatusCode, body: string(b)}
}

// form wraps an interactivity payload as Slack posts it.
func form(payload []byte) []byte {
	return []byte(url.Values{"payload": {string(payload)}}.Encode())
}

// messageBody is an Events API body carrying one message event.
func messageBody(eventID string, ev map[string]any) []byte {
	ev["type"] = "message"
	b, _ := json.Marshal(map[string]any{
		"token": "ignored", "team_id": "T0LOOP", "api_app_id": "A0LOOP", "type": "event_callback",
		"event_id": eventID, "event_time": 1700000000, "event": ev,
	})
	return b
}

// pressBody is a block_actions payload: user pressed actionID/value on the
// message ts (thread root root, "" for a top-level message).
func pressBody(user, channel, ts, root, actionID, value string) []byte {
	msg := map[string]any{"type": "message", "ts": ts, "user": slackfake.BotUserID, "bot_id": slackfake.BotID}
	container := map[string]any{"type": "message", "message_ts": ts, "channel_id": channel}
	if root != "" {
		msg["thread_ts"], container["thread_ts"] = root, root
	}
	b, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user}, "channel": map[string]any{"id": channel},
		"container": container, "message": msg, "trigger_id": "1.2.3", "api_app_id": "A0LOOP",
		"actions": []map[string]any{{"type": "button", "action_id": actionID, "block_id": "the-loop.actions",
			"value": value, "text": map[string]any{"type": "plain_text", "text": "label"}, "action_ts": "1700000100.000001"}},
	})
	return b
}

// outcome is what a test expects of one message: an event of a type, or a
// drop reason.
type outcome struct {
	typ    catalog.Type
	reason string
}

func (o outcome) String() string {
	if o.reason != "" {
		return "dropped:" + o.reason
	}
	return "published:" + string(o.typ)
}

// settledSince reads what the records from log index i say happened to one
// message.
func (e *env) settledSince(i int) (outcome, map[string]any) {
	e.t.Helper()
	recs := e.logs.Since(i, "channel.dropped", "bus.published")
	if len(recs) != 1 {
		e.t.Fatalf("want exactly one channel.dropped or bus.published record, got %d: %v", len(recs), recs)
	}
	r := recs[0]
	if r["event"] == "channel.dropped" {
		return outcome{reason: fmt.Sprint(r["reason"])}, r
	}
	return outcome{typ: catalog.Type(fmt.Sprint(r["event_type"]))}, r
}

func metric(t testing.TB, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

type cfgT = config.Config

var noSecret = config.Secret{}

func secret(v string) config.Secret { return config.NewSecret(v) }

func (o outcome) published() bool { return o.reason == "" && o.typ != "" }

// httptestServerAt stands for a server already listening at addr (the
// service's own events listener), for postWith.
func httptestServerAt(addr string) *httptest.Server { return &httptest.Server{URL: "http://" + addr} }

func (e *env) has(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.events[id]
	return ok
}
