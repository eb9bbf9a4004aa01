package statuspage_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/redact"
)

const (
	ghToken     = "ghp_statusPageMustNeverShowThis0123456789"
	statusToken = "status-token-for-the-network-5c1d"
	adminToken  = "admin-token-for-the-replays-9e4f"
)

type fixture struct {
	srv *bustest.Server
	op  *bus.Conn
}

// start runs an authorizing server with the default topology and one dead
// letter whose reason carries a GitHub token: the operator's signed control
// command, which the ledger-writer's consumer refuses once for good and
// dead-letters, signed, as a replay expects (docs/decisions/099-signed-events.md).
func start(t *testing.T) fixture {
	t.Helper()
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	topo := bus.DefaultTopology()
	srv.Provision(t, topo)
	op := srv.Connect(t, "operator")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lw := srv.ConnectAs(t, bus.IdentityLedgerWriter, "ledger-writer")
	var refused atomic.Bool
	r, err := lw.NewRunner(bus.ConsumerSpec{Service: bus.ServiceLedgerWriter, Stream: bus.StreamInbox, Partitions: topo.Partitions},
		bus.HandlerFunc(func(context.Context, *bus.Delivery) error {
			if refused.CompareAndSwap(false, true) {
				return bus.Permanent(errors.New("GitHub said 401 for Authorization: token " + ghToken))
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	t.Cleanup(func() { stop(); <-done })
	h := bus.Header{"ce-id": {"gh:delivery-1"}, "ce-type": {string(catalog.ControlCommand)}}
	if _, err := op.Publish(ctx, bus.Message{Subject: catalog.InboxSubject("github:octo/repo#1", catalog.ControlCommand), Header: h, MsgID: "gh:delivery-1", Data: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitWithin(t, 10*time.Second, "the dead letter", func() bool {
		l, err := op.ListDLQ(ctx, 0)
		return err == nil && len(l) == 1
	})
	return fixture{srv: srv, op: op}
}

// mux serves the page as a service holding the observer's credential
// (docs/decisions/102-status-page-reads-as-the-observer.md).
func (f fixture) mux(t *testing.T, o statuspage.Options) *http.ServeMux {
	t.Helper()
	o.Observer = f.srv.ConnectAs(t, bus.IdentityObserver, "status-reads")
	return f.serviceOnly(t, o)
}

// serviceOnly serves the page over a service's own identity alone.
func (f fixture) serviceOnly(t *testing.T, o statuspage.Options) *http.ServeMux {
	t.Helper()
	o.Conn = f.srv.ConnectAs(t, bus.IdentitySlackRenderer, "status")
	o.Config = func() *config.Config { return &config.Config{} }
	o.Topology = bus.DefaultTopology()
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Scrub = redact.New(redact.Options{Env: map[string]string{"LOOP_GITHUB_TOKEN": ghToken}})
	mux := http.NewServeMux()
	statuspage.Register(mux, o)
	return mux
}

func request(mux http.Handler, method, path, remote, host, token string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr, r.Host = remote, host
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

func TestAccessIsLocalUnlessExposedWithAToken(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	f := start(t)
	local := f.mux(t, statuspage.Options{})
	exposed := f.mux(t, statuspage.Options{Expose: true, Token: statusToken})
	cases := []struct {
		name               string
		mux                http.Handler
		path, remote, host string
		token              string
		want               int
	}{
		{"loopback", local, "/status/api/state", "127.0.0.1:5000", "127.0.0.1:9090", "", 200},
		{"loopback page", local, "/status", "[::1]:5000", "localhost:9090", "", 200},
		{"a rebound name over loopback", local, "/status/api/state", "127.0.0.1:5000", "attacker.example:9090", "", 401},
		{"the network, not exposed", local, "/status/api/state", "192.0.2.7:5000", "loop.internal:9090", statusToken, 403},
		{"the network, no token", exposed, "/status/api/state", "192.0.2.7:5000", "loop.internal:9090", "", 401},
		{"the network, a wrong token", exposed, "/status/api/state", "192.0.2.7:5000", "loop.internal:9090", "nope", 401},
		{"the network, the token", exposed, "/status/api/state", "192.0.2.7:5000", "loop.internal:9090", statusToken, 200},
		{"the network, the page's static shell", exposed, "/status", "192.0.2.7:5000", "loop.internal:9090", "", 200},
	}
	for _, c := range cases {
		if w := request(c.mux, "GET", c.path, c.remote, c.host, c.token); w.Code != c.want {
			t.Errorf("%s: %d %s, want %d", c.name, w.Code, strings.TrimSpace(w.Body.String()), c.want)
		}
	}
}

func TestReplayNeedsTheAdminTokenAndNothingSecretIsShown(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	f := start(t)
	mux := f.mux(t, statuspage.Options{AdminToken: adminToken, Replay: f.op, Expose: true, Token: statusToken})
	const remote, host = "127.0.0.1:5000", "127.0.0.1:9090"

	var st statuspage.State
	w := request(mux, "GET", "/status/api/state", remote, host, "")
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	if st.CanReplay || st.Role != "viewer" {
		t.Errorf("without the admin token: role %s, canReplay %v", st.Role, st.CanReplay)
	}
	if len(st.DeadLetters) != 1 || st.DeadLetters[0].EventID != "gh:delivery-1" {
		t.Fatalf("dead letters: %+v", st.DeadLetters)
	}
	for _, s := range []string{ghToken, statusToken, adminToken} {
		if strings.Contains(w.Body.String(), s) {
			t.Errorf("the state shows a secret (%.8s…): %s", s, w.Body)
		}
	}
	if !strings.Contains(st.DeadLetters[0].Reason, "401") {
		t.Errorf("the reason lost its words: %q", st.DeadLetters[0].Reason)
	}
	page := request(mux, "GET", "/status", remote, host, "").Body.String()
	for _, s := range []string{statusToken, adminToken, ghToken} {
		if strings.Contains(page, s) {
			t.Errorf("the page carries a secret (%.8s…)", s)
		}
	}

	path := "/status/api/dlq/1/replay"
	for _, tok := range []string{"", statusToken} {
		if w := request(mux, "POST", path, remote, host, tok); w.Code != http.StatusForbidden {
			t.Errorf("replay with token %q: %d, want 403", tok, w.Code)
		}
	}
	w = request(mux, "GET", "/status/api/state", remote, host, adminToken)
	st = statuspage.State{}
	_ = json.Unmarshal(w.Body.Bytes(), &st)
	if !st.CanReplay || st.Role != "admin" {
		t.Errorf("with the admin token: role %s, canReplay %v", st.Role, st.CanReplay)
	}
	if w := request(mux, "POST", path, remote, host, adminToken); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "gh:delivery-1:replay:1") {
		t.Fatalf("replay as the admin: %d %s", w.Code, w.Body)
	}
	if w := request(mux, "POST", path, remote, host, adminToken); w.Code != http.StatusNotFound {
		t.Errorf("a second replay of the same entry: %d, want 404", w.Code)
	}
	// Without an operator connection the admin has no button either.
	noop := f.mux(t, statuspage.Options{AdminToken: adminToken})
	st = statuspage.State{}
	_ = json.Unmarshal(request(noop, "GET", "/status/api/state", remote, host, adminToken).Body.Bytes(), &st)
	if st.CanReplay {
		t.Error("canReplay without an operator identity")
	}
}

// TestWithoutTheObserverThePageShowsTheBusAndSaysWhy: a service's own
// identity reads no dead letter and no other service's bucket; the page
// shows the streams and consumers and names the credential the rest needs,
// and does not wait on reads the server would refuse.
func TestWithoutTheObserverThePageShowsTheBusAndSaysWhy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	f := start(t)
	mux := f.serviceOnly(t, statuspage.Options{})
	begin := time.Now()
	w := request(mux, "GET", "/status/api/state", "127.0.0.1:5000", "127.0.0.1:9090", "")
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("the state took %v: it waited on refused reads", took)
	}
	var st statuspage.State
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	if len(st.Streams) != 5 || len(st.Consumers) == 0 {
		t.Errorf("streams %d, consumers %d: the bus's state is every identity's to read", len(st.Streams), len(st.Consumers))
	}
	// The API's reads of the loop's state say what they need, each.
	for _, path := range []string{"/api/v1/work-items", "/api/v1/sessions", "/api/v1/dead-letters", "/api/v1/attention", "/api/v1/events", "/api/v1/stream"} {
		if a := request(mux, "GET", path, "127.0.0.1:5000", "127.0.0.1:9090", ""); a.Code != http.StatusServiceUnavailable || !strings.Contains(a.Body.String(), "observer") {
			t.Errorf("GET %s without the observer: %d %s", path, a.Code, a.Body)
		}
	}
	if len(st.DeadLetters) != 0 {
		t.Errorf("dead letters shown without the observer: %+v", st.DeadLetters)
	}
	for _, part := range []string{"workItems", "sessions", "deadLetters", "recent"} {
		if st.Problems[part] != statuspage.NeedsObserver {
			t.Errorf("%s: problem %q, want %q", part, st.Problems[part], statuspage.NeedsObserver)
		}
	}
	if _, ok := st.Problems["streams"]; ok {
		t.Errorf("streams could not be read: %v", st.Problems)
	}
	// The refusal is the server's: the same identity cannot read the dead
	// letters itself.
	c := f.srv.ConnectAs(t, bus.IdentitySlackRenderer, "dlq-reader")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.ListDLQ(ctx, 10); err == nil {
		t.Error("slack-renderer read the dead letters")
	}
}

// TestReplayRefusesAPlantedDeadLetter: a dead letter no consumer wrote (the
// operator's own publish on loop.dlq, naming the inbox) is not replayed from
// the page: 409, saying why, and it stays in the DLQ
// (docs/decisions/099-signed-events.md).
func TestReplayRefusesAPlantedDeadLetter(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	f := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inbox := "loop.in.0.abc." + string(catalog.GateFeedback)
	h := bus.Header{"ce-id": {"slack:EvPlanted"}, "ce-type": {string(catalog.GateFeedback)}}
	h.Set(bus.HeaderDLQStream, bus.StreamInbox)
	h.Set(bus.HeaderDLQConsumer, "ledger-writer-p00")
	h.Set(bus.HeaderDLQSubject, inbox)
	h.Set(bus.HeaderDLQMsgID, "slack:EvPlanted")
	ack, err := f.op.Publish(ctx, bus.Message{Subject: catalog.DLQPrefix + ".ledger-writer-p00." + inbox, Header: h, MsgID: "planted", Data: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	mux := f.mux(t, statuspage.Options{AdminToken: adminToken, Replay: f.op})
	w := request(mux, "POST", fmt.Sprintf("/status/api/dlq/%d/replay", ack.Seq), "127.0.0.1:5000", "127.0.0.1:9090", adminToken)
	if w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), "dead-letterer") {
		t.Fatalf("replay of a planted dead letter: %d %s", w.Code, w.Body)
	}
	t.Logf("refused: %s", strings.TrimSpace(w.Body.String()))
	if l, err := f.op.ListDLQ(ctx, 0); err != nil || len(l) != 2 {
		t.Fatalf("the DLQ after the refusal: %d %v", len(l), err)
	}
}

// TestRootRedirectsToThePage: the admin address alone opens the page.
func TestRootRedirectsToThePage(t *testing.T) {
	mux := http.NewServeMux()
	statuspage.Register(mux, statuspage.Options{})
	w := request(mux, "GET", "/", "127.0.0.1:5000", "127.0.0.1:9090", "")
	if w.Code != http.StatusFound || w.Header().Get("Location") != "/status" {
		t.Fatalf("GET /: %d, Location %q; want 302 to /status", w.Code, w.Header().Get("Location"))
	}
	// Only the root: another path is not the page's.
	if w := request(mux, "GET", "/nothing-here", "127.0.0.1:5000", "127.0.0.1:9090", ""); w.Code != http.StatusNotFound {
		t.Errorf("GET /nothing-here: %d, want 404", w.Code)
	}
}

// TestStateShowsEveryReadinessFailureAndTheChecklist: what /readyz fails
// on, every check with its reason in order, and the first-run checklist `up`
// printed, so a run that cannot start sessions does not look healthy.
func TestStateShowsEveryReadinessFailureAndTheChecklist(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	f := start(t)
	checklist := []statuspage.Capability{
		{Name: "GitHub intake", Missing: nil},
		{Name: "agent sessions", Missing: []string{"tmux (tmux) is not installed: install it"}},
	}
	mux := f.mux(t, statuspage.Options{
		Ready: func() map[string]string {
			return map[string]string{"dispatcher": "agent sessions unavailable: no harness", "ledger-writer/github": "LOOP_GITHUB_TOKEN is not set"}
		},
		Checklist: func() []statuspage.Capability { return checklist },
	})
	var st statuspage.State
	w := request(mux, "GET", "/status/api/state", "127.0.0.1:5000", "127.0.0.1:9090", "")
	if err := json.Unmarshal(w.Body.Bytes(), &st); err != nil {
		t.Fatalf("%d %s: %v", w.Code, w.Body, err)
	}
	want := []statuspage.NotReady{{Check: "dispatcher", Reason: "agent sessions unavailable: no harness"},
		{Check: "ledger-writer/github", Reason: "LOOP_GITHUB_TOKEN is not set"}}
	if !st.Readiness || fmt.Sprint(st.NotReady) != fmt.Sprint(want) {
		t.Errorf("readiness %v, not ready %+v; want %+v", st.Readiness, st.NotReady, want)
	}
	if fmt.Sprint(st.Checklist) != fmt.Sprint(checklist) {
		t.Errorf("checklist %+v, want %+v", st.Checklist, checklist)
	}

	// A host with neither says nothing of them: no checklist, readiness unknown.
	plain := f.mux(t, statuspage.Options{})
	st = statuspage.State{}
	_ = json.Unmarshal(request(plain, "GET", "/status/api/state", "127.0.0.1:5000", "127.0.0.1:9090", "").Body.Bytes(), &st)
	if st.Readiness || len(st.NotReady) != 0 || st.Checklist != nil {
		t.Errorf("without Ready and Checklist: %v %+v %+v", st.Readiness, st.NotReady, st.Checklist)
	}
}

// TestThePageSaysEmptyInWordsAndFoldsThePartitions: every table has the
// words it shows instead of bare headers, and the partition rows sit under a
// summary (the browser test renders them).
func TestThePageSaysEmptyInWordsAndFoldsThePartitions(t *testing.T) {
	mux := http.NewServeMux()
	statuspage.Register(mux, statuspage.Options{})
	page := request(mux, "GET", "/status", "127.0.0.1:5000", "127.0.0.1:9090", "").Body.String()
	for _, want := range []string{
		`<details id="partitions"><summary>`,
		`<section id="readiness">`, `<section id="first-run" hidden>`,
		"No work item yet", "No agent session yet", "No dead letters", "No stream yet", "No event has crossed the bus yet",
		"Ready: every check of /readyz passes.",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	open, table, close := strings.Index(page, `<details id="partitions">`), strings.Index(page, `<table id="consumers">`), strings.Index(page, "</details>")
	if !(open < table && table < close) {
		t.Errorf("the partition table is not inside its details (%d, %d, %d)", open, table, close)
	}
}

// TestConfigShowsNoSecret: the API's effective config names the settings
// the file sets but never their values, and scrubs the harness arguments.
func TestConfigShowsNoSecret(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	f := start(t)
	cfg := config.Default()
	cfg.Routing.Harness.Args = map[string][]string{"claude": {"--api-key", ghToken}}
	cfg.Settings = []config.FileSetting{{Name: "LOOP_GITHUB_TOKEN", Value: ghToken, Path: "integrations.github.api.tokenEnv"}}
	var o statuspage.Options
	mux := http.NewServeMux()
	o.Observer = f.srv.ConnectAs(t, bus.IdentityObserver, "status-reads")
	o.Conn = f.srv.ConnectAs(t, bus.IdentitySlackRenderer, "status")
	o.Config = func() *config.Config { return cfg }
	o.Topology = bus.DefaultTopology()
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Scrub = redact.New(redact.Options{Env: map[string]string{"LOOP_GITHUB_TOKEN": ghToken}})
	statuspage.Register(mux, o)
	res := request(mux, "GET", "/api/v1/config", "127.0.0.1:1", "127.0.0.1:9090", "")
	if res.Code != 200 {
		t.Fatalf("GET /api/v1/config: %d %s", res.Code, res.Body)
	}
	body := res.Body.String()
	if strings.Contains(body, ghToken) {
		t.Fatalf("the config shows the token:\n%s", body)
	}
	if !strings.Contains(body, `"name":"LOOP_GITHUB_TOKEN"`) || !strings.Contains(body, "--api-key") {
		t.Fatalf("the config does not name the setting or the arguments:\n%s", body)
	}
}
