package statuspage

// The control plane's HTTP API, /api/v1 (docs/api.md): the page's reads,
// one resource at a time, and the operator's moves, held to the contract in
// openapi.yaml. Its routes are the table apiRoutes, which a test compares
// with the contract both ways, so a route cannot be added without it.

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher"
)

//go:embed openapi.yaml
var contractYAML []byte

// Contract returns the API's OpenAPI 3.1 document as it is served, in
// JSON.
func Contract() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(contractYAML, &doc); err != nil {
		return nil, fmt.Errorf("statuspage: the API contract: %w", err)
	}
	return json.MarshalIndent(doc, "", "  ")
}

// APIPrefix is where the API is served.
const APIPrefix = "/api/v1"

// Route is one operation of the API: its method and path as the contract
// names them, and whether it changes something (the operate token only).
type Route struct {
	Method  string
	Path    string
	Operate bool
	// observe: the route reads the loop's state, which needs the observer
	// identity; the guard answers 503 on a host without it.
	observe bool
	handle  func(*server, http.ResponseWriter, *http.Request)
}

// apiRoutes is every route the API serves.
var apiRoutes = []Route{
	{Method: http.MethodGet, Path: "/health", handle: (*server).apiHealth},
	{Method: http.MethodGet, Path: "/work-items", observe: true, handle: (*server).apiWorkItems},
	{Method: http.MethodGet, Path: "/work-items/{ref}", observe: true, handle: (*server).apiWorkItem},
	{Method: http.MethodGet, Path: "/work-items/{ref}/graph", observe: true, handle: (*server).apiGraph},
	{Method: http.MethodPost, Path: "/work-items/{ref}/graph/{action}", Operate: true, handle: (*server).apiOverride},
	{Method: http.MethodPost, Path: "/work-items/{ref}/reply", Operate: true, handle: (*server).apiReply},
	{Method: http.MethodPost, Path: "/work-items/{ref}/session/{command}", Operate: true, handle: (*server).apiControl},
	{Method: http.MethodGet, Path: "/sessions", observe: true, handle: (*server).apiSessions},
	{Method: http.MethodGet, Path: "/sessions/{ref}/transcript", observe: true, handle: (*server).apiTranscript},
	{Method: http.MethodGet, Path: "/standing", observe: true, handle: (*server).apiStanding},
	{Method: http.MethodPost, Path: "/standing/{name}/control/{command}", Operate: true, handle: (*server).apiStandingCommand},
	{Method: http.MethodPost, Path: "/standing/{name}/say", Operate: true, handle: (*server).apiStandingSay},
	{Method: http.MethodGet, Path: "/dead-letters", observe: true, handle: (*server).apiDeadLetters},
	{Method: http.MethodPost, Path: "/dead-letters/{seq}/replay", Operate: true, handle: (*server).apiReplay},
	{Method: http.MethodGet, Path: "/attention", observe: true, handle: (*server).apiAttention},
	{Method: http.MethodGet, Path: "/events", observe: true, handle: (*server).apiEvents},
	{Method: http.MethodGet, Path: "/events/types", handle: (*server).apiEventTypes},
	{Method: http.MethodGet, Path: "/config", handle: (*server).apiConfig},
	{Method: http.MethodGet, Path: "/stream", observe: true, handle: (*server).apiStream},
	{Method: http.MethodGet, Path: "/openapi.json", handle: (*server).apiContract},
	{Method: http.MethodGet, Path: "/docs", handle: (*server).apiDocs},
}

// Routes returns the API's routes (without their handlers), for the test
// that holds them to the contract.
func Routes() []Route {
	out := make([]Route, len(apiRoutes))
	for i, r := range apiRoutes {
		out[i] = Route{Method: r.Method, Path: r.Path, Operate: r.Operate}
	}
	return out
}

// Operator makes the operator's moves the API offers beyond replay: it
// publishes them to the inbox as the operator, to be recorded on GitHub
// naming the operator, then applied (docs/decisions/111-operator-escape-hatch.md).
type Operator interface {
	Override(ctx context.Context, o Override) (OverrideAccepted, error)
	Reply(ctx context.Context, r Reply) (ReplyAccepted, error)
	Control(ctx context.Context, c Control) (ControlAccepted, error)
}

// Control is a person's control command for a work item's session (pause,
// resume, stop, cleanup, adopt, end), sent through the operator: recorded
// on the work item naming the person, then carried out by the dispatcher
// that hosts the session.
type Control struct {
	Ref, Command, As string
}

// ControlAccepted is a control command published.
type ControlAccepted struct {
	EventID string `json:"eventId"`
	Ref     string `json:"ref"`
	Command string `json:"command"`
	As      string `json:"as"`
}

// sessionCommands are the commands /session/{command} takes.
var sessionCommands = []string{"pause", "resume", "stop", "cleanup", "adopt", "end"}

// ErrCommandDisabled: an Operator refuses a command the config switches
// off.
var ErrCommandDisabled = errors.New("disabled in routing.control.keywords")

// Reply is a person's reply to a work item's session, sent through the
// operator: recorded on the work item naming the person, then typed in.
type Reply struct {
	Ref  string
	Text string
	// As is the person's GitHub login, as routing.authorizedUsers names
	// them: the dispatcher acts only on an authorized person's words.
	As string
}

// ReplyAccepted is a reply published.
type ReplyAccepted struct {
	EventID string `json:"eventId"`
	Ref     string `json:"ref"`
	As      string `json:"as"`
}

// Override is an operator's move of a work item's graph by hand.
type Override struct {
	Ref    string
	Action graph.Action
	To     string
	Reason string
	// As is the GitHub login of the person behind the operator, as
	// routing.authorizedUsers names them; empty: the operator alone.
	As string
}

// OverrideAccepted is a move requested: recorded, then applied.
type OverrideAccepted struct {
	EventID string `json:"eventId"`
	Ref     string `json:"ref"`
	Action  string `json:"action"`
	From    string `json:"from"`
	To      string `json:"to,omitempty"`
}

// Errors an Operator returns, besides graph's override errors (409) and
// bus failures (502).
var (
	// ErrNoWorkItem: the work item has no graph state.
	ErrNoWorkItem = errors.New("no such work item")
	// ErrUnknownPerson: `as` names nobody in routing.authorizedUsers.
	ErrUnknownPerson = errors.New("not in routing.authorizedUsers, so the record could not name them")
)

// registerAPI adds the API's routes to mux.
func registerAPI(mux *http.ServeMux, s *server) {
	for _, rt := range apiRoutes {
		mux.HandleFunc(rt.Method+" "+APIPrefix+rt.Path, s.apiGuard(rt))
	}
}

// maxAPIBody bounds a request body: an override's reason is a sentence.
const maxAPIBody = 16 << 10

// apiGuard serves rt to a request whose role allows it. Unlike the page,
// the API answers 401 to every request without a role, loopback or not,
// with a bearer challenge: a token is what lets it in.
func (s *server) apiGuard(rt Route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		public := rt.Path == "/openapi.json" || rt.Path == "/docs"
		ro := s.role(r)
		switch {
		case ro == nobody && !public:
			w.Header().Set("WWW-Authenticate", `Bearer realm="the-loop api"`)
			apiError(w, http.StatusUnauthorized, "present a token (Authorization: Bearer …): the read token reads, the operate token (LOOP_ADMIN_TOKEN) also operates; without one only loopback clients read")
			return
		case rt.Operate && ro != admin:
			apiError(w, http.StatusForbidden, "this operation needs the operate token (LOOP_ADMIN_TOKEN)")
			return
		case rt.Operate && !s.canOperate(rt):
			apiError(w, http.StatusForbidden, "this host cannot act as the operator: it needs the operator identity and LOOP_ADMIN_TOKEN")
			return
		}
		if rt.observe && s.o.Observer == nil {
			apiError(w, http.StatusServiceUnavailable, NeedsObserver)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxAPIBody)
		if rt.Path != "/stream" {
			// Every answer but the stream is one bounded read or publish.
			ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
			defer cancel()
			r = r.WithContext(ctx)
		}
		rt.handle(s, w, r)
	}
}

// canOperate reports whether this host holds what rt acts with: the
// operator's replay for a dead letter, the Operator for the rest.
func (s *server) canOperate(rt Route) bool {
	if rt.Path == "/dead-letters/{seq}/replay" {
		return s.o.Replay != nil
	}
	return s.o.Operator != nil
}

func apiError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// Health is what /health answers.
type Health struct {
	Ready     bool         `json:"ready"`
	NotReady  []NotReady   `json:"notReady"`
	Checklist []Capability `json:"checklist"`
}

func (s *server) apiHealth(w http.ResponseWriter, _ *http.Request) {
	h := Health{Ready: true, NotReady: []NotReady{}, Checklist: []Capability{}}
	if s.o.Ready != nil {
		for check, reason := range s.o.Ready() {
			h.NotReady = append(h.NotReady, NotReady{Check: check, Reason: reason})
		}
		slices.SortFunc(h.NotReady, func(a, b NotReady) int { return strings.Compare(a.Check, b.Check) })
		h.Ready = len(h.NotReady) == 0
	}
	if s.o.Checklist != nil {
		h.Checklist = append(h.Checklist, s.o.Checklist()...)
	}
	writeJSON(w, http.StatusOK, h)
}

// readFailed answers a read of the bus that failed; what failed goes to
// the log, not to the client.
func (s *server) readFailed(w http.ResponseWriter, part string, err error) {
	s.o.Log.Warn("api: read", "part", part, "err", err)
	apiError(w, http.StatusServiceUnavailable, part+" could not be read; the host's log says why")
}

func (s *server) apiWorkItems(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	items, err := s.workItems(ctx, s.o.Config())
	if err != nil {
		s.readFailed(w, "the work items", err)
		return
	}
	if st := r.URL.Query().Get("status"); st != "" {
		items = slices.DeleteFunc(items, func(wi WorkItem) bool { return wi.Status != st })
	}
	writeJSON(w, http.StatusOK, map[string][]WorkItem{"workItems": items})
}

func (s *server) apiWorkItem(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ref := r.PathValue("ref")
	wi, ok, err := s.oneWorkItem(ctx, s.o.Config(), ref)
	switch {
	case err != nil:
		s.readFailed(w, "the work item", err)
	case !ok:
		apiError(w, http.StatusNotFound, "no work item "+strconv.Quote(ref))
	default:
		writeJSON(w, http.StatusOK, wi)
	}
}

func (s *server) apiSessions(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	list, err := s.sessions(ctx)
	if err != nil {
		s.readFailed(w, "the sessions", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]Session{"sessions": list})
}

// deadLetters reads the dead letters, reasons scrubbed.
func (s *server) deadLetters(ctx context.Context) ([]DeadLetter, error) {
	dl, err := s.o.Observer.ListDLQ(ctx, 200)
	if err != nil {
		return nil, err
	}
	out := []DeadLetter{}
	for _, e := range dl {
		out = append(out, DeadLetter{Seq: e.Seq, EventID: e.CEID, Subject: e.PublishSubject, Consumer: e.Consumer,
			Reason: s.o.Scrub.Scrub(e.Reason), Deliveries: e.Deliveries, Time: e.Time})
	}
	return out, nil
}

func (s *server) apiDeadLetters(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	dl, err := s.deadLetters(ctx)
	if err != nil {
		s.readFailed(w, "the dead letters", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]DeadLetter{"deadLetters": dl})
}

func (s *server) apiReplay(w http.ResponseWriter, r *http.Request) {
	s.replayAnswer(w, r, apiError)
}

// overrideBody is the body of an override request.
type overrideBody struct {
	Reason string `json:"reason"`
	To     string `json:"to"`
	As     string `json:"as"`
}

func (s *server) apiOverride(w http.ResponseWriter, r *http.Request) {
	action := graph.Action(r.PathValue("action"))
	if !action.Valid() {
		apiError(w, http.StatusBadRequest, "the action is advance, skip, force or escalate")
		return
	}
	var body overrideBody
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		apiError(w, http.StatusBadRequest, "the body is a JSON object with reason, and to for advance and force: "+oneLine(err.Error()))
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		apiError(w, http.StatusBadRequest, "the body is one JSON object")
		return
	}
	body.Reason = strings.TrimSpace(body.Reason)
	switch {
	case body.Reason == "":
		apiError(w, http.StatusBadRequest, "reason is required: it is recorded on the work item with the move")
		return
	case action.NeedsTarget() && body.To == "":
		apiError(w, http.StatusBadRequest, string(action)+" needs to: the node to move the work item to")
		return
	case !action.NeedsTarget() && body.To != "":
		apiError(w, http.StatusBadRequest, string(action)+" takes no to: it follows the graph")
		return
	}
	ctx := r.Context()
	acc, err := s.o.Operator.Override(ctx, Override{Ref: r.PathValue("ref"), Action: action, To: body.To, Reason: body.Reason, As: body.As})
	switch {
	case errors.Is(err, ErrNoWorkItem):
		apiError(w, http.StatusNotFound, "no work item "+strconv.Quote(r.PathValue("ref")))
	case errors.Is(err, ErrUnknownPerson):
		apiError(w, http.StatusBadRequest, "as: "+err.Error())
	case errors.Is(err, graph.ErrBadOverride), errors.Is(err, graph.ErrGateOverride), errors.Is(err, graph.ErrStaleOverride):
		apiError(w, http.StatusConflict, s.o.Scrub.Scrub(oneLine(err.Error())))
	case err != nil:
		s.o.Log.Warn("api: override failed", "ref", r.PathValue("ref"), "action", action, "err", err)
		apiError(w, http.StatusBadGateway, "the move could not be published; the host's log says why")
	default:
		writeJSON(w, http.StatusAccepted, acc)
	}
}

// oneLine keeps the first line of s.
func oneLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// Attention is one thing that waits for a person.
type Attention struct {
	Kind    string    `json:"kind"`
	Ref     string    `json:"ref,omitempty"`
	Since   time.Time `json:"since"`
	Summary string    `json:"summary"`
	URL     string    `json:"url,omitempty"`
	Seq     uint64    `json:"seq,omitempty"`
}

// The kinds of Attention.
const (
	AttentionGate       = "gate"
	AttentionAsk        = "ask"
	AttentionSession    = "session"
	AttentionDeadLetter = "dead-letter"
	AttentionRefused    = "refused"
)

// refusals are the event-log records of what the loop refused or failed
// to deliver, which a person should look at; attention counts those of the
// last refusalWindow by type.
var refusals = []string{"webhook.rejected", "bus.forged_event", "routing.forged_envelope", "dispatch.failed", "channel.post_failed", "session.spawn_failed"}

// refusalWindow is how far back attention looks for refusals.
const refusalWindow = 24 * time.Hour

// readRefusals reads the refusals of the last refusalWindow: for each
// type, how many, the first one's time and the newest one's fields.
func (s *server) readRefusals(ctx context.Context) ([]Attention, error) {
	subjects := make([]string, len(refusals))
	for i, t := range refusals {
		subjects[i] = catalog.LogPrefix + ".*." + t
	}
	type agg struct {
		n     int
		first time.Time
		last  eventlog.Record
	}
	by := map[string]*agg{}
	err := s.o.Observer.ReadLog(ctx, bus.ReadOptions{Subjects: subjects, Since: time.Now().Add(-refusalWindow)}, func(lr bus.LogRecord) error {
		var rec eventlog.Record
		if json.Unmarshal(lr.Data, &rec) != nil {
			return nil
		}
		a := by[rec.Event]
		if a == nil {
			a = &agg{first: lr.Time}
			by[rec.Event] = a
		}
		a.n++
		a.last = rec
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := []Attention{}
	for t, a := range by {
		reason, _ := a.last.Fields["reason"].(string)
		sum := fmt.Sprintf("%d %s in the last %s", a.n, t, refusalWindow)
		if reason != "" {
			sum += " (the newest: " + reason + ")"
		}
		out = append(out, Attention{Kind: AttentionRefused, Since: a.first, Summary: sum})
	}
	return out, nil
}

// attention lists what waits for a person, oldest first: open gates,
// questions a session asked that nobody answered, work items at an agent's
// node whose session is closed or missing, dead letters, and the refusals
// of the last day.
func attention(items []WorkItem, sess []Session, dl []DeadLetter, refused []Attention) []Attention {
	out := []Attention{}
	running := map[string]WorkItem{}
	for _, wi := range items {
		if wi.Status == string(graph.StatusActive) {
			running[wi.Ref] = wi
		}
		if g := wi.Gate; g != nil {
			out = append(out, Attention{Kind: AttentionGate, Ref: wi.Ref, Since: g.Since, URL: wi.URL,
				Summary: fmt.Sprintf("%s waits at %s (%s)", wi.Ref, g.Node, g.Kind)})
		}
	}
	for _, x := range sess {
		if x.AwaitingInput != "" && x.Status != "closed" {
			since := x.LastInputAt
			if since.IsZero() {
				since = x.CreatedAt
			}
			out = append(out, Attention{Kind: AttentionAsk, Ref: x.Ref, Since: since, URL: graphstate.WorkItemURL(x.Ref),
				Summary: fmt.Sprintf("%s's session asked a question (%s) that no one has answered", x.Ref, x.AwaitingInput)})
			continue
		}
		wi, ok := running[x.Ref]
		if !ok || wi.Gate != nil || (x.Status != "closed" && x.Status != "no session") {
			continue
		}
		since := x.LastInputAt
		if since.IsZero() {
			since = wi.UpdatedAt
		}
		out = append(out, Attention{Kind: AttentionSession, Ref: x.Ref, Since: since, URL: wi.URL,
			Summary: fmt.Sprintf("%s is at %s (an agent's node) but its session is %s", x.Ref, wi.Current, x.Status)})
	}
	for _, d := range dl {
		out = append(out, Attention{Kind: AttentionDeadLetter, Since: d.Time, Seq: d.Seq,
			Summary: fmt.Sprintf("dead letter %d (%s, consumer %s): %s", d.Seq, d.EventID, d.Consumer, d.Reason)})
	}
	out = append(out, refused...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Since.Before(out[j].Since) })
	return out
}

func (s *server) apiAttention(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	items, err := s.workItems(ctx, s.o.Config())
	if err != nil {
		s.readFailed(w, "the work items", err)
		return
	}
	sess, err := s.sessions(ctx)
	if err != nil {
		s.readFailed(w, "the sessions", err)
		return
	}
	dl, err := s.deadLetters(ctx)
	if err != nil {
		s.readFailed(w, "the dead letters", err)
		return
	}
	refused, err := s.readRefusals(ctx)
	if err != nil {
		s.readFailed(w, "the event log", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string][]Attention{"items": attention(items, sess, dl, refused)})
}

// EventType is one catalog type as the API lists it.
type EventType struct {
	Name         string `json:"name"`
	Summary      string `json:"summary"`
	Subscribable bool   `json:"subscribable"`
	Publishable  bool   `json:"publishable"`
	Recorded     string `json:"recorded"`
	RaisedBy     string `json:"raisedBy"`
}

func (s *server) apiEventTypes(w http.ResponseWriter, _ *http.Request) {
	out := []EventType{}
	for _, e := range catalog.All() {
		out = append(out, EventType{Name: string(e.Type), Summary: e.Description, Subscribable: e.Subscribable,
			Publishable: e.Publishable, Recorded: e.Record.String(), RaisedBy: e.RaisedBy})
	}
	writeJSON(w, http.StatusOK, map[string][]EventType{"types": out})
}

func (s *server) apiContract(w http.ResponseWriter, _ *http.Request) {
	b, err := Contract()
	if err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}

// docsPage renders the contract for people: every operation, its
// parameters and answers. No script, no external asset.
var docsPage = template.Must(template.New("docs").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>the-loop API v1</title>
<style>body{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:1rem auto;padding:0 1rem;color:#111}
code{background:#f0f0f0;padding:0 .2em}section{border-top:1px solid #ccc;padding:.5rem 0}
.m{font-weight:700;display:inline-block;min-width:4rem}</style></head><body>
<h1>{{.Title}} <small>{{.Version}}</small></h1><p>{{.Description}}</p>
<p>The contract itself: <a href="openapi.json">openapi.json</a>. Every path below is under <code>/api/v1</code>.</p>
{{range .Ops}}<section id="{{.ID}}"><h2><span class="m">{{.Method}}</span> <code>{{.Path}}</code></h2><p>{{.Summary}}</p>
{{if .Description}}<p>{{.Description}}</p>{{end}}
{{if .Params}}<p>Parameters: {{range $i, $p := .Params}}{{if $i}}, {{end}}<code>{{$p}}</code>{{end}}</p>{{end}}
<p>Answers: {{range $i, $c := .Codes}}{{if $i}}, {{end}}{{$c}}{{end}}</p></section>{{end}}
</body></html>`))

type docsOp struct {
	ID, Method, Path, Summary, Description string
	Params, Codes                          []string
}

func (s *server) apiDocs(w http.ResponseWriter, _ *http.Request) {
	var doc struct {
		Info struct {
			Title, Version, Description string
		} `yaml:"info"`
		Paths map[string]map[string]struct {
			OperationID string `yaml:"operationId"`
			Summary     string `yaml:"summary"`
			Description string `yaml:"description"`
			Parameters  []struct {
				Name string `yaml:"name"`
				In   string `yaml:"in"`
				Ref  string `yaml:"$ref"`
			} `yaml:"parameters"`
			Responses map[string]any `yaml:"responses"`
		} `yaml:"paths"`
	}
	if err := yaml.Unmarshal(contractYAML, &doc); err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	var ops []docsOp
	for path, methods := range doc.Paths {
		for method, op := range methods {
			d := docsOp{ID: op.OperationID, Method: strings.ToUpper(method), Path: path, Summary: op.Summary, Description: op.Description}
			for _, p := range op.Parameters {
				if p.Ref != "" {
					d.Params = append(d.Params, p.Ref[strings.LastIndex(p.Ref, "/")+1:])
					continue
				}
				d.Params = append(d.Params, p.Name+" ("+p.In+")")
			}
			for code := range op.Responses {
				d.Codes = append(d.Codes, code)
			}
			slices.Sort(d.Codes)
			ops = append(ops, d)
		}
	}
	slices.SortFunc(ops, func(a, b docsOp) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Method, b.Method)
	})
	var buf bytes.Buffer
	if err := docsPage.Execute(&buf, map[string]any{"Title": doc.Info.Title, "Version": doc.Info.Version, "Description": doc.Info.Description, "Ops": ops}); err != nil {
		apiError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	_, _ = w.Write(buf.Bytes())
}

// EventRecord is one record of the event log as the API answers it.
type EventRecord struct {
	Seq uint64 `json:"seq"`
	eventlog.Record
}

// maxEvents bounds what one query answers.
const maxEvents = 1000

// eventQuery reads the query parameters of /events.
func eventQuery(r *http.Request) (eventlog.Query, int, error) {
	v := r.URL.Query()
	since, err := eventlog.ParseSince(v.Get("since"), time.Now())
	if err != nil {
		return eventlog.Query{}, 0, err
	}
	limit := 200
	if l := v.Get("limit"); l != "" {
		if limit, err = strconv.Atoi(l); err != nil || limit < 1 || limit > maxEvents {
			return eventlog.Query{}, 0, fmt.Errorf("limit is 1 to %d", maxEvents)
		}
	}
	return eventlog.Query{WorkItem: v.Get("workItem"), Type: v.Get("type"), DeliveryID: v.Get("deliveryId"), Since: since}, limit, nil
}

// NewestLog returns the newest limit stored event-log records q selects,
// oldest first, read from q.Since on; a record that is not JSON is kept,
// for its reader to show as unreadable. `the-loop events` and /events read
// the log through it.
func NewestLog(ctx context.Context, conn *bus.Conn, q eventlog.Query, limit int) ([]bus.LogRecord, error) {
	var found []bus.LogRecord
	err := conn.ReadLog(ctx, bus.ReadOptions{Since: q.Since}, func(r bus.LogRecord) error {
		var rec eventlog.Record
		if json.Unmarshal(r.Data, &rec) == nil && !q.Match(rec) {
			return nil
		}
		found = append(found, r)
		if len(found) > limit {
			found = found[1:]
		}
		return nil
	})
	return found, err
}

func (s *server) apiEvents(w http.ResponseWriter, r *http.Request) {
	q, limit, err := eventQuery(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	found, err := NewestLog(ctx, s.o.Observer, q, limit)
	if err != nil {
		s.readFailed(w, "the event log", err)
		return
	}
	out := []EventRecord{}
	for _, lr := range found {
		var rec eventlog.Record
		if json.Unmarshal(lr.Data, &rec) == nil {
			out = append(out, EventRecord{Seq: lr.Seq, Record: rec})
		}
	}
	writeJSON(w, http.StatusOK, map[string][]EventRecord{"events": out})
}

// streamKeepAlive is how often a quiet stream says it is alive, so that
// proxies keep it open.
const streamKeepAlive = 15 * time.Second

// apiStream is a server-sent event stream of the event log: every record
// from now on (or after Last-Event-ID, to resume), filtered by the same
// query as /events. Every change of the loop writes a record, so a client
// refreshes what a record says has changed.
func (s *server) apiStream(w http.ResponseWriter, r *http.Request) {
	q, _, err := eventQuery(r)
	if err != nil {
		apiError(w, http.StatusBadRequest, err.Error())
		return
	}
	var after uint64
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		if after, err = strconv.ParseUint(id, 10, 64); err != nil {
			apiError(w, http.StatusBadRequest, "Last-Event-ID is a record's seq")
			return
		}
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if closing := httpserver.Closing(r.Context()); closing != nil {
		go func() {
			select {
			case <-closing:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	var mu sync.Mutex
	write := func(b []byte) error {
		mu.Lock()
		defer mu.Unlock()
		// The admin server bounds every write; a stream extends its own.
		_ = rc.SetWriteDeadline(time.Now().Add(streamKeepAlive * 2))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	if write([]byte(": the-loop event log\n\n")) != nil {
		return
	}
	// The keep-alive writes to w: it must be done before the handler
	// returns, which ends w.
	var alive sync.WaitGroup
	defer alive.Wait()
	defer cancel()
	alive.Add(1)
	go func() {
		defer alive.Done()
		t := time.NewTicker(streamKeepAlive)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if write([]byte(": alive\n\n")) != nil {
					cancel()
					return
				}
			}
		}
	}()
	err = s.o.Observer.TailLog(ctx, bus.TailOptions{After: after}, func(lr bus.LogRecord) error {
		var rec eventlog.Record
		if json.Unmarshal(lr.Data, &rec) != nil || !q.Match(rec) {
			return nil
		}
		b, err := json.Marshal(EventRecord{Seq: lr.Seq, Record: rec})
		if err != nil {
			return err
		}
		return write(fmt.Appendf(nil, "id: %d\nevent: log\ndata: %s\n\n", lr.Seq, b))
	})
	if err != nil && ctx.Err() == nil {
		s.o.Log.Debug("api: stream ended", "err", err)
	}
}

// apiTranscript answers the end of a work item's session, as its terminal
// shows it (secrets masked), asked of the dispatcher replica that runs it.
func (s *server) apiTranscript(w http.ResponseWriter, r *http.Request) {
	lines := 200
	if l := r.URL.Query().Get("lines"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 2000 {
			apiError(w, http.StatusBadRequest, "lines is 1 to 2000")
			return
		}
		lines = n
	}
	ctx := r.Context()
	ref := r.PathValue("ref")
	store, err := sessions.Open(ctx, s.o.Observer)
	if err != nil {
		s.readFailed(w, "the sessions", err)
		return
	}
	rec, _, err := store.Get(ctx, ref)
	if err != nil {
		s.readFailed(w, "the sessions", err)
		return
	}
	if rec.Session == nil || rec.Session.Host == "" {
		apiError(w, http.StatusNotFound, "no session for "+strconv.Quote(ref))
		return
	}
	req, _ := json.Marshal(dispatcher.TranscriptRequest{Ref: ref, Lines: lines})
	data, err := s.o.Observer.Request(ctx, dispatcher.SubjectTranscript(rec.Session.Host), req)
	var refused *bus.ServiceError
	switch {
	case errors.Is(err, bus.ErrNoResponders):
		apiError(w, http.StatusServiceUnavailable, "no dispatcher answers for "+rec.Session.Host+", where the session runs")
		return
	case errors.As(err, &refused) && refused.Code == bus.CodeNotFound:
		apiError(w, http.StatusNotFound, s.o.Scrub.Scrub(refused.Description))
		return
	case err != nil:
		s.readFailed(w, "the transcript", err)
		return
	}
	var t dispatcher.Transcript
	if err := json.Unmarshal(data, &t); err != nil {
		s.readFailed(w, "the transcript", err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

// maxReply bounds a reply's text, as a Slack message is bounded.
const maxReply = 8000

func (s *server) apiReply(w http.ResponseWriter, r *http.Request) {
	as, text, ok := personBody(w, r, true)
	if !ok {
		return
	}
	ctx := r.Context()
	ref := r.PathValue("ref")
	// A reply to a work item without a session would be recorded and then
	// dropped: refuse it before anything is written.
	if s.notRunning(ctx, ref) {
		apiError(w, http.StatusNotFound, "no running session for "+strconv.Quote(ref))
		return
	}
	acc, err := s.o.Operator.Reply(ctx, Reply{Ref: ref, Text: text, As: as})
	s.answerOperation(w, acc, err, "the reply")
}

func (s *server) apiControl(w http.ResponseWriter, r *http.Request) {
	cmd := r.PathValue("command")
	if !slices.Contains(sessionCommands, cmd) {
		apiError(w, http.StatusBadRequest, "the command is one of "+strings.Join(sessionCommands, ", "))
		return
	}
	as, _, ok := personBody(w, r, false)
	if !ok {
		return
	}
	ctx := r.Context()
	acc, err := s.o.Operator.Control(ctx, Control{Ref: r.PathValue("ref"), Command: cmd, As: as})
	s.answerOperation(w, acc, err, "the "+cmd)
}

// StandingSession is one standing session as the API lists it: its entry
// in the config and how its session stands.
type StandingSession struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Ledger      string `json:"ledger"`
	AutoStart   bool   `json:"autoStart"`
	Slack       bool   `json:"slack"`
	Status      string `json:"status"`
}

func (s *server) apiStanding(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	store, err := sessions.Open(ctx, s.o.Observer)
	if err != nil {
		s.readFailed(w, "the sessions", err)
		return
	}
	st := s.o.Config().Standing
	out := []StandingSession{}
	for _, e := range st.Sessions {
		x := StandingSession{Name: e.Name, Description: e.Description, Ledger: e.Ledger, AutoStart: e.AutoStart, Slack: e.Slack, Status: "not running"}
		if !st.Enabled {
			x.Status = "off (standingSessions.enabled)"
		} else if e.Ledger == "" {
			x.Status = "cannot start: no ledger issue"
		} else if rec, _, err := store.Get(ctx, e.Ledger); err == nil && rec.Session.Live() {
			x.Status = string(rec.Session.Status)
		}
		out = append(out, x)
	}
	writeJSON(w, http.StatusOK, map[string]any{"enabled": st.Enabled, "sessions": out})
}

// standingEntry finds the standing session the request names, answering
// 404 when the config has none by that name, 409 when it cannot run.
func (s *server) standingEntry(w http.ResponseWriter, r *http.Request) (string, bool) {
	st := s.o.Config().Standing
	for _, e := range st.Sessions {
		if e.Name != r.PathValue("name") {
			continue
		}
		if !st.Enabled || e.Ledger == "" {
			apiError(w, http.StatusConflict, "standing session "+e.Name+" cannot run: standingSessions.enabled is off or its entry names no ledger issue")
			return "", false
		}
		return e.Ledger, true
	}
	apiError(w, http.StatusNotFound, "no standing session "+strconv.Quote(r.PathValue("name"))+" in standingSessions")
	return "", false
}

// personBody reads a body that names the person acting, and, with text,
// what they say.
func personBody(w http.ResponseWriter, r *http.Request, text bool) (as, said string, ok bool) {
	var body struct {
		As   string `json:"as"`
		Text string `json:"text"`
	}
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	err := dec.Decode(&body)
	body.Text = strings.TrimSpace(body.Text)
	switch {
	case err != nil || body.As == "":
		apiError(w, http.StatusBadRequest, "the body is a JSON object with as: the GitHub login of the person, as routing.authorizedUsers names them")
		return "", "", false
	case text && body.Text == "":
		apiError(w, http.StatusBadRequest, "text is required")
		return "", "", false
	case !text && body.Text != "":
		apiError(w, http.StatusBadRequest, "a command takes no text")
		return "", "", false
	case len(body.Text) > maxReply:
		apiError(w, http.StatusBadRequest, fmt.Sprintf("text is at most %d bytes", maxReply))
		return "", "", false
	}
	return body.As, body.Text, true
}

func (s *server) apiStandingCommand(w http.ResponseWriter, r *http.Request) {
	cmd := r.PathValue("command")
	if cmd != "start" && cmd != "stop" {
		apiError(w, http.StatusBadRequest, "the command is start or stop (say has its own body)")
		return
	}
	ledger, ok := s.standingEntry(w, r)
	if !ok {
		return
	}
	as, _, ok := personBody(w, r, false)
	if !ok {
		return
	}
	ctx := r.Context()
	acc, err := s.o.Operator.Control(ctx, Control{Ref: ledger, Command: cmd, As: as})
	s.answerOperation(w, acc, err, "the "+cmd)
}

func (s *server) apiStandingSay(w http.ResponseWriter, r *http.Request) {
	ledger, ok := s.standingEntry(w, r)
	if !ok {
		return
	}
	as, text, ok := personBody(w, r, true)
	if !ok {
		return
	}
	ctx := r.Context()
	if s.notRunning(ctx, ledger) {
		apiError(w, http.StatusConflict, "standing session "+r.PathValue("name")+" is not running: start it first")
		return
	}
	acc, err := s.o.Operator.Reply(ctx, Reply{Ref: ledger, Text: text, As: as})
	s.answerOperation(w, acc, err, "the message")
}

// answerOperation answers an operator's publish: 202 with what was
// accepted, or the refusal.
func (s *server) answerOperation(w http.ResponseWriter, acc any, err error, what string) {
	switch {
	case errors.Is(err, ErrUnknownPerson):
		apiError(w, http.StatusBadRequest, "as: "+err.Error())
	case errors.Is(err, ErrCommandDisabled):
		apiError(w, http.StatusConflict, err.Error())
	case err != nil:
		s.o.Log.Warn("api: publish failed", "what", what, "err", err)
		apiError(w, http.StatusBadGateway, what+" could not be published; the host's log says why")
	default:
		writeJSON(w, http.StatusAccepted, acc)
	}
}

// EffectiveConfig is the operator config in force as the API shows it:
// what it decides, never a secret. The process settings the file sets are
// named, not valued (a token's variable is one), and the harness's
// arguments are scrubbed.
type EffectiveConfig struct {
	Version         string              `json:"version"`
	AuthorizedUsers []ConfigPerson      `json:"authorizedUsers"`
	Control         ConfigControl       `json:"control"`
	Harness         string              `json:"harness"`
	HarnessArgs     map[string][]string `json:"harnessArgs"`
	Slack           ConfigSlack         `json:"slack"`
	Graphs          ConfigGraphs        `json:"graphs"`
	Standing        []string            `json:"standing"`
	Settings        []ConfigSetting     `json:"settings"`
}

// ConfigPerson is one entry of routing.authorizedUsers.
type ConfigPerson struct {
	GitHub string `json:"github,omitempty"`
	Slack  string `json:"slack,omitempty"`
	Name   string `json:"name,omitempty"`
}

// ConfigControl is routing.control.
type ConfigControl struct {
	Enabled             bool              `json:"enabled"`
	RequireStartCommand bool              `json:"requireStartCommand"`
	Keywords            map[string]string `json:"keywords"`
}

// ConfigSlack is channels.slack.
type ConfigSlack struct {
	Enabled   bool     `json:"enabled"`
	Channel   string   `json:"channel"`
	Subscribe []string `json:"subscribe"`
	Publish   []string `json:"publish"`
	Verbosity string   `json:"verbosity"`
	Read      string   `json:"read"`
}

// ConfigGraphs is graphs: the one work items follow and every one known.
type ConfigGraphs struct {
	WorkItem  string   `json:"workItem"`
	Files     []string `json:"files"`
	Available []string `json:"available"`
}

// ConfigSetting is a process setting the file sets, named, never valued.
type ConfigSetting struct {
	Name string `json:"name"`
	Path string `json:"path"`
}

func (s *server) apiConfig(w http.ResponseWriter, _ *http.Request) {
	cfg := s.o.Config()
	out := EffectiveConfig{Version: cfg.Version, AuthorizedUsers: []ConfigPerson{}, HarnessArgs: map[string][]string{},
		Control:  ConfigControl{Enabled: cfg.Routing.Control.Enabled, RequireStartCommand: cfg.Routing.Control.RequireStartCommand, Keywords: map[string]string{}},
		Harness:  cfg.Routing.Harness.Default,
		Standing: []string{}, Settings: []ConfigSetting{},
		Graphs: ConfigGraphs{WorkItem: cfg.Graphs.WorkItem, Files: append([]string{}, cfg.Graphs.Files...), Available: cfg.Graphs.Registry().Names()},
	}
	for _, p := range cfg.Routing.AuthorizedUsers.People() {
		out.AuthorizedUsers = append(out.AuthorizedUsers, ConfigPerson{GitHub: p.GitHub, Slack: p.Slack, Name: p.Name})
	}
	for k, v := range cfg.Routing.Control.Keywords {
		out.Control.Keywords[k] = v
	}
	for kind, args := range cfg.Routing.Harness.Args {
		for _, a := range args {
			out.HarnessArgs[kind] = append(out.HarnessArgs[kind], s.o.Scrub.Scrub(a))
		}
	}
	sl := cfg.Channels.Slack
	out.Slack = ConfigSlack{Enabled: sl.Enabled, Channel: sl.Channel, Subscribe: []string{}, Publish: []string{}, Verbosity: string(sl.Verbosity), Read: string(sl.Read.Mode)}
	for _, t := range sl.Subscribe {
		out.Slack.Subscribe = append(out.Slack.Subscribe, string(t))
	}
	for _, t := range sl.Publish {
		out.Slack.Publish = append(out.Slack.Publish, string(t))
	}
	for _, st := range cfg.Standing.Sessions {
		out.Standing = append(out.Standing, st.Name)
	}
	for _, st := range cfg.Settings {
		out.Settings = append(out.Settings, ConfigSetting{Name: st.Name, Path: st.Path})
	}
	writeJSON(w, http.StatusOK, out)
}

// notRunning reports whether the registry says ref has no live session.
// When it cannot be read, the dispatcher decides.
func (s *server) notRunning(ctx context.Context, ref string) bool {
	if s.o.Observer == nil {
		return false
	}
	store, err := sessions.Open(ctx, s.o.Observer)
	if err != nil {
		return false
	}
	rec, _, err := store.Get(ctx, ref)
	return err == nil && !rec.Session.Live()
}

// apiGraph answers a work item's graph state as `the-loop graph status`
// shows it: the state itself (history, decisions, overrides, approvals,
// why it is held), read from the graph bucket, and how this host's config
// reads it.
func (s *server) apiGraph(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	ref := r.PathValue("ref")
	store, err := graphstate.Open(ctx, s.o.Observer)
	if err != nil {
		s.readFailed(w, "the graph state", err)
		return
	}
	st, rev, err := store.Get(ctx, ref)
	switch {
	case errors.Is(err, graphstate.ErrOtherRef):
		apiError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		s.readFailed(w, "the graph state", err)
		return
	case st == nil:
		apiError(w, http.StatusNotFound, ref+" has no graph state: no session has started its graph")
		return
	}
	ans := dispatcher.GraphStatus{Ref: ref, URL: graphstate.WorkItemURL(ref), Revision: rev, State: st, AtHumanGate: st.Status == graph.StatusWaiting}
	if g, ok := s.o.Config().Graphs.Registry().Get(st.Graph); ok {
		ans.Known, ans.AtHumanGate = true, st.AtHumanGate(g)
		if n := g.Node(st.Current); n != nil {
			ans.Phase = n.Phase
		}
	}
	writeJSON(w, http.StatusOK, ans)
}
