// Package socketfake is an in-process fake of Slack's Socket Mode: the
// apps.connections.open Web API method (checked against an app-level token)
// and the WebSocket it hands out, speaking the Socket Mode protocol — a hello
// frame on connect, envelopes ({envelope_id, type, payload,
// accepts_response_payload[, retry_attempt, retry_reason]}), acks read back as
// {envelope_id[, payload]}, WebSocket pings, disconnect frames and dropped
// sockets (as Slack documents Socket Mode).
//
// A test points a real Socket Mode client at URL() — slack-go through
// slack.OptionAPIURL, or LOOP_SLACK_API_URL — sends envelopes with Send, and
// reads back whether and when each was acknowledged (WaitAck). Every other Web
// API method is passed through to the server given by WithAPI (typically
// slackfake), so one URL serves a client that both reads Socket Mode and
// calls the Web API.
//
// Unlike slack-go's slacktest, whose socket speaks the retired RTM protocol,
// this fake speaks Socket Mode. It never logs or echoes a token. It is test
// support: tests and `the-loop demo` (through Start) use it, and it imports
// no testing framework.
package socketfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
)

// AppToken is the app-level token the fake accepts unless WithAppToken says
// otherwise.
const AppToken = "xapp-1-socketfake-0000000000-test"

// AppID is the app id the hello frame names.
const AppID = "A0FAKEAPP1"

// Option configures New.
type Option func(*Server)

// WithAppToken makes apps.connections.open accept only token.
func WithAppToken(token string) Option { return func(s *Server) { s.token = token } }

// WithAPI passes every Web API method but apps.connections.open to the server
// at baseURL (for example slackfake's URL()).
func WithAPI(baseURL string) Option {
	return func(s *Server) {
		u, err := url.Parse(baseURL)
		if err == nil {
			s.upstream = httputil.NewSingleHostReverseProxy(u)
		}
	}
}

// WithPingInterval sets how often the fake pings each connection (default
// 500ms); slack-go reconnects when pings stop for its ping interval.
func WithPingInterval(d time.Duration) Option { return func(s *Server) { s.ping = d } }

// Envelope is one envelope the fake sent, and its acknowledgement.
type Envelope struct {
	ID   string
	Type string
	// Conn is the connection (1-based, in accept order) it was sent on.
	Conn   int
	SentAt time.Time
	// Acked is set once an ack naming ID arrived (on any connection).
	Acked   bool
	AckedAt time.Time
	// AckPayload is the ack's payload, if it carried one.
	AckPayload json.RawMessage
}

// Latency is the time from sending the envelope to its ack.
func (e Envelope) Latency() time.Duration { return e.AckedAt.Sub(e.SentAt) }

// Server is a running fake.
type Server struct {
	hs       *httptest.Server
	token    string
	upstream *httputil.ReverseProxy
	ping     time.Duration

	mu      sync.Mutex
	changed chan struct{}
	opens   int
	conns   []*conn
	live    *conn
	sent    map[string]*Envelope
	seq     int
	unacked []string // ack frames naming no envelope the fake sent
}

type conn struct {
	n    int
	ws   *websocket.Conn
	wmu  sync.Mutex // serializes data frames
	done chan struct{}
}

// New starts a fake that is stopped when t ends.
func New(t TB, opts ...Option) *Server {
	t.Helper()
	s := Start(opts...)
	t.Cleanup(s.Close)
	return s
}

// Start starts a fake outside a test (the demo's Slack); Close stops it.
func Start(opts ...Option) *Server {
	s := &Server{token: AppToken, ping: 500 * time.Millisecond, changed: make(chan struct{}), sent: map[string]*Envelope{}}
	for _, o := range opts {
		o(s)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/apps.connections.open", s.open)
	mux.HandleFunc("/link/", s.link)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if s.upstream == nil {
			http.NotFound(w, r)
			return
		}
		s.upstream.ServeHTTP(w, r)
	})
	s.hs = httptest.NewServer(mux)
	return s
}

// Close closes every connection and stops the server.
func (s *Server) Close() {
	s.mu.Lock()
	for _, c := range s.conns {
		_ = c.ws.Close()
	}
	s.mu.Unlock()
	s.hs.CloseClientConnections()
	s.hs.Close()
}

// URL is the Web API base URL, ending in "/".
func (s *Server) URL() string { return s.hs.URL + "/" }

// Opens is how many apps.connections.open calls were answered ok.
func (s *Server) Opens() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opens
}

// Connections is how many WebSockets were accepted so far.
func (s *Server) Connections() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// Live reports whether a connection is open now.
func (s *Server) Live() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live != nil
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// await polls cond, re-checking on every change, until it holds or timeout.
func (s *Server) await(timeout time.Duration, what string, cond func() bool) error {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		ok := cond()
		s.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			return fmt.Errorf("socketfake: timed out after %s waiting for %s", timeout, what)
		}
	}
}

// WaitConnected waits until at least n connections were accepted and one is
// live.
func (s *Server) WaitConnected(t TB, n int, timeout time.Duration) {
	t.Helper()
	if err := s.AwaitConnected(n, timeout); err != nil {
		t.Fatal(err)
	}
}

// AwaitConnected is WaitConnected outside a test.
func (s *Server) AwaitConnected(n int, timeout time.Duration) error {
	return s.await(timeout, fmt.Sprintf("connection #%d", n), func() bool { return len(s.conns) >= n && s.live != nil })
}

func (s *Server) open(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	if tok == "" {
		_ = r.ParseForm()
		tok = r.Form.Get("token")
	}
	switch {
	case tok == "":
		_, _ = w.Write([]byte(`{"ok":false,"error":"not_authed"}`))
		return
	case tok != s.token:
		_, _ = w.Write([]byte(`{"ok":false,"error":"invalid_auth"}`))
		return
	}
	s.mu.Lock()
	s.opens++
	n := s.opens
	s.notifyLocked()
	s.mu.Unlock()
	ws := "ws" + strings.TrimPrefix(s.hs.URL, "http") + fmt.Sprintf("/link/?ticket=%d", n)
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "url": ws})
}

var upgrader = websocket.Upgrader{CheckOrigin: func(*http.Request) bool { return true }}

func (s *Server) link(w http.ResponseWriter, r *http.Request) {
	ws, err := upgrader.Upgrade(w, r, nil)
	if err != nil {
		return
	}
	s.mu.Lock()
	c := &conn{n: len(s.conns) + 1, ws: ws, done: make(chan struct{})}
	s.conns = append(s.conns, c)
	s.mu.Unlock()

	hello, _ := json.Marshal(map[string]any{
		"type": "hello", "num_connections": 1,
		"debug_info":      map[string]any{"host": "socketfake", "build_number": 1, "approximate_connection_time": 18060},
		"connection_info": map[string]any{"app_id": AppID},
	})
	if c.write(hello) != nil {
		_ = ws.Close()
		return
	}
	s.mu.Lock()
	s.live = c
	s.notifyLocked()
	s.mu.Unlock()

	go s.pinger(c)
	s.readAcks(c)
	close(c.done)
	s.mu.Lock()
	if s.live == c {
		s.live = nil
	}
	s.notifyLocked()
	s.mu.Unlock()
}

func (c *conn) write(frame []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_ = c.ws.SetWriteDeadline(time.Now().Add(5 * time.Second))
	return c.ws.WriteMessage(websocket.TextMessage, frame)
}

func (s *Server) pinger(c *conn) {
	t := time.NewTicker(s.ping)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
			if err := c.ws.WriteControl(websocket.PingMessage, []byte("socketfake"), time.Now().Add(time.Second)); err != nil {
				return
			}
		}
	}
}

// readAcks records every ack until the socket closes.
func (s *Server) readAcks(c *conn) {
	for {
		_, data, err := c.ws.ReadMessage()
		if err != nil {
			return
		}
		var ack struct {
			EnvelopeID string          `json:"envelope_id"`
			Payload    json.RawMessage `json:"payload"`
		}
		if json.Unmarshal(data, &ack) != nil || ack.EnvelopeID == "" {
			continue
		}
		s.mu.Lock()
		if e, ok := s.sent[ack.EnvelopeID]; ok {
			if !e.Acked {
				e.Acked, e.AckedAt, e.AckPayload = true, time.Now(), ack.Payload
			}
		} else {
			s.unacked = append(s.unacked, ack.EnvelopeID)
		}
		s.notifyLocked()
		s.mu.Unlock()
	}
}

// SendOption shapes an envelope.
type SendOption func(map[string]any)

// WithRetry marks the envelope as Slack's retry of an unacknowledged one.
func WithRetry(attempt int, reason string) SendOption {
	return func(m map[string]any) { m["retry_attempt"], m["retry_reason"] = attempt, reason }
}

// WithEnvelopeID sets the envelope id (default: a fresh one).
func WithEnvelopeID(id string) SendOption { return func(m map[string]any) { m["envelope_id"] = id } }

// Send sends an envelope of typ ("events_api", "interactive",
// "slash_commands") carrying payload on the live connection, waiting up to
// 10 s for one, and returns its envelope id.
func (s *Server) Send(t TB, typ string, payload json.RawMessage, opts ...SendOption) string {
	t.Helper()
	id, err := s.SendEnvelope(typ, payload, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// SendEnvelope is Send outside a test.
func (s *Server) SendEnvelope(typ string, payload json.RawMessage, opts ...SendOption) (string, error) {
	s.mu.Lock()
	s.seq++
	id := fmt.Sprintf("socketfake-%08d-%d", s.seq, time.Now().UnixNano()%1e6)
	s.mu.Unlock()
	m := map[string]any{
		"envelope_id": id, "type": typ, "payload": payload,
		"accepts_response_payload": typ != "events_api",
	}
	for _, o := range opts {
		o(m)
	}
	id, _ = m["envelope_id"].(string)
	frame, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("socketfake: encode envelope: %w", err)
	}
	return id, s.send(frame, id, typ)
}

// SendFrame sends a raw frame on the live connection: a recorded envelope,
// a hello or disconnect frame, a malformed one. An envelope_id in it is
// tracked like Send's.
func (s *Server) SendFrame(t TB, frame []byte) {
	t.Helper()
	var head struct {
		EnvelopeID string `json:"envelope_id"`
		Type       string `json:"type"`
	}
	_ = json.Unmarshal(frame, &head)
	if err := s.send(frame, head.EnvelopeID, head.Type); err != nil {
		t.Fatal(err)
	}
}

func (s *Server) send(frame []byte, id, typ string) error {
	var c *conn
	if err := s.await(10*time.Second, "a live connection to send on", func() bool { c = s.live; return c != nil }); err != nil {
		return err
	}
	if id != "" {
		s.mu.Lock()
		if _, ok := s.sent[id]; !ok {
			s.sent[id] = &Envelope{ID: id, Type: typ, Conn: c.n}
		}
		// A resend (Slack's retry) is tracked afresh.
		e := s.sent[id]
		e.SentAt, e.Acked, e.AckedAt, e.AckPayload, e.Conn = time.Now(), false, time.Time{}, nil, c.n
		s.mu.Unlock()
	}
	if err := c.write(frame); err != nil {
		return fmt.Errorf("socketfake: send: %w", err)
	}
	return nil
}

// Envelope returns what became of the envelope id.
func (s *Server) Envelope(id string) (Envelope, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.sent[id]
	if !ok {
		return Envelope{}, false
	}
	return *e, true
}

// WaitAck waits up to timeout for the envelope's ack and returns it.
func (s *Server) WaitAck(t TB, id string, timeout time.Duration) Envelope {
	t.Helper()
	e, err := s.AwaitAck(id, timeout)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// AwaitAck is WaitAck outside a test.
func (s *Server) AwaitAck(id string, timeout time.Duration) (Envelope, error) {
	if err := s.await(timeout, "the ack of "+id, func() bool { e := s.sent[id]; return e != nil && e.Acked }); err != nil {
		return Envelope{}, err
	}
	e, _ := s.Envelope(id)
	return e, nil
}

// Disconnect sends a disconnect frame with reason (Slack's "warning",
// "refresh_requested", "too_many_websockets"…) and closes the connection once
// the client opened its next one, as Slack does, or after 10 s.
func (s *Server) Disconnect(t TB, reason string) {
	t.Helper()
	s.mu.Lock()
	c := s.live
	n := len(s.conns)
	s.mu.Unlock()
	if c == nil {
		t.Fatalf("socketfake: Disconnect without a live connection")
	}
	frame, _ := json.Marshal(map[string]any{"type": "disconnect", "reason": reason,
		"debug_info": map[string]any{"host": "socketfake"}})
	_ = c.write(frame)
	go func() {
		deadline := time.After(10 * time.Second)
		for {
			s.mu.Lock()
			ch, done := s.changed, len(s.conns) > n
			s.mu.Unlock()
			if done {
				break
			}
			select {
			case <-ch:
			case <-deadline:
				_ = c.ws.Close()
				return
			}
		}
		_ = c.ws.Close()
	}()
}

// Drop closes the live connection abruptly, without a frame.
func (s *Server) Drop(t TB) {
	t.Helper()
	s.mu.Lock()
	c := s.live
	s.live = nil
	s.notifyLocked()
	s.mu.Unlock()
	if c == nil {
		t.Fatalf("socketfake: Drop without a live connection")
	}
	_ = c.ws.Close()
}
