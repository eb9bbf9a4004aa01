package inproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/the-loop/bus/internal/hatch"
	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/sessions"
)

const (
	readToken    = "api-read-token-0123456789"
	operateToken = "api-operate-token-0123456789"
)

// contract is the API's served contract, loaded and validated by
// kin-openapi, with a router over it.
type contract struct {
	doc    *openapi3.T
	router routers.Router
	// seen are the operations a validated answer came from.
	seen map[string]bool
}

func loadContract(t *testing.T, mux http.Handler) *contract {
	t.Helper()
	// The rendered docs are HTML and the stream is text, which the
	// validator reads as strings.
	for _, ct := range []string{"text/html", "text/event-stream"} {
		openapi3filter.RegisterBodyDecoder(ct, func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
			b, err := io.ReadAll(body)
			return string(b), err
		})
	}
	res := call(mux, http.MethodGet, "/api/v1/openapi.json", "", nil, true)
	if res.Code != http.StatusOK {
		t.Fatalf("GET /api/v1/openapi.json: %d %s", res.Code, res.Body)
	}
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(res.Body.Bytes())
	if err != nil {
		t.Fatalf("the served contract does not load: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the served contract is not valid OpenAPI: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.1") {
		t.Fatalf("the contract is OpenAPI %s, want 3.1", doc.OpenAPI)
	}
	// The router matches requests against the servers' URLs; the
	// requests here are made to example.com, as httptest makes them.
	doc.Servers = openapi3.Servers{{URL: "http://example.com/api/v1"}}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return &contract{doc: doc, router: router, seen: map[string]bool{}}
}

// call serves one request to mux: from loopback naming a loopback host, or
// from beyond it, with a bearer token when token is set.
func call(mux http.Handler, method, path, token string, body any, loopback bool) *httptest.ResponseRecorder {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	r := httptest.NewRequest(method, "http://example.com"+path, rd)
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	r.RemoteAddr, r.Host = "127.0.0.1:40000", "127.0.0.1:9090"
	if !loopback {
		r.RemoteAddr, r.Host = "203.0.113.9:40000", "loop.example.com"
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	return w
}

// check serves the request and validates the request and the answer
// against the contract; it fails unless the answer's status is want.
func (c *contract) check(t *testing.T, mux http.Handler, method, path, token string, body any, loopback bool, want int) []byte {
	t.Helper()
	res := call(mux, method, path, token, body, loopback)
	if res.Code != want {
		t.Fatalf("%s %s: %d %s, want %d", method, path, res.Code, res.Body, want)
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req := httptest.NewRequest(method, "http://example.com"+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		t.Fatalf("%s %s: no operation of the contract: %v", method, path, err)
	}
	ctx := context.Background()
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	// A request made to be refused as bad breaks the contract on purpose.
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && want != http.StatusBadRequest {
		t.Fatalf("%s %s: the request breaks the contract: %v", method, path, err)
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.Code, Header: res.Header(), Options: opts}
	out.SetBodyBytes(res.Body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		t.Fatalf("%s %s: the answer %d breaks the contract: %v\n%s", method, path, res.Code, err, res.Body)
	}
	c.seen[route.Method+" "+route.Path] = true
	return res.Body.Bytes()
}

// sse is a server-sent event stream being read.
type sse struct {
	mu   sync.Mutex
	recs []statuspage.EventRecord
}

// openStream opens path on a server of mux (a loopback client), checks the
// answer's status and headers against the contract, and reads its events
// until the test ends.
func (c *contract) openStream(t *testing.T, mux http.Handler, path string) *sse {
	t.Helper()
	srv := httptest.NewServer(mux)
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	s := &sse{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var rec statuspage.EventRecord
			if json.Unmarshal([]byte(data), &rec) == nil {
				s.mu.Lock()
				s.recs = append(s.recs, rec)
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; res.Body.Close(); srv.Close() })
	check := httptest.NewRequest(http.MethodGet, "http://example.com"+path, nil)
	route, params, err := c.router.FindRoute(check)
	if err != nil {
		t.Fatal(err)
	}
	opts := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true}
	in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route, Options: opts}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: res.StatusCode, Header: res.Header, Options: opts}
	out.SetBodyBytes(nil)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", path, res.StatusCode)
	}
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Fatalf("GET %s: the answer breaks the contract: %v", path, err)
	}
	c.seen[route.Method+" "+route.Path] = true
	return s
}

// wait waits for a record f accepts.
func (s *sse) wait(t *testing.T, f func(statuspage.EventRecord) bool) {
	t.Helper()
	testkit.WaitWithin(t, wait, "the record on the stream", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return slices.ContainsFunc(s.recs, f)
	})
}

// TestAPIHoldsToItsContract serves the control plane's API over a running
// loop and validates every operation's answers against the contract it
// serves (kin-openapi): the route table and the contract name the same
// operations, every one is called, and each refusal is the contract's.
// The operator skips a node through it, and the record on GitHub names the
// operator and the reason before the graph moves.
func TestAPIHoldsToItsContract(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("the control plane")
	w.comment(number, alice, "the-loop execute")
	w.waitNode(r, "requirements")

	o := statuspage.Options{
		Conn: w.conn, Observer: w.srv.ConnectAs(t, bus.IdentityObserver, "api-reads"), Config: w.cfg.Load,
		Topology: bustest.FastTopology(partitions), Expose: true, Token: readToken, AdminToken: operateToken,
		Replay: w.conn, Operator: hatch.Operator{Conn: w.conn, Config: w.cfg.Load},
		Log:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		Scrub: redact.New(redact.Options{Env: map[string]string{"LOOP_GITHUB_TOKEN": ghToken}}),
	}
	mux := http.NewServeMux()
	statuspage.Register(mux, o)
	c := loadContract(t, mux)

	// The table and the contract name the same operations.
	var table []string
	for _, rt := range statuspage.Routes() {
		key := rt.Method + " " + rt.Path
		table = append(table, key)
		item := c.doc.Paths.Find(rt.Path)
		if item == nil || item.GetOperation(rt.Method) == nil {
			t.Errorf("the API serves %s, which its contract does not describe", key)
		}
	}
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			if key := method + " " + path; !slices.Contains(table, key) {
				t.Errorf("the contract describes %s, which the API does not serve", key)
			}
		}
	}
	if t.Failed() {
		t.FailNow()
	}

	esc := "/api/v1/work-items/" + url.PathEscape(r)
	// Reads, from loopback without a token.
	c.check(t, mux, "GET", "/api/v1/health", "", nil, true, 200)
	var list struct{ WorkItems []statuspage.WorkItem }
	_ = json.Unmarshal(c.check(t, mux, "GET", "/api/v1/work-items", "", nil, true, 200), &list)
	if len(list.WorkItems) != 1 || list.WorkItems[0].Ref != r || list.WorkItems[0].Current != "requirements" {
		t.Fatalf("work items = %+v, want %s at requirements", list.WorkItems, r)
	}
	c.check(t, mux, "GET", "/api/v1/work-items?status=complete", "", nil, true, 200)
	c.check(t, mux, "GET", esc, "", nil, true, 200)
	var gs struct {
		Known bool
		State struct{ Current string }
	}
	_ = json.Unmarshal(c.check(t, mux, "GET", esc+"/graph", "", nil, true, 200), &gs)
	if !gs.Known || gs.State.Current != "requirements" {
		t.Errorf("graph status = %+v, want requirements, known", gs)
	}
	c.check(t, mux, "GET", "/api/v1/work-items/"+url.PathEscape("github:octo/repo#999")+"/graph", "", nil, true, 404)
	c.check(t, mux, "GET", "/api/v1/work-items/"+url.PathEscape("github:octo/repo#999"), "", nil, true, 404)
	c.check(t, mux, "GET", "/api/v1/sessions", "", nil, true, 200)
	c.check(t, mux, "GET", "/api/v1/dead-letters", "", nil, true, 200)
	c.check(t, mux, "GET", "/api/v1/attention", "", nil, true, 200)
	c.check(t, mux, "GET", "/api/v1/events/types", "", nil, true, 200)
	var eff statuspage.EffectiveConfig
	_ = json.Unmarshal(c.check(t, mux, "GET", "/api/v1/config", "", nil, true, 200), &eff)
	if eff.Graphs.WorkItem != "work-item" || !slices.Contains(eff.Graphs.Available, "pdlc-work-item-loop") || len(eff.AuthorizedUsers) == 0 {
		t.Errorf("the effective config = %+v", eff)
	}
	c.check(t, mux, "GET", "/api/v1/docs", "", nil, false, 200)
	c.check(t, mux, "GET", "/api/v1/openapi.json", "", nil, false, 200)

	// Beyond loopback: no token, 401; the read token reads and may not
	// operate; the operate token operates.
	c.check(t, mux, "GET", "/api/v1/work-items", "", nil, false, 401)
	c.check(t, mux, "GET", "/api/v1/work-items", "not-a-token", nil, false, 401)
	c.check(t, mux, "GET", "/api/v1/work-items", readToken, nil, false, 200)
	skip := map[string]string{"reason": "The issue's text is the requirements."}
	c.check(t, mux, "POST", esc+"/graph/skip", readToken, skip, false, 403)
	c.check(t, mux, "POST", esc+"/graph/skip", "", skip, true, 403)
	c.check(t, mux, "POST", "/api/v1/dead-letters/999/replay", readToken, nil, false, 403)
	c.check(t, mux, "POST", esc+"/graph/skip", operateToken, map[string]string{}, false, 400)
	c.check(t, mux, "POST", esc+"/graph/advance", operateToken, map[string]string{"reason": "no target"}, false, 400)
	c.check(t, mux, "POST", esc+"/graph/skip", operateToken, map[string]string{"reason": "x", "as": "nobody-known"}, false, 400)
	c.check(t, mux, "POST", "/api/v1/work-items/"+url.PathEscape("github:octo/repo#999")+"/graph/skip", operateToken, skip, false, 404)
	c.check(t, mux, "POST", "/api/v1/dead-letters/999/replay", operateToken, nil, false, 404)

	// The event log, queried: the records of this work item's moves.
	var evs struct{ Events []statuspage.EventRecord }
	_ = json.Unmarshal(c.check(t, mux, "GET", "/api/v1/events?type=graph.advanced&workItem="+url.QueryEscape(r)+"&since=1h", readToken, nil, false, 200), &evs)
	if len(evs.Events) != 2 || evs.Events[1].Fields["to"] != "requirements" {
		t.Fatalf("graph.advanced records of %s = %+v, want two, the last to requirements", r, evs.Events)
	}
	c.check(t, mux, "GET", "/api/v1/events?since=yesterday", "", nil, true, 400)
	// The stream, from a client on loopback, of this work item's records.
	stream := c.openStream(t, mux, "/api/v1/stream?workItem="+url.QueryEscape(r))

	// The skip: recorded on GitHub naming the operator, as alice, with
	// the reason; then applied.
	var acc statuspage.OverrideAccepted
	_ = json.Unmarshal(c.check(t, mux, "POST", esc+"/graph/skip", operateToken, map[string]string{"reason": skip["reason"], "as": alice}, false, 202), &acc)
	if acc.From != "requirements" || acc.To != "requirements-approval" || acc.EventID == "" {
		t.Fatalf("accepted %+v, want a skip from requirements to requirements-approval", acc)
	}
	rec := w.overrideRecord(number, acc.EventID)
	for _, want := range []string{"graph **skip** by the operator, as `alice`", skip["reason"]} {
		if !strings.Contains(rec.Body, want) {
			t.Errorf("the record on GitHub does not say %q:\n%s", want, rec.Body)
		}
	}
	if !envelope.HasSelfMarker(rec.Body) {
		t.Error("the record is not marker-stamped")
	}
	w.waitNode(r, "requirements-approval")
	stream.wait(t, func(rec statuspage.EventRecord) bool {
		return rec.Event == "graph.advanced" && rec.Fields["event_id"] == acc.EventID && rec.Fields["to"] == "requirements-approval"
	})
	// The session's transcript: what its terminal shows, the skip typed
	// into it among the rest.
	testkit.WaitWithin(t, wait, "the skip in the session's transcript", func() bool {
		var tr struct{ Lines []string }
		_ = json.Unmarshal(c.check(t, mux, "GET", "/api/v1/sessions/"+url.PathEscape(r)+"/transcript?lines=500", readToken, nil, false, 200), &tr)
		return strings.Contains(strings.Join(tr.Lines, "\n"), "moved this work item's graph by hand")
	})
	c.check(t, mux, "GET", "/api/v1/sessions/"+url.PathEscape("github:octo/repo#999")+"/transcript", "", nil, true, 404)
	// A reply through the operator: recorded on the work item naming the
	// person, then typed into the session.
	esr := "/api/v1/work-items/" + url.PathEscape(r) + "/reply"
	say := map[string]string{"text": "Please keep the API small.", "as": alice}
	c.check(t, mux, "POST", esr, readToken, say, false, 403)
	c.check(t, mux, "POST", esr, operateToken, map[string]string{"text": "no one"}, false, 400)
	c.check(t, mux, "POST", esr, operateToken, map[string]string{"text": "x", "as": "nobody-known"}, false, 400)
	c.check(t, mux, "POST", "/api/v1/work-items/"+url.PathEscape("github:octo/repo#999")+"/reply", operateToken, say, false, 404)
	var rep statuspage.ReplyAccepted
	_ = json.Unmarshal(c.check(t, mux, "POST", esr, operateToken, say, false, 202), &rep)
	testkit.WaitWithin(t, wait, "the reply recorded on GitHub", func() bool {
		for _, cm := range w.gh.Comments(repo, number) {
			if cm.Login == ledgerLogin && strings.Contains(cm.Body, say["text"]) && strings.Contains(cm.Body, alice) {
				return true
			}
		}
		return false
	})
	testkit.WaitWithin(t, wait, "the reply typed into the session", func() bool {
		return slices.ContainsFunc(w.inputs(), func(in string) bool { return strings.Contains(in, say["text"]) })
	})
	// A control command through the operator: the session pauses, then
	// resumes, each recorded on the work item first.
	ctl := "/api/v1/work-items/" + url.PathEscape(r) + "/session/"
	c.check(t, mux, "POST", ctl+"reboot", operateToken, map[string]string{"as": alice}, false, 400)
	c.check(t, mux, "POST", ctl+"pause", readToken, map[string]string{"as": alice}, false, 403)
	c.check(t, mux, "POST", ctl+"pause", operateToken, map[string]string{"as": "nobody-known"}, false, 400)
	c.check(t, mux, "POST", ctl+"pause", operateToken, map[string]string{"as": alice}, false, 202)
	testkit.WaitWithin(t, wait, "the session paused", func() bool { return w.session(r).Status == sessions.Paused })
	c.check(t, mux, "POST", ctl+"resume", operateToken, map[string]string{"as": alice}, false, 202)
	testkit.WaitWithin(t, wait, "the session resumed", func() bool { return w.session(r).Status == sessions.Active })
	// Standing sessions: listed from the config with how each stands; one
	// the config switches off is refused, one it does not name is not found.
	w.update(func(cfg *config.Config) {
		cfg.Standing = config.Standing{Sessions: []config.StandingSession{{Name: "watcher", Ledger: "github:octo/repo#50", Description: "watches"}}}
	})
	var std struct{ Sessions []statuspage.StandingSession }
	_ = json.Unmarshal(c.check(t, mux, "GET", "/api/v1/standing", readToken, nil, false, 200), &std)
	if len(std.Sessions) != 1 || std.Sessions[0].Name != "watcher" || !strings.HasPrefix(std.Sessions[0].Status, "off") {
		t.Fatalf("standing = %+v, want watcher, off", std.Sessions)
	}
	c.check(t, mux, "POST", "/api/v1/standing/watcher/control/start", operateToken, map[string]string{"as": alice}, false, 409)
	c.check(t, mux, "POST", "/api/v1/standing/nobody/control/start", operateToken, map[string]string{"as": alice}, false, 404)
	c.check(t, mux, "POST", "/api/v1/standing/watcher/say", operateToken, map[string]string{"as": alice, "text": "hello"}, false, 409)
	c.check(t, mux, "POST", "/api/v1/standing/watcher/say", readToken, map[string]string{"as": alice, "text": "hello"}, false, 403)
	// At the gate: a skip is refused (a person's answer decides a gate),
	// and the gate is what attention lists.
	c.check(t, mux, "POST", esc+"/graph/skip", operateToken, skip, false, 409)
	var att struct{ Items []statuspage.Attention }
	_ = json.Unmarshal(c.check(t, mux, "GET", "/api/v1/attention", readToken, nil, false, 200), &att)
	if len(att.Items) != 1 || att.Items[0].Kind != statuspage.AttentionGate || att.Items[0].Ref != r {
		t.Fatalf("attention = %+v, want the gate of %s", att.Items, r)
	}
	// A forged webhook delivery is refused, and attention counts it.
	if code := w.post("issue_comment", w.commentHook(w.gh.AddComment(repo, number, mallory, "forged")), "sha256=00"); code != http.StatusUnauthorized {
		t.Fatalf("a forged delivery answered %d", code)
	}
	testkit.WaitWithin(t, wait, "the refusal in attention", func() bool {
		_ = json.Unmarshal(c.check(t, mux, "GET", "/api/v1/attention", readToken, nil, false, 200), &att)
		return slices.ContainsFunc(att.Items, func(a statuspage.Attention) bool {
			return a.Kind == statuspage.AttentionRefused && strings.Contains(a.Summary, "webhook.rejected")
		})
	})

	// Every operation was called and answered as its contract says.
	for _, key := range table {
		if !c.seen[key] {
			t.Errorf("no answer of %s was checked against the contract", key)
		}
	}
}
