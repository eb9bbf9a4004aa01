// Package slackfake is an in-process fake of the part of Slack's Web API the
// services of the-loop call: chat.postMessage, chat.update,
// chat.postEphemeral, conversations.replies, conversations.history and
// auth.test, with message
// metadata, threads, cursor pagination and Slack's `ok`/`error` envelope
// (contract: testdata/slack/web_api in the shared workspace). Tests point a
// real client at it — slack-go through slack.OptionAPIURL(Server.URL()), or
// LOOP_SLACK_API_URL — and read back what a person would see: the messages
// of each channel and thread, in order, with their edits.
//
// It is built on slack-go's own slacktest server, whose remaining routes
// (users.info, conversations.info, bots.info, apps.connections.open…) stay
// available; the routes above replace slacktest's, which keep no state, use
// whole-second timestamps (two posts in one second collide) and leak a
// goroutine per post.
//
// Beyond what Slack does, a test can fail requests on purpose: RateLimit
// answers a method with 429 and Retry-After for a while (and counts the
// requests that did not wait), Fail answers with a 5xx, FailWith with an
// `ok: false` error, and DropResponseAfterPost stores a message and then
// drops the connection before answering — the "did my message land?" case a
// crash-safe poster must survive. AfterPost runs a hook between storing a
// message and answering, so a test can kill its client in that window.
//
// Every method is safe for concurrent use. The fake never logs or echoes the
// token it is called with. It is test support: only tests may import it.
package slackfake

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack/slacktest"
)

// Token is the bot token the fake accepts unless WithToken says otherwise.
const Token = "xoxb-slackfake-0000000000-test"

// Identity of the fake's bot, as auth.test reports it.
const (
	TeamID    = "T0FAKE0001"
	TeamName  = "the-loop test workspace"
	BotUserID = "U0FAKEBOT1"
	BotID     = "B0FAKEBOT1"
	BotName   = "the-loop"
)

// MetadataMaxPayload bounds a message's metadata JSON (a generous stand-in
// for Slack's undocumented limit), so a client that stuffs content into
// metadata fails here rather than in production.
const MetadataMaxPayload = 8192

// Metadata is a message's metadata as Slack stores it.
type Metadata struct {
	EventType    string         `json:"event_type"`
	EventPayload map[string]any `json:"event_payload"`
}

// Message is one message as the fake stores it.
type Message struct {
	Channel string
	TS      string
	// ThreadTS is the thread root's ts for a reply, "" for a top-level
	// message.
	ThreadTS string
	Text     string
	// Blocks is the blocks JSON array as posted (nil when none).
	Blocks json.RawMessage
	// Metadata is nil when the message carries none.
	Metadata *Metadata
	// User and BotID are the poster: the fake's bot for posted messages.
	User  string
	BotID string
	// Edits counts chat.update calls on the message.
	Edits int
	// Posted is when the fake stored the message.
	Posted time.Time
}

// Ephemeral is one chat.postEphemeral message: shown to one member only,
// never part of the channel's history (Messages does not list it).
type Ephemeral struct {
	Channel string
	// User is the member the message is shown to.
	User string
	// ThreadTS is the thread it is shown in, "" for the channel.
	ThreadTS string
	Text     string
	Blocks   json.RawMessage
	// TS is the message_ts Slack answers with.
	TS string
}

// Request is one call the fake answered.
type Request struct {
	Method string // Web API method, e.g. "chat.postMessage"
	// Status is the HTTP status answered (0 when the connection was
	// dropped), Error the Slack error code when ok was false.
	Status int
	Error  string
	// Early is true for a request refused with 429 while a Retry-After the
	// fake had already announced was still running.
	Early bool
	At    time.Time
}

// Option configures New.
type Option func(*Server)

// WithToken makes the fake accept only token.
func WithToken(token string) Option { return func(s *Server) { s.token = token } }

// WithChannels restricts the conversations that exist; posting elsewhere
// answers channel_not_found. By default every channel id exists.
func WithChannels(ids ...string) Option {
	return func(s *Server) {
		s.known = map[string]bool{}
		for _, id := range ids {
			s.known[id] = true
		}
	}
}

// Server is a running fake.
type Server struct {
	closeOnce sync.Once
	sts       *slacktest.Server
	token     string
	known     map[string]bool // nil: every channel exists

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced on every change
	msgs      map[string][]*Message
	ephemeral []Ephemeral
	lastTS    int64 // microseconds of the last ts handed out
	requests  []Request
	limited   map[string]*limit
	faults    []*fault
	dropPosts int
	afterPost []*hook
}

type limit struct {
	until      time.Time
	retryAfter int // seconds, as announced
	announced  bool
}

type fault struct {
	method   string
	n        int
	status   int
	slackErr string
}

type hook struct{ fn func(Message) }

// New starts a fake that is stopped when t ends.
func New(t TB, opts ...Option) *Server {
	t.Helper()
	s := Start(opts...)
	t.Cleanup(s.Close)
	return s
}

// Close stops the server.
func (s *Server) Close() { s.closeOnce.Do(s.sts.Stop) }

// Start runs the fake outside a test (`the-loop demo`); the caller calls
// Close.
func Start(opts ...Option) *Server {
	s := &Server{
		token:   Token,
		changed: make(chan struct{}),
		msgs:    map[string][]*Message{},
		limited: map[string]*limit{},
	}
	for _, o := range opts {
		o(s)
	}
	routes := map[string]func(*call) response{
		"auth.test":             s.authTest,
		"chat.postMessage":      s.postMessage,
		"chat.update":           s.update,
		"chat.postEphemeral":    s.postEphemeral,
		"conversations.replies": s.replies,
		"conversations.history": s.history,
	}
	s.sts = slacktest.NewTestServer(func(c slacktest.Customize) {
		for method, h := range routes {
			c.Handle("/"+method, s.serve(method, h))
		}
	})
	s.sts.Start()
	return s
}

// URL is the Web API base URL, ending in "/", for slack.OptionAPIURL or
// LOOP_SLACK_API_URL.
func (s *Server) URL() string { return s.sts.GetAPIURL() }

// RateLimit answers every call of method with HTTP 429 and a Retry-After of
// retryAfter (whole seconds, at least 1) until that much time has passed.
// Requests made after the first 429 and before its Retry-After ran out are
// counted as early (Request.Early), so a test can tell a client that waited
// from one that hammered.
func (s *Server) RateLimit(method string, retryAfter time.Duration) {
	secs := max(1, int((retryAfter+time.Second-1)/time.Second))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limited[method] = &limit{retryAfter: secs}
}

// Fail answers the next n calls of method with HTTP status (a 5xx, say) and
// an HTML body, as Slack's edge does.
func (s *Server) Fail(method string, n, status int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: method, n: n, status: status})
}

// FailWith answers the next n calls of method with HTTP 200 and
// {"ok": false, "error": slackErr}, e.g. "channel_not_found".
func (s *Server) FailWith(method string, n int, slackErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = append(s.faults, &fault{method: method, n: n, slackErr: slackErr})
}

// DropResponseAfterPost makes the next n chat.postMessage calls store their
// message and then close the connection without answering.
func (s *Server) DropResponseAfterPost(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropPosts += n
}

// AfterPost registers fn to run after every stored chat.postMessage and
// before its answer is written. It runs on the request's goroutine without
// the fake's lock held. remove unregisters it.
func (s *Server) AfterPost(fn func(Message)) (remove func()) {
	h := &hook{fn: fn}
	s.mu.Lock()
	s.afterPost = append(s.afterPost, h)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, x := range s.afterPost {
			if x == h {
				s.afterPost = append(s.afterPost[:i], s.afterPost[i+1:]...)
				return
			}
		}
	}
}

// AddMessage stores a message as if a person (user) had posted it, and
// returns its ts. threadTS "" makes it top-level.
func (s *Server) AddMessage(channel, threadTS, user, text string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Message{Channel: channel, ThreadTS: threadTS, Text: text, User: user, TS: s.nextTSLocked(), Posted: time.Now()}
	s.msgs[channel] = append(s.msgs[channel], m)
	s.notifyLocked()
	return m.TS
}

// Messages returns every message of channel in posting order, replies
// included.
func (s *Server) Messages(channel string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Message, 0, len(s.msgs[channel]))
	for _, m := range s.msgs[channel] {
		out = append(out, *m)
	}
	return out
}

// Ephemerals returns the ephemeral messages shown in channel, in order.
func (s *Server) Ephemerals(channel string) []Ephemeral {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Ephemeral
	for _, e := range s.ephemeral {
		if e.Channel == channel {
			out = append(out, e)
		}
	}
	return out
}

// TopLevel returns the top-level messages of channel in posting order.
func (s *Server) TopLevel(channel string) []Message {
	var out []Message
	for _, m := range s.Messages(channel) {
		if m.ThreadTS == "" {
			out = append(out, m)
		}
	}
	return out
}

// Thread returns the replies to the thread rooted at ts, in posting order,
// without the root.
func (s *Server) Thread(channel, ts string) []Message {
	var out []Message
	for _, m := range s.Messages(channel) {
		if m.ThreadTS == ts {
			out = append(out, m)
		}
	}
	return out
}

// Requests returns every call answered so far, in order.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// Count returns how many calls of method were answered with status (0:
// any status).
func (s *Server) Count(method string, status int) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Method == method && (status == 0 || r.Status == status) {
			n++
		}
	}
	return n
}

// Wait polls cond, re-checking whenever the fake's state changes, until it is
// true or timeout passes; it fails t on timeout.
func (s *Server) Wait(t TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		case <-deadline.C:
			if cond() {
				return
			}
			t.Fatalf("slackfake: timed out after %s waiting for %s", timeout, what)
		}
	}
}

func (s *Server) notifyLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// nextTSLocked hands out Slack-shaped ts values ("seconds.micros") that are
// unique and increasing, and close to the wall clock, so that a client's
// oldest/latest bounds taken from its own clock mean what they would on
// Slack.
func (s *Server) nextTSLocked() string {
	us := time.Now().UnixMicro()
	if us <= s.lastTS {
		us = s.lastTS + 1
	}
	s.lastTS = us
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// call is one decoded request.
type call struct {
	method string
	args   url.Values
}

// response is what a handler answers: a JSON body with ok, or a bare status.
type response struct {
	status int
	body   map[string]any
	drop   bool // close the connection without answering
	after  *Message
	// retryAfter (seconds) is sent as Retry-After with a 429; early marks a
	// request that ignored a Retry-After already announced.
	retryAfter int
	early      bool
}

func okResp(body map[string]any) response {
	body["ok"] = true
	return response{status: http.StatusOK, body: body}
}

func errResp(code string) response {
	return response{status: http.StatusOK, body: map[string]any{"ok": false, "error": code}}
}

func (s *Server) serve(method string, h func(*call) response) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		args, err := readArgs(r)
		if err != nil {
			s.answer(w, method, response{status: http.StatusOK, body: map[string]any{"ok": false, "error": "invalid_form_data"}})
			return
		}
		if resp, ok := s.gate(method, r, args); ok {
			s.answer(w, method, resp)
			return
		}
		resp := h(&call{method: method, args: args})
		if resp.after != nil {
			s.mu.Lock()
			hooks := append([]*hook(nil), s.afterPost...)
			s.mu.Unlock()
			for _, hk := range hooks {
				hk.fn(*resp.after)
			}
		}
		s.answer(w, method, resp)
	}
}

// gate applies authentication, rate limits and injected faults, in that
// order, before a method runs.
func (s *Server) gate(method string, r *http.Request, args url.Values) (response, bool) {
	tok := args.Get("token")
	if h := r.Header.Get("Authorization"); strings.HasPrefix(h, "Bearer ") {
		tok = strings.TrimPrefix(h, "Bearer ")
	}
	switch {
	case tok == "":
		return errResp("not_authed"), true
	case tok != s.token:
		return errResp("invalid_auth"), true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if l := s.limited[method]; l != nil {
		if l.announced && !now.Before(l.until) {
			delete(s.limited, method)
		} else {
			early := l.announced
			if !l.announced {
				l.announced, l.until = true, now.Add(time.Duration(l.retryAfter)*time.Second)
			}
			return response{status: http.StatusTooManyRequests, body: map[string]any{"ok": false, "error": "ratelimited"},
				retryAfter: l.retryAfter, early: early}, true
		}
	}
	for i, f := range s.faults {
		if f.method != method {
			continue
		}
		if f.n--; f.n <= 0 {
			s.faults = append(s.faults[:i], s.faults[i+1:]...)
		}
		if f.status != 0 {
			return response{status: f.status}, true
		}
		return errResp(f.slackErr), true
	}
	return response{}, false
}

func (s *Server) answer(w http.ResponseWriter, method string, resp response) {
	req := Request{Method: method, Status: resp.status, At: time.Now()}
	if resp.body != nil && resp.body["ok"] == false {
		req.Error, _ = resp.body["error"].(string)
	}
	if resp.status == http.StatusTooManyRequests {
		req.Early = resp.early
		w.Header().Set("Retry-After", strconv.Itoa(resp.retryAfter))
	}
	if resp.drop {
		req.Status = 0
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.notifyLocked()
	s.mu.Unlock()

	if resp.drop {
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				_ = conn.Close()
				return
			}
		}
		panic(http.ErrAbortHandler) // aborts the response without a body
	}
	if resp.body == nil {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(resp.status)
		_, _ = io.WriteString(w, "<html><body>"+http.StatusText(resp.status)+"</body></html>")
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(resp.status)
	_ = json.NewEncoder(w).Encode(resp.body)
}

// readArgs reads a Web API call's arguments from the query string and from a
// form or JSON body, as Slack accepts all three.
func readArgs(r *http.Request) (url.Values, error) {
	args := r.URL.Query()
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return nil, err
	}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case len(bytes.TrimSpace(body)) == 0:
	case ct == "application/json":
		var obj map[string]any
		if err := json.Unmarshal(body, &obj); err != nil {
			return nil, err
		}
		for k, v := range obj {
			switch x := v.(type) {
			case string:
				args.Set(k, x)
			case bool:
				args.Set(k, strconv.FormatBool(x))
			case float64:
				args.Set(k, strconv.FormatFloat(x, 'f', -1, 64))
			default:
				raw, _ := json.Marshal(x)
				args.Set(k, string(raw))
			}
		}
	default:
		form, err := url.ParseQuery(string(body))
		if err != nil {
			return nil, err
		}
		for k, v := range form {
			args[k] = v
		}
	}
	return args, nil
}

func truthy(v string) bool { return v == "1" || v == "true" }

func (s *Server) authTest(*call) response {
	return okResp(map[string]any{
		"url": "https://the-loop-test.slack.com/", "team": TeamName, "user": BotName,
		"team_id": TeamID, "user_id": BotUserID, "bot_id": BotID, "is_enterprise_install": false,
	})
}

func (s *Server) channelOK(id string) bool {
	return id != "" && (s.known == nil || s.known[id])
}

// content reads text, blocks and metadata as chat.postMessage and
// chat.update take them, refusing what Slack refuses.
func content(c *call) (text string, blocks json.RawMessage, md *Metadata, errCode string) {
	text = c.args.Get("text")
	if b := c.args.Get("blocks"); b != "" {
		var arr []map[string]any
		if err := json.Unmarshal([]byte(b), &arr); err != nil {
			return "", nil, nil, "invalid_blocks_format"
		}
		if len(arr) > 50 {
			return "", nil, nil, "invalid_blocks"
		}
		for _, blk := range arr {
			if t, _ := blk["type"].(string); t == "" {
				return "", nil, nil, "invalid_blocks"
			}
		}
		blocks = json.RawMessage(b)
	}
	if text == "" && blocks == nil {
		return "", nil, nil, "no_text"
	}
	if len([]rune(text)) > 40000 {
		return "", nil, nil, "msg_too_long"
	}
	if raw := c.args.Get("metadata"); raw != "" {
		if len(raw) > MetadataMaxPayload {
			return "", nil, nil, "invalid_metadata_format"
		}
		md = &Metadata{}
		if err := json.Unmarshal([]byte(raw), md); err != nil || md.EventType == "" {
			return "", nil, nil, "invalid_metadata_format"
		}
	}
	return text, blocks, md, ""
}

func (s *Server) postMessage(c *call) response {
	ch := c.args.Get("channel")
	if !s.channelOK(ch) {
		return errResp("channel_not_found")
	}
	text, blocks, md, code := content(c)
	if code != "" {
		return errResp(code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := &Message{
		Channel: ch, ThreadTS: c.args.Get("thread_ts"), Text: text, Blocks: blocks, Metadata: md,
		User: BotUserID, BotID: BotID, TS: s.nextTSLocked(), Posted: time.Now(),
	}
	s.msgs[ch] = append(s.msgs[ch], m)
	s.notifyLocked()
	resp := okResp(map[string]any{"channel": ch, "ts": m.TS, "message": s.wireLocked(m, true)})
	cp := *m
	resp.after = &cp
	if s.dropPosts > 0 {
		s.dropPosts--
		resp.drop = true
	}
	return resp
}

// postEphemeral shows a message to one member of a channel. Slack refuses
// it without a user (user_not_found here: the fake knows no member list).
func (s *Server) postEphemeral(c *call) response {
	ch, user := c.args.Get("channel"), c.args.Get("user")
	if !s.channelOK(ch) {
		return errResp("channel_not_found")
	}
	if user == "" {
		return errResp("user_not_found")
	}
	text, blocks, _, code := content(c)
	if code != "" {
		return errResp(code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := Ephemeral{Channel: ch, User: user, ThreadTS: c.args.Get("thread_ts"), Text: text, Blocks: blocks, TS: s.nextTSLocked()}
	s.ephemeral = append(s.ephemeral, e)
	s.notifyLocked()
	return okResp(map[string]any{"message_ts": e.TS})
}

func (s *Server) findLocked(ch, ts string) *Message {
	for _, m := range s.msgs[ch] {
		if m.TS == ts {
			return m
		}
	}
	return nil
}

func (s *Server) update(c *call) response {
	ch, ts := c.args.Get("channel"), c.args.Get("ts")
	if !s.channelOK(ch) {
		return errResp("channel_not_found")
	}
	text, blocks, md, code := content(c)
	if code != "" {
		return errResp(code)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.findLocked(ch, ts)
	switch {
	case m == nil:
		return errResp("message_not_found")
	case m.BotID != BotID:
		return errResp("cant_update_message")
	}
	m.Text, m.Blocks, m.Edits = text, blocks, m.Edits+1
	if md != nil {
		m.Metadata = md
	}
	s.notifyLocked()
	return okResp(map[string]any{"channel": ch, "ts": ts, "text": text, "message": s.wireLocked(m, true)})
}

// wireLocked is a message as Slack's JSON shows it.
func (s *Server) wireLocked(m *Message, withMetadata bool) map[string]any {
	w := map[string]any{"type": "message", "ts": m.TS, "text": m.Text}
	if m.User != "" {
		w["user"] = m.User
	}
	if m.BotID != "" {
		w["bot_id"] = m.BotID
		w["app_id"] = "A0FAKEAPP1"
	}
	if m.ThreadTS != "" {
		w["thread_ts"] = m.ThreadTS
		w["parent_user_id"] = ""
		if p := s.findLocked(m.Channel, m.ThreadTS); p != nil {
			w["parent_user_id"] = p.User
		}
	}
	if m.Blocks != nil {
		w["blocks"] = m.Blocks
	}
	if m.Edits > 0 {
		w["edited"] = map[string]any{"user": m.User, "ts": m.TS}
	}
	if withMetadata && m.Metadata != nil {
		w["metadata"] = m.Metadata
	}
	var replies []string
	for _, r := range s.msgs[m.Channel] {
		if r.ThreadTS == m.TS {
			replies = append(replies, r.TS)
		}
	}
	if len(replies) > 0 && m.ThreadTS == "" {
		w["thread_ts"] = m.TS
		w["reply_count"] = len(replies)
		w["latest_reply"] = replies[len(replies)-1]
	}
	return w
}

// page applies oldest/latest/inclusive, limit and cursor to msgs (already in
// the order the method returns them).
func (s *Server) pageLocked(c *call, msgs []*Message) response {
	oldest, latest := c.args.Get("oldest"), c.args.Get("latest")
	incl := truthy(c.args.Get("inclusive"))
	var in []*Message
	for _, m := range msgs {
		if oldest != "" && (tsLess(m.TS, oldest) || (!incl && m.TS == oldest)) {
			continue
		}
		if latest != "" && (tsLess(latest, m.TS) || (!incl && m.TS == latest)) {
			continue
		}
		in = append(in, m)
	}
	limit := 100
	if v, err := strconv.Atoi(c.args.Get("limit")); err == nil && v > 0 {
		limit = min(v, 1000)
	}
	start := 0
	if cur := c.args.Get("cursor"); cur != "" {
		raw, err := base64.StdEncoding.DecodeString(cur)
		n, err2 := strconv.Atoi(strings.TrimPrefix(string(raw), "next:"))
		if err != nil || err2 != nil || n < 0 || n > len(in) {
			return errResp("invalid_cursor")
		}
		start = n
	}
	end := min(start+limit, len(in))
	withMD := truthy(c.args.Get("include_all_metadata"))
	out := make([]map[string]any, 0, end-start)
	for _, m := range in[start:end] {
		out = append(out, s.wireLocked(m, withMD))
	}
	body := map[string]any{"messages": out, "has_more": end < len(in)}
	next := ""
	if end < len(in) {
		next = base64.StdEncoding.EncodeToString([]byte("next:" + strconv.Itoa(end)))
	}
	body["response_metadata"] = map[string]any{"next_cursor": next}
	return okResp(body)
}

func (s *Server) replies(c *call) response {
	ch, ts := c.args.Get("channel"), c.args.Get("ts")
	if !s.channelOK(ch) {
		return errResp("channel_not_found")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	root := s.findLocked(ch, ts)
	if root == nil {
		return errResp("thread_not_found")
	}
	if root.ThreadTS != "" {
		// Asked for a reply's ts: Slack answers with that reply's thread.
		root = s.findLocked(ch, root.ThreadTS)
		if root == nil {
			return errResp("thread_not_found")
		}
	}
	msgs := []*Message{root}
	for _, m := range s.msgs[ch] {
		if m.ThreadTS == root.TS {
			msgs = append(msgs, m)
		}
	}
	return s.pageLocked(c, msgs)
}

func (s *Server) history(c *call) response {
	ch := c.args.Get("channel")
	if !s.channelOK(ch) {
		return errResp("channel_not_found")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var msgs []*Message
	for _, m := range s.msgs[ch] {
		if m.ThreadTS == "" {
			msgs = append(msgs, m)
		}
	}
	// conversations.history answers newest first.
	sort.SliceStable(msgs, func(i, j int) bool { return tsLess(msgs[j].TS, msgs[i].TS) })
	return s.pageLocked(c, msgs)
}

// tsLess compares two Slack ts values numerically ("seconds.micros").
func tsLess(a, b string) bool {
	as, af, _ := strings.Cut(a, ".")
	bs, bf, _ := strings.Cut(b, ".")
	ai, _ := strconv.ParseInt(as, 10, 64)
	bi, _ := strconv.ParseInt(bs, 10, 64)
	if ai != bi {
		return ai < bi
	}
	af, bf = (af + "000000")[:6], (bf + "000000")[:6]
	return af < bf
}
