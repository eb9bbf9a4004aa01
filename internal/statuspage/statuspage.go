// Package statuspage is the status page the admin server serves at /status:
// what each work item is doing (its graph, the gate it waits at and for
// whom, approvedBy with each approval's record), the agent sessions, the
// dead letters, and the bus — every stream and each partition's consumer,
// and the last events that crossed it (ids and types only, as the event log
// does). It reads the streams' and consumers' state over any identity's
// connection, and the state the services keep (KV buckets, the dead letters,
// the events) over the observer's: a service's own identity reads only what
// it consumes. Any service's admin port serves it; without the observer's
// credential it shows the bus alone and says what the rest needs. The page is one HTML document with its
// script inline (no external assets); it polls a JSON document and updates
// in place.
//
// It also shows what the host knows of its own state: every check /readyz
// fails, with its reason, and, under `the-loop up`, the first-run checklist
// `up` prints at start, so a run that cannot do something (no harness, no
// token) does not look healthy on the page. `/` redirects to it, so the
// admin address alone opens it.
//
// Access is local-only by default: a loopback client naming a loopback host
// reads it; beyond loopback it is served only when exposed, to a client
// presenting the status token. Replaying a dead letter needs the admin
// token and an operator identity, and is not offered otherwise
// (docs/decisions/102-status-page-reads-as-the-observer.md,
// 076-status-page-access.md).
//
// Beside the page it serves the control plane's HTTP API, /api/v1 (api.go,
// docs/api.md): the same reads one resource at a time and the operator's
// moves, held to the OpenAPI 3.1 contract in openapi.yaml
// (docs/decisions/122-control-plane-api.md).
package statuspage

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/pkg/threads"
)

//go:embed page.html
var page []byte

//go:embed dashboard.html
var dashboard []byte

// Replayer republishes a dead letter: an operator's connection.
type Replayer interface {
	ReplayDLQ(ctx context.Context, seq uint64) (bus.ReplayResult, error)
}

// Options is what the page reads and who may see and act on it.
type Options struct {
	// Conn reads the streams' and consumers' state, which every identity
	// may read.
	Conn *bus.Conn
	// Observer reads the rest: the graph, sessions and threads buckets, the
	// dead letters and the newest events, which only the observer (and the
	// operator) may read. Nil: the page shows those parts as needing it
	// (docs/decisions/102-status-page-reads-as-the-observer.md).
	Observer *bus.Conn
	// Config is the operator config in force (graphs, people, the channel).
	Config func() *config.Config
	// Topology names the streams and consumer groups.
	Topology bus.Topology
	// Expose serves beyond loopback, to clients presenting Token.
	Expose bool
	Token  string
	// AdminToken unlocks Replay for whoever presents it; with either
	// unset the page has no actions.
	AdminToken string
	Replay     Replayer
	// Operator makes the API's other operator moves (graph overrides);
	// nil: the API refuses them. Like Replay, it needs AdminToken.
	Operator Operator
	// Events records replays (bus.replayed); may be nil.
	Events *eventlog.Logger
	// Scrub masks secrets in the dead letters' reasons.
	Scrub redact.Scrubber
	Log   *slog.Logger
	// Ready returns the host's failing readiness checks by name, what
	// /readyz answers 503 with; nil: the page shows no readiness.
	Ready func() map[string]string
	// Checklist is the first-run checklist (`the-loop up` prints it at
	// start); nil on a host that has none.
	Checklist func() []Capability
}

// Capability is one line of the first-run checklist: a thing the run can
// do, and what it lacks (empty: it can).
type Capability struct {
	Name    string   `json:"name"`
	Missing []string `json:"missing"`
}

// NotReady is one failing readiness check.
type NotReady struct {
	Check  string `json:"check"`
	Reason string `json:"reason"`
}

// Register adds the page's routes to mux.
func Register(mux *http.ServeMux, o Options) {
	s := &server{o: o}
	// The admin address alone opens the page; the redirect carries
	// nothing, so it needs no guard.
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/status", http.StatusFound)
	})
	mux.HandleFunc("GET /status", s.guard(s.page))
	mux.HandleFunc("GET /dashboard", s.guard(s.dashboard))
	mux.HandleFunc("GET /status/api/state", s.guard(s.state))
	mux.HandleFunc("POST /status/api/dlq/{seq}/replay", s.guard(s.replay))
	registerAPI(mux, s)
}

type server struct{ o Options }

// role is what a request may do.
type role int

const (
	nobody role = iota
	viewer
	admin
)

func (s *server) role(r *http.Request) role {
	bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if s.o.AdminToken != "" && bearer != "" && equal(bearer, s.o.AdminToken) {
		return admin
	}
	if s.o.Expose && s.o.Token != "" && bearer != "" && equal(bearer, s.o.Token) {
		return viewer
	}
	if loopbackClient(r) && loopbackHost(r.Host) {
		return viewer
	}
	return nobody
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// loopbackClient: the request came over loopback (a local browser, or a
// port-forward into the pod).
func loopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// loopbackHost: the request names a loopback host, so a page of another
// site that rebinds its name to 127.0.0.1 cannot read the state.
func loopbackHost(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		host = hostport
	}
	host = strings.Trim(host, "[]")
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// guard serves h to a request that may read the page. The page itself
// (static, no data) is served to any client when exposed, so that a
// browser beyond loopback can load it and present the token with its
// requests.
func (s *server) guard(h func(http.ResponseWriter, *http.Request, role)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Referrer-Policy", "no-referrer")
		ro := s.role(r)
		static := r.URL.Path == "/status" || r.URL.Path == "/dashboard"
		if ro == nobody && !(s.o.Expose && static && r.Method == http.MethodGet) {
			if !loopbackClient(r) && !s.o.Expose {
				http.Error(w, "the status page is served to loopback clients only (LOOP_STATUS_EXPOSE)", http.StatusForbidden)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="the-loop status"`)
			http.Error(w, "present the status token (Authorization: Bearer …)", http.StatusUnauthorized)
			return
		}
		h(w, r, ro)
	}
}

// dashboard is the control plane's page over the API (docs/api.md): what
// needs a person, the work items, sessions, dead letters and the event log,
// kept current by the API's stream.
func (s *server) dashboard(w http.ResponseWriter, _ *http.Request, _ role) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	_, _ = w.Write(dashboard)
}

// pageCSP lets the pages run their own inline script and speak to their
// own origin, nothing else.
const pageCSP = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func (s *server) page(w http.ResponseWriter, _ *http.Request, _ role) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", pageCSP)
	_, _ = w.Write(page)
}

// readTimeout bounds one state read.
const readTimeout = 5 * time.Second

func (s *server) state(w http.ResponseWriter, r *http.Request, ro role) {
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	st := s.read(ctx)
	st.Role = "viewer"
	if ro == admin {
		st.Role = "admin"
	}
	st.CanReplay = ro == admin && s.o.Replay != nil
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}

func (s *server) replay(w http.ResponseWriter, r *http.Request, ro role) {
	if ro != admin || s.o.Replay == nil {
		http.Error(w, "replaying a dead letter needs the admin token (LOOP_ADMIN_TOKEN) and the operator identity", http.StatusForbidden)
		return
	}
	s.replayAnswer(w, r, func(w http.ResponseWriter, code int, msg string) { http.Error(w, msg, code) })
}

// replayAnswer replays the dead letter r names as the operator and
// answers with what was replayed; a refusal or failure is answered through
// fail, which the page writes as text and the API as JSON.
func (s *server) replayAnswer(w http.ResponseWriter, r *http.Request, fail func(w http.ResponseWriter, code int, msg string)) {
	seq, err := strconv.ParseUint(r.PathValue("seq"), 10, 64)
	if err != nil || seq == 0 {
		fail(w, http.StatusBadRequest, "not a DLQ sequence number")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), readTimeout)
	defer cancel()
	res, err := s.o.Replay.ReplayDLQ(ctx, seq)
	switch {
	case errors.Is(err, bus.ErrNoSuchDeadLetter):
		fail(w, http.StatusNotFound, "no such dead letter (replayed already?)")
		return
	case errors.Is(err, bus.ErrReplayRefused):
		// Not the copy of a consumer, or not a signed original: why is
		// identities and subjects, nothing secret (decision 099).
		s.o.Log.Warn("status: replay refused", "dlq_seq", seq, "err", err)
		fail(w, http.StatusConflict, s.o.Scrub.Scrub(err.Error()))
		return
	case err != nil:
		s.o.Log.Warn("status: replay failed", "dlq_seq", seq, "err", err)
		fail(w, http.StatusBadGateway, "the replay failed; the event log and the service logs say why")
		return
	}
	if s.o.Events != nil {
		s.o.Events.Emit(context.WithoutCancel(ctx), "bus.replayed", slog.Uint64("dlq_seq", seq), slog.String("event_id", res.MsgID),
			slog.String("replay_of", res.Original), slog.String("subject", res.Subject), slog.Uint64("stream_seq", res.PubAck.Seq))
	}
	writeJSON(w, http.StatusOK, map[string]any{"seq": seq, "eventId": res.MsgID, "subject": res.Subject})
}

// State is the JSON document the page renders.
type State struct {
	GeneratedAt time.Time    `json:"generatedAt"`
	Role        string       `json:"role"`
	CanReplay   bool         `json:"canReplay"`
	WorkItems   []WorkItem   `json:"workItems"`
	Sessions    []Session    `json:"sessions"`
	DeadLetters []DeadLetter `json:"deadLetters"`
	Streams     []Stream     `json:"streams"`
	Consumers   []Consumer   `json:"consumers"`
	Recent      []Recent     `json:"recent"`
	// Checklist is the first-run checklist, nil where the host has none.
	Checklist []Capability `json:"checklist,omitempty"`
	// Readiness says whether the host reports its readiness (Ready set);
	// NotReady lists every failing check, sorted by name.
	Readiness bool       `json:"readiness"`
	NotReady  []NotReady `json:"notReady"`
	// Problems are the parts that could not be read, by part.
	Problems map[string]string `json:"problems,omitempty"`
}

// WorkItem is one work item's graph state.
type WorkItem struct {
	Ref     string `json:"ref"`
	URL     string `json:"url"`
	Graph   string `json:"graph"`
	Current string `json:"current"`
	Status  string `json:"status"`
	Nodes   []Node `json:"nodes"`
	// Gate is the human gate it waits at, if it does.
	Gate *Gate `json:"gate,omitempty"`
	// Reason is why the work item is held where it is: a gate's wait, or
	// the findings of an agent node's checks (validate-artifacts,
	// verify-tests) that kept its done from being accepted.
	Reason string `json:"reason,omitempty"`
	// Skips are the nodes the phase selection chose to skip.
	Skips      []string   `json:"skips"`
	ApprovedBy []Approval `json:"approvedBy"`
	Thread     *Thread    `json:"thread,omitempty"`
	UpdatedAt  time.Time  `json:"updatedAt"`
}

// Node is one node of the graph, in declaration order.
type Node struct {
	Name    string `json:"name"`
	Actor   string `json:"actor"`
	Phase   string `json:"phase,omitempty"`
	Current bool   `json:"current"`
	Visited bool   `json:"visited"`
	// Skipped: the phase selection chose to skip it.
	Skipped bool `json:"skipped,omitempty"`
	// Checks are what must hold before the node is left (its exit hooks).
	Checks []string `json:"checks,omitempty"`
	// Next maps each outcome to the node it leads to.
	Next map[string]string `json:"next,omitempty"`
}

// Gate is the gate a work item waits at and who may answer it.
type Gate struct {
	Node       string    `json:"node"`
	Kind       string    `json:"kind"`
	Phase      string    `json:"phase,omitempty"`
	Since      time.Time `json:"since"`
	Reason     string    `json:"reason,omitempty"`
	WaitingFor []string  `json:"waitingFor"`
}

// Approval is one approval and where it was given.
type Approval struct {
	Login     string    `json:"login"`
	Node      string    `json:"node"`
	At        time.Time `json:"at"`
	Channel   string    `json:"channel"`
	Member    string    `json:"member,omitempty"`
	RecordURL string    `json:"recordURL,omitempty"`
	EventID   string    `json:"eventID,omitempty"`
}

// Thread is the Slack thread bound to a work item.
type Thread struct {
	Channel string `json:"channel"`
	TS      string `json:"ts"`
}

// Session is one work item's agent session.
type Session struct {
	Ref         string    `json:"ref"`
	Status      string    `json:"status"`
	Host        string    `json:"host"`
	CreatedAt   time.Time `json:"createdAt,omitzero"`
	LastInput   string    `json:"lastInput,omitempty"`
	LastInputAt time.Time `json:"lastInputAt,omitzero"`
	Control     string    `json:"control,omitempty"`
	// TmuxTarget and HarnessSession name the session on its host;
	// Delivered counts the events typed into it, Uncertain is the one
	// whose paste is not yet known to have landed.
	// AwaitingInput is the question the session asked that no answer has
	// reached yet.
	AwaitingInput  string `json:"awaitingInput,omitempty"`
	TmuxTarget     string `json:"tmuxTarget,omitempty"`
	HarnessSession string `json:"harnessSession,omitempty"`
	Delivered      int    `json:"delivered"`
	Uncertain      string `json:"uncertain,omitempty"`
}

// DeadLetter is one LOOP_DLQ entry.
type DeadLetter struct {
	Seq        uint64    `json:"seq"`
	EventID    string    `json:"eventId"`
	Subject    string    `json:"subject"`
	Consumer   string    `json:"consumer"`
	Reason     string    `json:"reason"`
	Deliveries uint64    `json:"deliveries"`
	Time       time.Time `json:"time"`
}

// Stream is one stream's size.
type Stream struct {
	Name      string `json:"name"`
	Messages  uint64 `json:"messages"`
	Bytes     uint64 `json:"bytes"`
	Consumers int    `json:"consumers"`
}

// Consumer is one partition's consumer.
type Consumer struct {
	Service     string `json:"service"`
	Stream      string `json:"stream"`
	Partition   int    `json:"partition"`
	Pending     uint64 `json:"pending"`
	AckPending  uint64 `json:"ackPending"`
	Redelivered uint64 `json:"redelivered"`
	Delivered   uint64 `json:"delivered"`
	Waiting     int    `json:"waiting"`
}

// Recent is one event that crossed the bus: ids and types only.
type Recent struct {
	Stream string    `json:"stream"`
	Seq    uint64    `json:"seq"`
	ID     string    `json:"id"`
	Type   string    `json:"type"`
	Time   time.Time `json:"time"`
}

// recentEvents is how many of the newest events the page lists.
const recentEvents = 25

func (s *server) read(ctx context.Context) State {
	st := State{GeneratedAt: time.Now().UTC(), Problems: map[string]string{}, WorkItems: []WorkItem{}, Sessions: []Session{},
		DeadLetters: []DeadLetter{}, Streams: []Stream{}, Consumers: []Consumer{}, Recent: []Recent{}, NotReady: []NotReady{}}
	if s.o.Checklist != nil {
		st.Checklist = s.o.Checklist()
	}
	if s.o.Ready != nil {
		st.Readiness = true
		for check, reason := range s.o.Ready() {
			// As /readyz says it, on the same port to the same clients:
			// scrubbing would mask the paths and addresses that say what
			// to fix.
			st.NotReady = append(st.NotReady, NotReady{Check: check, Reason: reason})
		}
		slices.SortFunc(st.NotReady, func(a, b NotReady) int { return strings.Compare(a.Check, b.Check) })
	}
	problem := func(part string, err error) {
		s.o.Log.Debug("status page: read", "part", part, "err", err)
		st.Problems[part] = "could not be read"
	}
	if s.o.Observer == nil {
		for _, part := range []string{"workItems", "sessions", "deadLetters", "recent"} {
			st.Problems[part] = NeedsObserver
		}
	} else {
		s.readContent(ctx, &st, problem)
	}
	for _, name := range []string{bus.StreamInbox, bus.StreamEvents, bus.StreamDLQ, bus.StreamLog, bus.StreamAdvisories} {
		ss, err := s.o.Conn.StreamStats(ctx, name)
		if err != nil {
			problem("streams", err)
			continue
		}
		st.Streams = append(st.Streams, Stream{Name: name, Messages: ss.Msgs, Bytes: ss.Bytes, Consumers: ss.Consumers})
	}
	t := s.o.Topology
	for _, g := range t.Consumers {
		for p := range t.Partitions {
			cs, err := s.o.Conn.ConsumerStats(ctx, g.Stream, bus.ConsumerName(g.Service, p))
			if err != nil {
				problem("consumers", err)
				continue
			}
			st.Consumers = append(st.Consumers, Consumer{Service: g.Service, Stream: g.Stream, Partition: p, Pending: cs.Pending,
				AckPending: cs.AckPending, Redelivered: cs.Redelivered, Delivered: cs.Delivered, Waiting: cs.Waiting})
		}
	}
	return st
}

// NeedsObserver is what the page says of a part only the observer's
// credential reads.
const NeedsObserver = "needs the observer's credential (LOOP_STATUS_NKEY_FILE)"

// readContent reads, as the observer, the parts of st a service's own
// identity may not read.
func (s *server) readContent(ctx context.Context, st *State, problem func(string, error)) {
	cfg := s.o.Config()
	if items, err := s.workItems(ctx, cfg); err != nil {
		problem("workItems", err)
	} else {
		st.WorkItems = items
	}
	if sessions, err := s.sessions(ctx); err != nil {
		problem("sessions", err)
	} else {
		st.Sessions = sessions
	}
	if dl, err := s.deadLetters(ctx); err != nil {
		problem("deadLetters", err)
	} else {
		st.DeadLetters = dl
	}
	if recent, err := s.o.Observer.RecentMessages(ctx, bus.StreamEvents, recentEvents); err != nil {
		problem("recent", err)
	} else {
		for _, m := range recent {
			st.Recent = append(st.Recent, Recent{Stream: m.Stream, Seq: m.Seq, ID: m.ID, Type: m.Type, Time: m.Time})
		}
	}
}

// workItems reads every work item's graph state (KV graph), newest first.
func (s *server) workItems(ctx context.Context, cfg *config.Config) ([]WorkItem, error) {
	kv, err := s.o.Observer.KV(ctx, bus.BucketGraph)
	if err != nil {
		return nil, err
	}
	keys, err := kv.Keys(ctx)
	if err != nil && !errors.Is(err, bus.ErrNotFound) && !strings.Contains(err.Error(), "no keys found") {
		return nil, err
	}
	tkv := s.threads(ctx, cfg)
	out := []WorkItem{}
	for _, key := range keys {
		e, err := kv.Get(ctx, key)
		if err != nil {
			continue
		}
		if wi, ok := s.workItem(ctx, cfg, tkv, e); ok {
			out = append(out, wi)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].UpdatedAt.After(out[j].UpdatedAt) })
	return out, nil
}

// oneWorkItem reads ref's graph state alone; false when it has none.
func (s *server) oneWorkItem(ctx context.Context, cfg *config.Config, ref string) (WorkItem, bool, error) {
	kv, err := s.o.Observer.KV(ctx, bus.BucketGraph)
	if err != nil {
		return WorkItem{}, false, err
	}
	e, err := kv.Get(ctx, graphstate.Key(ref))
	switch {
	case errors.Is(err, bus.ErrNotFound):
		return WorkItem{}, false, nil
	case err != nil:
		return WorkItem{}, false, err
	}
	wi, ok := s.workItem(ctx, cfg, s.threads(ctx, cfg), e)
	return wi, ok && wi.Ref == ref, nil
}

// threads is the threads bucket when the config names a Slack channel.
func (s *server) threads(ctx context.Context, cfg *config.Config) *bus.KV {
	if cfg.Channels.Slack.Channel == "" {
		return nil
	}
	tkv, _ := s.o.Observer.KV(ctx, bus.BucketThreads)
	return tkv
}

// workItem is the work item whose graph state e holds, as the page and the
// API show it; false when e is not a graph state.
func (s *server) workItem(ctx context.Context, cfg *config.Config, tkv *bus.KV, e bus.KVEntry) (WorkItem, bool) {
	st, err := graph.Decode(e.Value)
	if err != nil || st.Ref == "" {
		return WorkItem{}, false
	}
	wi := WorkItem{Ref: st.Ref, URL: graphstate.WorkItemURL(st.Ref), Graph: st.Graph, Current: st.Current, Status: string(st.Status),
		Reason: st.Reason, Skips: append([]string{}, st.Skips...), ApprovedBy: []Approval{}, UpdatedAt: e.Created}
	visited := map[string]bool{}
	for _, h := range st.History {
		visited[h.Node] = true
	}
	g, _ := cfg.Graphs.Registry().Get(st.Graph)
	if g != nil {
		for _, n := range g.Nodes {
			x := Node{Name: n.Name, Actor: string(n.Actor), Phase: n.Phase, Current: n.Name == st.Current, Visited: visited[n.Name],
				Skipped: slices.Contains(st.Skips, n.Name)}
			for _, h := range n.Exit {
				x.Checks = append(x.Checks, string(h.Name))
			}
			if len(n.On) > 0 {
				x.Next = map[string]string{}
				for o, to := range n.On {
					x.Next[string(o)] = to
				}
			}
			wi.Nodes = append(wi.Nodes, x)
		}
		if st.AtHumanGate(g) {
			n := g.Node(st.Current)
			gate := &Gate{Node: n.Name, Kind: string(n.Gate), Phase: n.Phase, Reason: st.Reason, WaitingFor: waitingFor(cfg)}
			if len(st.History) > 0 {
				gate.Since = st.History[len(st.History)-1].EnteredAt
			}
			wi.Gate = gate
		}
	} else {
		wi.Nodes = append(wi.Nodes, Node{Name: st.Current, Current: true, Visited: true})
	}
	for _, a := range st.ApprovedBy {
		wi.ApprovedBy = append(wi.ApprovedBy, Approval{Login: a.Login, Node: a.Node, At: a.At, Channel: a.Provenance.Channel,
			Member: a.Provenance.Member, RecordURL: a.Provenance.RecordURL, EventID: a.Provenance.EventID})
	}
	if tkv != nil {
		if ts, ok, err := threads.New(tkv).ThreadFor(ctx, cfg.Channels.Slack.Channel, st.Ref); err == nil && ok {
			wi.Thread = &Thread{Channel: cfg.Channels.Slack.Channel, TS: ts}
		}
	}
	return wi, true
}

// waitingFor names who may answer a human gate: the authorized people
// with a GitHub login (a gate moves on a person's record on GitHub).
func waitingFor(cfg *config.Config) []string {
	var out []string
	for _, p := range cfg.Routing.AuthorizedUsers.People() {
		if p.GitHub == "" {
			continue
		}
		name := p.GitHub
		if p.Name != "" {
			name = p.Name + " (" + p.GitHub + ")"
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// NoSession is Session.Status of a work item whose record holds no session.
const NoSession = "no session"

// SessionOf is a session's record as the page, the API and `the-loop
// sessions list` show it.
func SessionOf(r sessions.Record) Session {
	x := Session{Ref: r.Ref, Status: NoSession}
	if ss := r.Session; ss != nil {
		x.Status, x.Host, x.CreatedAt, x.LastInputAt = string(ss.Status), ss.Host, ss.CreatedAt, ss.LastEventAt
		x.TmuxTarget, x.HarnessSession, x.Delivered, x.Uncertain = ss.TmuxTarget, ss.HarnessSessionID, len(ss.Delivered), ss.Pending
		x.AwaitingInput = ss.AwaitingInput
		if n := len(ss.Delivered); n > 0 {
			x.LastInput = ss.Delivered[n-1]
		}
	}
	if c := r.Control; c != nil {
		x.Control = c.Command + " by " + c.Actor
	}
	return x
}

func (s *server) sessions(ctx context.Context) ([]Session, error) {
	store, err := sessions.Open(ctx, s.o.Observer)
	if err != nil {
		return nil, err
	}
	recs, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	out := []Session{}
	for _, r := range recs {
		out = append(out, SessionOf(r))
	}
	return out, nil
}
