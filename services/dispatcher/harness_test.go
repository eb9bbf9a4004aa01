package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

func TestMain(m *testing.M) {
	// Run as the-loop by a sandboxed session (sandbox_test.go), before the
	// stand-in: the session's environment names the stand-in's directory.
	maybeRunLoopVerb()
	tmuxtest.MaybeRunStandIn()
	os.Exit(m.Run())
}

const (
	partitions = 2
	alice      = "alice" // authorized
	mallory    = "mallory"
	hostA      = "host-a"
)

// env is one test's world: a real in-process JetStream, a private tmux
// server, the stand-in harness writing what it receives under dir, and the
// dispatcher consuming the event stream.
type env struct {
	t    *testing.T
	srv  *bustest.Server
	pub  *bus.Conn
	cfg  atomic.Pointer[config.Config]
	recs *eventlog.Recorder
	logs *testkit.SyncBuffer
	dir  string
	// tmuxDir holds the sessions' tmux servers' sockets.
	tmuxDir string
	svc     *Service
	store   *sessions.Store
	ready   *httpserver.Readiness
}

// standIn is the stand-in harness: this test binary, run as Claude Code
// would be, writing what it receives under dir.
func standIn(t testing.TB, dir string) *agent.Command {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h := agent.Claude()
	h.Binary = exe
	h.Environment = map[string]string{tmuxtest.EnvDir: dir}
	return h
}

func newEnv(t *testing.T, mod func(*Settings)) *env {
	t.Helper()
	if testing.Short() {
		t.Skip("needs JetStream and tmux")
	}
	// Sessions' HOME is the test's own: the dispatcher answers Claude
	// Code's first-run questions in it, never in the user's.
	t.Setenv("HOME", t.TempDir())
	e := &env{t: t, srv: bustest.NewServer(t), recs: &eventlog.Recorder{}, logs: &testkit.SyncBuffer{}, dir: t.TempDir(), ready: httpserver.NewReadiness()}
	e.tmuxDir = tmuxtest.Dir(t)
	e.srv.Provision(t, bustest.FastTopology(partitions))
	e.pub = e.srv.Connect(t, "dispatcher-test-publisher")
	cfg := config.Default()
	dir, problems := identity.New([]identity.Person{{GitHub: alice, Slack: "U0ALICE"}})
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	cfg.Routing.AuthorizedUsers = dir
	e.cfg.Store(cfg)
	set := Settings{
		Harness: standIn(t, e.dir), TmuxDir: e.tmuxDir, Host: hostA, Workdir: t.TempDir(),
		Workspace:   workspace.Config{Strategy: workspace.Dir},
		ResumeProbe: -1, RecheckEvery: 50 * time.Millisecond,
	}
	if mod != nil {
		mod(&set)
	}
	conn := e.srv.Connect(t, "dispatcher")
	log := slog.New(slog.NewJSONHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	deps := service.Deps{
		Conn: conn, Log: log, Events: eventlog.New(Name, log, e.recs), Registry: prometheus.NewRegistry(),
		Ready: e.ready, Partitions: partitions, Config: e.cfg.Load,
	}
	svc, err := New(deps, Config{}, WithSettings(set))
	if err != nil {
		t.Fatal(err)
	}
	e.svc = svc
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("Run did not return")
		}
		if e.svc.m != nil && bytes.Contains([]byte(e.logs.String()), []byte("unregistered event-log type")) {
			t.Error("the service emitted an unregistered event-log type")
		}
	})
	store, err := sessions.Open(context.Background(), e.pub)
	if err != nil {
		t.Fatal(err)
	}
	e.store = store
	// Tests that call handle directly need the registry Run opens; handle is
	// otherwise reached only through the consumer, which starts after it.
	// A service that cannot run sessions here never opens it.
	if svc.check() == nil {
		testkit.WaitFor(t, "the dispatcher's registry", func() bool { return svc.store.Load() != nil })
	}
	return e
}

// publish puts ev on the event stream as the ledger-writer and
// ingress-github do.
func (e *env) publish(evs ...*loopv1.Event) {
	e.t.Helper()
	for _, ev := range evs {
		m, err := envelope.ToMessage(ev, envelope.Events, "")
		if err != nil {
			e.t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = e.pub.Publish(ctx, bus.FromEnvelope(m))
		cancel()
		if err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) record(ref string) sessions.Record {
	e.t.Helper()
	r, _, err := e.store.Get(context.Background(), ref)
	if err != nil {
		e.t.Fatal(err)
	}
	return r
}

func (e *env) tmuxState(ref string) tmux.State {
	return e.server(ref).Probe(context.Background(), tmux.Target(ref))
}

// server is ref's session's own tmux server.
func (e *env) server(ref string) *tmux.Server {
	return &tmux.Server{Path: e.socketOf(ref)}
}

// socketOf is the socket of ref's session's tmux server.
func (e *env) socketOf(ref string) string { return filepath.Join(e.tmuxDir, tmux.Target(ref)) }

// waitRecord waits for a record called name matching match.
func (e *env) waitRecord(name string, match map[string]any) eventlog.Record {
	e.t.Helper()
	var got []eventlog.Record
	testkit.WaitFor(e.t, fmt.Sprintf("%s %v", name, match), func() bool {
		got = e.recs.Find(name, match)
		return len(got) > 0
	})
	return got[0]
}

// inputsOf are the stand-in's submitted pastes for one session.
func (e *env) inputsOf(sessionID string) []string {
	var out []string
	for _, in := range tmuxtest.Inputs(e.t, e.dir) {
		if in.SessionID == sessionID {
			out = append(out, in.Text)
		}
	}
	return out
}

func (e *env) bootsOf(sessionID string) []tmuxtest.Boot {
	var out []tmuxtest.Boot
	for _, b := range tmuxtest.Boots(e.t, e.dir) {
		if b.SessionID == sessionID {
			out = append(out, b)
		}
	}
	return out
}

const waitLong = 90 * time.Second

var evTime = envelope.NewTime(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))

func person(login string) *loopv1.Actor {
	if login == "" {
		return nil
	}
	return &loopv1.Actor{Github: login}
}

// comment is a comment.human as ingress-github publishes it; actor "" is a
// collaborator's comment (mirrored, never instructing).
func comment(ref string, id int64, actor, body string) *loopv1.Event {
	url := fmt.Sprintf("https://github.com/octo/repo/issues/%d#issuecomment-%d", numberOf(ref), id)
	author := actor
	if author == "" {
		author = "collab"
	}
	return &loopv1.Event{Id: fmt.Sprintf("gh:issue-comment:%d", id), Source: "github", Type: string(catalog.CommentHuman),
		Subject: ref, Time: evTime, Actor: person(actor),
		Ledger: &loopv1.LedgerRef{Repo: repoOf(ref), IssueNumber: numberOf(ref), CommentId: id, Url: url},
		Body: &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: id, Url: url, Author: author,
			AuthorAssociation: "MEMBER", Body: body}}}
}

// activity is a work-item.activity with a webhook payload.
func activity(ref, delivery, event, action string, payload map[string]any) *loopv1.Event {
	payload["action"] = action
	payload["repository"] = map[string]any{"full_name": repoOf(ref)}
	if _, ok := payload["sender"]; !ok {
		payload["sender"] = map[string]any{"login": alice}
	}
	raw, _ := json.Marshal(payload)
	return &loopv1.Event{Id: "gh:" + delivery, Source: "github", Type: string(catalog.WorkItemActivity), Subject: ref,
		Time: evTime, Actor: person(alice),
		Body: &loopv1.Event_GithubActivity{GithubActivity: &loopv1.GitHubActivity{Event: event, Action: action, DeliveryId: delivery, Payload: raw}}}
}

func labeled(ref, delivery string) *loopv1.Event {
	return activity(ref, delivery, "issues", "labeled", map[string]any{
		"label": map[string]any{"name": DefaultLabel},
		"issue": map[string]any{"number": numberOf(ref), "title": "Add a thing", "state": "open",
			"labels": []any{map[string]any{"name": DefaultLabel}}},
	})
}

func closed(ref, delivery string, number int64) *loopv1.Event {
	return activity(ref, delivery, "issues", "closed", map[string]any{
		"issue": map[string]any{"number": number, "title": "Add a thing", "state": "closed"},
	})
}

// relayed is the ledger's read-back of a control.command a channel relayed,
// re-attributed to actor (nil when the envelope's person is not authorized
// and the ledger login is not either).
func relayed(ref string, id int64, actor *loopv1.Actor, text string) *loopv1.Event {
	url := fmt.Sprintf("https://github.com/octo/repo/issues/%d#issuecomment-%d", numberOf(ref), id)
	body := "Relayed from `U0X` on the **slack** channel:\n\n" + text + "\n\n<!-- the-loop:envelope {\"v\":1} -->\n"
	return &loopv1.Event{Id: fmt.Sprintf("gh:issue-comment:%d", id), Source: "github", Type: string(catalog.LedgerRecord),
		Subject: ref, Time: evTime, Actor: actor, CausationId: fmt.Sprintf("slack:Ev%d", id),
		Body: &loopv1.Event_LedgerRecord{LedgerRecord: &loopv1.LedgerRecord{EventId: fmt.Sprintf("slack:Ev%d", id),
			EventType: string(catalog.ControlCommand),
			Comment:   &loopv1.Comment{CommentId: id, Url: url, Author: "the-loop-bot", Body: body}}}}
}

// expected renders what the stand-in must have received for ev, with the
// graph context block the work item's state gives it now: a spawn prompt
// sees the graph just started; an authorized comment reaching a session
// while the work item waits at a human gate was classified by the gate
// first (here, at phase selection without the execute keyword: wait).
func (e *env) expected(ev *loopv1.Event, spawn bool) string {
	e.t.Helper()
	in, ok := e.svc.read(ev)
	if !ok {
		e.t.Fatalf("event %s is not for sessions", ev.GetId())
	}
	g, _ := graph.Builtin(graph.WorkItemGraph)
	if spawn {
		st, _, err := graph.New(g, ev.GetSubject(), time.Now())
		if err != nil {
			e.t.Fatal(err)
		}
		return e.svc.render(in, true, graph.Context(st, g))
	}
	var verdict graph.Outcome
	if st := e.graphState(ev.GetSubject()); st != nil && st.AtHumanGate(g) && in.gate && authorizedGitHub(e.cfg.Load(), in.actor) {
		verdict = graph.OutcomeWait
	}
	return e.expectedWith(ev, verdict)
}

// expectedWith renders ev's prompt with the work item's current graph
// context and the gate verdict given.
func (e *env) expectedWith(ev *loopv1.Event, verdict graph.Outcome) string {
	e.t.Helper()
	in, ok := e.svc.read(ev)
	if !ok {
		e.t.Fatalf("event %s is not for sessions", ev.GetId())
	}
	return e.svc.render(in, false, e.svc.gates.context(context.Background(), ev.GetSubject(), verdict))
}

// graphState is ref's graph state, nil when it has none.
func (e *env) graphState(ref string) *graph.State {
	e.t.Helper()
	store, err := graphstate.Open(context.Background(), e.pub)
	if err != nil {
		e.t.Fatal(err)
	}
	st, _, err := store.Get(context.Background(), ref)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// start arms ref with the label and starts it with alice's start comment,
// returning the live session once its harness is ready for input.
func (e *env) start(ref string, commentID int64) *sessions.Session {
	e.t.Helper()
	e.publish(labeled(ref, fmt.Sprintf("lab-%d", commentID)), comment(ref, commentID, alice, "the-loop start"))
	e.waitRecord("session.spawned", map[string]any{"work_item": ref})
	sess := e.record(ref).Session
	if !sess.Live() {
		e.t.Fatalf("no live session for %s after start", ref)
	}
	testkit.WaitFor(e.t, "the stand-in's boot", func() bool { return len(e.bootsOf(sess.HarnessSessionID)) > 0 })
	return sess
}

// tmuxNewSession starts session name on its own server, whose socket is
// named after it in dir, as the loop would: a leftover where the loop
// would spawn.
func tmuxNewSession(t *testing.T, dir, name string) {
	t.Helper()
	if out, err := exec.Command("tmux", "-S", filepath.Join(dir, name), "new-session", "-d", "-s", name, "--", "sleep", "600").CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
}
