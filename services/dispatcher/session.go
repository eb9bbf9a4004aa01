package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/sessions"
	"github.com/the-loop/bus/services/dispatcher/internal/ask"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// The session endpoint (package sessionapi): the only door from an agent
// session into the loop. Sessions run on this host, so it listens on
// loopback; each session proves itself with the token it was started with,
// whose hash the registry keeps, and may act only on its own work item.

// askWaitDefault and askWaitMax bound how long an ask waits for its record.
const (
	askWaitDefault = 60 * time.Second
	askWaitMax     = 5 * time.Minute
)

// Session endpoint refusals (the reason of a session.refused record).
const (
	refusedNoToken     = "no-token"
	refusedBadToken    = "bad-token"
	refusedNoSession   = "no-session"
	refusedOtherItem   = "other-work-item"
	refusedElsewhere   = "hosted-elsewhere"
	refusedEmptyAsk    = "empty-question"
	refusedBadRequest  = "bad-request"
	refusedTooLarge    = "too-large"
	refusedUnavailable = "registry-unavailable"
	refusedHumanGate   = "human-gate"
)

// sessionEndpoint serves the session endpoint. It authenticates a session
// by the token hash in the registry, and answers through the bus (a
// question) or the graph gates (status, complete); it never touches a
// terminal.
type sessionEndpoint struct {
	host string
	addr string
	// urlHost is Settings.SessionEndpointHost.
	urlHost  string
	sessions *atomic.Pointer[sessions.Store]
	gates    *gates
	conn     *bus.Conn
	log      *slog.Logger
	events   *eventlog.Logger
	refused  *prometheus.CounterVec
	// scrubber masks secrets (Settings.Scrub); nil uses redact.FromOS.
	scrubber func(string) string
	// critic runs the critic rounds sessions ask for (critic.go).
	critic *criticRunner
}

// listen opens the session endpoint's listener and returns the URL
// sessions are given.
func (ep *sessionEndpoint) listen() (net.Listener, string, error) {
	ln, err := httpserver.Listen("LOOP_SESSION_ADDR", ep.addr)
	if err != nil {
		return nil, "", fmt.Errorf("session endpoint: %w", err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	switch ep.urlHost {
	case "":
	case "hostname":
		// Sessions in another container reach this one by its name
		// there (a replica's own, unlike a service's).
		name, err := os.Hostname()
		if err != nil {
			ln.Close()
			return nil, "", fmt.Errorf("session endpoint: LOOP_SESSION_ENDPOINT_HOST is hostname: %w", err)
		}
		host = name
	default:
		host = ep.urlHost
	}
	return ln, "http://" + net.JoinHostPort(host, port), nil
}

// serve answers the session endpoint on ln until ctx ends.
func (ep *sessionEndpoint) serve(ctx context.Context, ln net.Listener) error {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+sessionapi.PathAsk, ep.withSession(ep.ask))
	mux.HandleFunc("POST "+sessionapi.PathComplete, ep.withSession(ep.complete))
	mux.HandleFunc("POST "+sessionapi.PathEscalate, ep.withSession(ep.escalate))
	mux.HandleFunc("GET "+sessionapi.PathStatus, ep.withSession(ep.status))
	mux.HandleFunc("GET "+sessionapi.PathCheck, ep.withSession(ep.check))
	mux.HandleFunc("GET "+sessionapi.PathGraph, ep.withSession(ep.graphView))
	mux.HandleFunc("POST "+sessionapi.PathRegister, ep.withSession(ep.register))
	mux.HandleFunc("POST "+sessionapi.PathLinkPR, ep.withSession(ep.linkPR))
	mux.HandleFunc("GET "+sessionapi.PathInstructions, ep.withSession(ep.instructions))
	mux.HandleFunc("GET "+sessionapi.PathScenarios, ep.withSession(ep.scenarios))
	// A critic round lives as long as the dispatcher, not its request.
	ep.critic.base = ctx
	mux.HandleFunc("GET "+sessionapi.PathCritics, ep.withSession(ep.criticsList))
	mux.HandleFunc("POST "+sessionapi.PathCriticRun, ep.withSession(ep.criticRun))
	return httpserver.Serve(ctx, ln, mux, ep.log)
}

// sessionHandler answers one session's request about its own work item.
type sessionHandler func(ctx context.Context, r *http.Request, ref string, sess *sessions.Session, token string) (int, any)

// withSession authenticates the request's token against the registry: the
// token must name a live session of this host whose stored hash it matches.
func (ep *sessionEndpoint) withSession(h sessionHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, sessionapi.MaxRequestBytes)
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || token == "" {
			ep.refuse(w, r, "", refusedNoToken, http.StatusUnauthorized, "a session token is required (LOOP_SESSION_TOKEN)")
			return
		}
		ref, ok := sessionapi.TokenRef(token)
		if !ok {
			ep.refuse(w, r, "", refusedBadToken, http.StatusUnauthorized, "not a session token")
			return
		}
		store := ep.sessions.Load()
		if store == nil {
			ep.refuse(w, r, ref, refusedUnavailable, http.StatusServiceUnavailable, "the session registry is not open yet")
			return
		}
		rec, _, err := store.Get(r.Context(), ref)
		switch {
		case err != nil && !errors.Is(err, bus.ErrNotFound):
			ep.refuse(w, r, ref, refusedUnavailable, http.StatusServiceUnavailable, "the session registry is unavailable")
			return
		case err != nil || !rec.Session.Live():
			ep.refuse(w, r, ref, refusedNoSession, http.StatusUnauthorized, "no live session holds this token")
			return
		case !sessionapi.Matches(token, rec.Session.TokenHash) && !sessionapi.Matches(token, rec.Session.NextTokenHash):
			ep.refuse(w, r, ref, refusedBadToken, http.StatusUnauthorized, "no live session holds this token")
			return
		case rec.Session.Host != ep.host:
			ep.refuse(w, r, ref, refusedElsewhere, http.StatusUnauthorized, "the session is hosted by another dispatcher")
			return
		}
		// A verb that reads takes the work item as ?ref=, which must be
		// the session's own like a body's ref.
		if e, ok := ownRef(r.URL.Query().Get("ref"), ref); !ok {
			ep.refuse(w, r, ref, e.reason, http.StatusForbidden, e.message)
			return
		}
		status, body := h(r.Context(), r, ref, rec.Session, token)
		if e, ok := body.(refusal); ok {
			ep.refuse(w, r, ref, e.reason, status, e.message)
			return
		}
		writeJSON(w, status, body)
	}
}

// refusal is a handler's answer that refuses the request.
type refusal struct{ reason, message string }

func (ep *sessionEndpoint) refuse(w http.ResponseWriter, r *http.Request, ref, reason string, status int, message string) {
	ep.refused.WithLabelValues(reason).Inc()
	ep.events.Emit(r.Context(), "session.refused", slog.String("work_item", ref), slog.String("reason", reason),
		slog.String("path", r.URL.Path))
	writeJSON(w, status, map[string]string{"error": message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readBody decodes the request's JSON body into v, or refuses it: a body
// over sessionapi.MaxRequestBytes says so (a question that long is no
// malformed request), anything else that is not shape is a bad request.
func readBody(r *http.Request, v any, shape string) (int, refusal, bool) {
	err := json.NewDecoder(r.Body).Decode(v)
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return http.StatusRequestEntityTooLarge, refusal{refusedTooLarge,
			fmt.Sprintf("the request is larger than %d bytes", tooLarge.Limit)}, false
	case err != nil:
		return http.StatusBadRequest, refusal{refusedBadRequest, "bad request: want JSON " + shape}, false
	}
	return 0, refusal{}, true
}

// readOwn decodes the request's JSON body into req, as readBody does, and
// refuses one that names a work item other than the session's ref.
func readOwn(r *http.Request, req interface{ WorkItem() string }, shape, ref string) (int, refusal, bool) {
	if status, e, ok := readBody(r, req, shape); !ok {
		return status, e, false
	}
	if e, ok := ownRef(req.WorkItem(), ref); !ok {
		return http.StatusForbidden, e, false
	}
	return 0, refusal{}, true
}

// ownRef refuses a request that names a work item other than the session's.
func ownRef(asked, ref string) (refusal, bool) {
	if asked != "" && asked != ref {
		return refusal{refusedOtherItem, fmt.Sprintf("a session acts only on its own work item (%s)", ref)}, false
	}
	return refusal{}, true
}

// ask publishes the session's question, scrubbed, as
// session.awaiting_input with the session as its actor, and waits for the
// ledger to record it.
func (ep *sessionEndpoint) ask(ctx context.Context, r *http.Request, ref string, sess *sessions.Session, token string) (int, any) {
	var req sessionapi.AskRequest
	if status, e, ok := readOwn(r, &req, `{"question": "…"}`, ref); !ok {
		return status, e
	}
	// The session's own token is in its environment, which an agent may
	// be talked into pasting ("$(env)"): it never leaves with the text, nor
	// does any other session's.
	question := ep.scrub(sessionapi.Scrub(req.Question, token))
	if strings.TrimSpace(question) == "" {
		return http.StatusBadRequest, refusal{refusedEmptyAsk, "the question is empty"}
	}
	wait := time.Duration(req.Wait)
	if wait <= 0 {
		wait = askWaitDefault
	}
	wait = min(wait, askWaitMax)
	ev := ask.Event(ref, question, sess.HarnessSessionID, sess.TmuxTarget, time.Now())
	url, err := ask.Publish(ctx, ep.conn, ev, wait)
	outcome := "recorded"
	switch {
	case errors.Is(err, ask.ErrPending):
		outcome = "pending"
	case err != nil:
		outcome = "failed"
	}
	if outcome != "failed" {
		ep.awaiting(ctx, ref, sess, ev.GetId())
	}
	// Ids only: the question is on the work item, never in the log.
	ep.events.Emit(ctx, "session.awaiting_input", slog.String("work_item", ref), slog.String("event_id", ev.GetId()),
		slog.String("harness_session_id", sess.HarnessSessionID), slog.String("comment_url", url), slog.String("outcome", outcome))
	switch {
	case errors.Is(err, ask.ErrPending):
		return http.StatusAccepted, sessionapi.AskAnswer{ID: ev.GetId(), Pending: true}
	case errors.Is(err, ask.ErrFailed):
		return http.StatusBadGateway, map[string]string{"error": err.Error(), "id": ev.GetId()}
	case err != nil:
		ep.log.Warn("dispatcher: session ask", "work_item", ref, "event_id", ev.GetId(), "err", err)
		return http.StatusServiceUnavailable, map[string]string{"error": "the question could not be published, or its record could not be read; the dispatcher log says which", "id": ev.GetId()}
	}
	return http.StatusOK, sessionapi.AskAnswer{ID: ev.GetId(), URL: url}
}

// complete completes the session's own agent node once its exit hooks pass
// (hooks.go): a finding keeps the node open and is the answer, a test run in
// flight answers 202 for the client to ask again.
func (ep *sessionEndpoint) complete(ctx context.Context, r *http.Request, ref string, sess *sessions.Session, token string) (int, any) {
	var req sessionapi.CompleteRequest
	if status, e, ok := readOwn(r, &req, `{}`, ref); !ok {
		return status, e
	}
	v, node, err := ep.gates.checkComplete(ctx, ref, sess)
	if err != nil {
		ep.log.Warn("dispatcher: session complete: the node's checks", "work_item", ref, "err", err)
		return http.StatusServiceUnavailable, map[string]string{"error": "the work item's graph state could not be read"}
	}
	switch {
	case v.running != "":
		return http.StatusAccepted, sessionapi.CompletePending{Ref: ref, Node: node, Running: v.running,
			RetryAfter: sessionapi.Duration(completePoll)}
	case len(v.findings) > 0:
		ep.events.Emit(ctx, "graph.held", slog.String("work_item", ref), slog.String("node", node),
			slog.Int("findings", len(v.findings)))
		msg := fmt.Sprintf("node %s stays open: %s", node, strings.Join(v.findings, "; "))
		if v.detail != "" {
			msg += "\n\nthe end of the test output:\n" + ep.scrub(sessionapi.Scrub(v.detail, token))
		}
		return http.StatusConflict, map[string]string{"error": msg}
	}
	data, err := ep.gates.completeNode(ctx, ref, node, catalog.SourceSession)
	if errors.Is(err, flow.ErrHumanGate) {
		// A session trying to pass a human gate is the attack this
		// endpoint exists to stop: refused, and recorded as such.
		return http.StatusConflict, refusal{refusedHumanGate, err.Error()}
	}
	return ep.graphAnswer(data, err)
}

// completePoll is how soon a session's client asks again while its node's
// tests run.
const completePoll = 2 * time.Second

// escalate hands the session's own agent node to a person: the work item
// leaves it by escalate, reaching the graph's escalated end, whose
// conflict-escalated notification carries the session's reason (scrubbed,
// bounded, one line). A human gate is not the session's to escalate.
func (ep *sessionEndpoint) escalate(ctx context.Context, r *http.Request, ref string, _ *sessions.Session, token string) (int, any) {
	var req sessionapi.EscalateRequest
	if status, e, ok := readOwn(r, &req, `{"reason": "…"}`, ref); !ok {
		return status, e
	}
	reason := strings.Join(strings.Fields(ep.scrub(sessionapi.Scrub(req.Reason, token))), " ")
	if reason == "" {
		return http.StatusBadRequest, refusal{refusedBadRequest, "the reason is empty: say why a person is needed"}
	}
	if rs := []rune(reason); len(rs) > sessionapi.MaxEscalateReason {
		reason = string(rs[:sessionapi.MaxEscalateReason]) + "…"
	}
	data, err := ep.gates.escalate(ctx, ref, reason)
	if errors.Is(err, flow.ErrHumanGate) {
		return http.StatusConflict, refusal{refusedHumanGate, err.Error()}
	}
	return ep.graphAnswer(data, err)
}

// status is the session's own work item's graph state.
func (ep *sessionEndpoint) status(ctx context.Context, _ *http.Request, ref string, _ *sessions.Session, _ string) (int, any) {
	return ep.graphAnswer(ep.gates.status(ctx, mustRequest(ref)))
}

func mustRequest(ref string) []byte {
	b, _ := json.Marshal(GraphRequest{Ref: ref})
	return b
}

// graphAnswer turns the graph endpoint's answer into the session
// endpoint's.
func (ep *sessionEndpoint) graphAnswer(data []byte, err error) (int, any) {
	var se *bus.ServiceError
	switch {
	case errors.As(err, &se):
		status := http.StatusInternalServerError
		switch se.Code {
		case bus.CodeBadRequest:
			status = http.StatusBadRequest
		case bus.CodeNotFound:
			status = http.StatusNotFound
		case bus.CodeConflict:
			status = http.StatusConflict
		case bus.CodeUnavailable:
			status = http.StatusServiceUnavailable
		}
		return status, map[string]string{"error": se.Description}
	case err != nil:
		return http.StatusInternalServerError, map[string]string{"error": err.Error()}
	}
	return http.StatusOK, json.RawMessage(data)
}

// scrub masks secrets, paths and addresses in text a session sends toward
// GitHub and Slack.
func (ep *sessionEndpoint) scrub(text string) string {
	if ep.scrubber != nil {
		return ep.scrubber(text)
	}
	return redact.FromOS().Scrub(text)
}

// awaiting marks the session as waiting on a person for question id, so
// that its Stop hook lets it stop (`the-loop check` answers wait) until an
// answer reaches it. Best effort: a lost mark only makes the hook ask the
// agent to go on, which it may decline.
func (ep *sessionEndpoint) awaiting(ctx context.Context, ref string, sess *sessions.Session, id string) {
	if _, err := ep.sessions.Load().Mutate(ctx, ref, func(r *sessions.Record) error {
		if !r.Session.Live() || r.Session.TokenHash != sess.TokenHash {
			return sessions.ErrNoChange
		}
		r.Session.AwaitingInput = id
		return nil
	}); err != nil {
		ep.log.Warn("dispatcher: the session's question not marked as awaiting an answer", "work_item", ref, "err", err)
	}
}
