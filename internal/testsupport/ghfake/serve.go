package ghfake

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// maxRequestBody bounds a request body. A 65,536-character comment is at
// most a few hundred KB of JSON even with every character escaped.
const maxRequestBody = 8 << 20

// call is one request as the handlers see it.
type call struct {
	method    string
	path      string   // without the /api/v3 prefix
	segs      []string // path split on "/"
	r         *http.Request
	body      []byte
	api       string // base for API URLs in responses, ending in "/"
	token     string
	login     string
	now       time.Time
	requestID string
}

// response is what a handler decided, written after the lock is released.
type response struct {
	status int
	body   []byte
	header http.Header
	write  *Write
	drop   bool
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, entry, down, hook := s.begin(r)
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	if err != nil {
		s.finish(w, c, entry, s.plainError(http.StatusRequestEntityTooLarge, "Request body too large"))
		return
	}
	c.body = body

	if down {
		entry.Injected = true
		s.finish(w, c, entry, s.plainError(http.StatusServiceUnavailable, "Service Unavailable"))
		return
	}
	if hook != nil {
		r2 := r.Clone(r.Context())
		r2.Body = io.NopCloser(bytes.NewReader(body))
		if status, handled := hook(r2); handled {
			entry.Injected = true
			s.finish(w, c, entry, s.plainError(status, http.StatusText(status)))
			return
		}
	}
	// Matched only now, so that a request answered above does not use up
	// one of the rule's Times.
	s.mu.Lock()
	rl := s.matchRuleLocked(r.Method, c.path)
	s.mu.Unlock()
	if rl != nil && s.applyRule(w, r, c, entry, rl) {
		return
	}
	s.answer(w, c, entry)
}

// begin numbers a request and reads what it meets: whether the fake is down
// and the test's request hook.
func (s *Server) begin(r *http.Request) (c *call, entry Request, down bool, hook func(*http.Request) (int, bool)) {
	c = &call{method: r.Method, r: r, now: s.clk.now()}
	c.path, c.api = splitPrefix(r)
	c.segs = strings.Split(strings.Trim(c.path, "/"), "/")
	c.token = bearer(r.Header.Get("Authorization"))
	entry = Request{Method: r.Method, Path: c.path, Query: r.URL.RawQuery, Time: c.now}

	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	c.requestID = fmt.Sprintf("FA4E:%X:%X", s.seq, c.now.Unix())
	s.counts.Requests++
	entry.Login = s.st.tokens[c.token]
	return c, entry, s.down, s.onRequest
}

// applyRule carries out a fault rule that matched: a hang, a delay, an
// injected status. It reports whether the request is answered (or dropped);
// after a bare delay the request goes on to be handled.
func (s *Server) applyRule(w http.ResponseWriter, r *http.Request, c *call, entry Request, rl *Rule) bool {
	if rl.Hang {
		s.mu.Lock()
		s.counts.Injected++
		s.changedLocked() // lets a test Wait until the request is held
		s.mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-s.closing:
		}
		entry.Injected = true
		s.log(entry)
		// Never an answer, not even the empty 200 net/http would send.
		dropConnection(w)
		return true
	}
	if rl.Delay > 0 {
		tm := time.NewTimer(rl.Delay)
		select {
		case <-tm.C:
		case <-s.closing:
			tm.Stop()
			dropConnection(w)
			return true
		}
	}
	if rl.Status == 0 {
		return false
	}
	entry.Injected = true
	resp := s.plainError(rl.Status, http.StatusText(rl.Status))
	// Rate headers first, so that a rule can override them (an injected 403
	// with X-RateLimit-Remaining: 0).
	s.peekRateHeaders(resp, c)
	for k, vs := range rl.Header {
		resp.header.Del(k) // canonicalises k, whatever case the test wrote
		for _, v := range vs {
			resp.header.Add(k, v)
		}
	}
	s.finish(w, c, entry, resp)
	return true
}

// answer handles the request as GitHub would, runs the write hooks on what
// it changed, and writes the answer (or drops the connection when a test
// asked for the next write's answer to be lost).
func (s *Server) answer(w http.ResponseWriter, c *call, entry Request) {
	s.mu.Lock()
	// Read the clock again under the lock: budgets are charged in the
	// order requests are handled, so their times must be in that order too.
	c.now = s.clk.now()
	resp := s.handleLocked(c)
	entry.Login, entry.Time = c.login, c.now
	var hooks []*writeHook
	if resp.write != nil {
		hooks = append(hooks, s.hooks...)
		if s.dropNext > 0 {
			s.dropNext--
			resp.drop = true
		}
	}
	s.mu.Unlock()

	for _, h := range hooks {
		h.fn(*resp.write)
	}
	if resp.drop {
		entry.Status, entry.Dropped = resp.status, true
		s.mu.Lock()
		s.counts.Dropped++
		s.mu.Unlock()
		s.log(entry)
		dropConnection(w)
		return
	}
	s.finish(w, c, entry, resp)
}

// finish writes resp and logs the request.
func (s *Server) finish(w http.ResponseWriter, c *call, entry Request, resp *response) {
	if entry.Injected {
		s.mu.Lock()
		s.counts.Injected++
		s.mu.Unlock()
	}
	if resp.header.Get("X-RateLimit-Limit") == "" {
		s.peekRateHeaders(resp, c)
	}
	h := w.Header()
	for k, v := range resp.header {
		h[k] = v
	}
	h.Set("X-GitHub-Request-Id", c.requestID)
	h.Set("X-GitHub-Media-Type", "github.v3; format=json")
	if resp.body != nil {
		h.Set("Content-Type", "application/json; charset=utf-8")
		h.Set("Content-Length", strconv.Itoa(len(resp.body)))
	}
	w.WriteHeader(resp.status)
	if resp.body != nil {
		// A client that gave up is not an error of the fake.
		_, _ = w.Write(resp.body)
	}
	entry.Status = resp.status
	s.log(entry)
}

// peekRateHeaders gives an answer that never reached "GitHub" (injected, or
// refused before routing) the rate headers every answer carries, without
// charging the budget.
func (s *Server) peekRateHeaders(resp *response, c *call) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setRateHeaders(resp.header, s.primaryLocked(s.rateKeyLocked(c.token), c.now))
}

func (s *Server) log(entry Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.requests = append(s.requests, entry)
	s.changedLocked()
}

// rateKeyLocked is the primary-limit bucket of a token: its own for a
// known token, the unauthenticated one otherwise.
func (s *Server) rateKeyLocked(token string) string {
	if _, ok := s.st.tokens[token]; ok {
		return token
	}
	return ""
}

// dropConnection closes the connection under the handler without writing
// a response, so that the client gets a transport error.
func dropConnection(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	conn, _, err := rc.Hijack()
	if err == nil {
		_ = conn.Close()
		return
	}
	// Not hijackable (HTTP/2): abort the stream instead.
	panic(http.ErrAbortHandler)
}

// splitPrefix strips the GitHub Enterprise "/api/v3" prefix go-github's
// WithEnterpriseURLs adds, and returns the base that response URLs must use
// so that following them reaches the fake the same way.
func splitPrefix(r *http.Request) (p, api string) {
	p = r.URL.Path
	prefix := ""
	if p == "/api/v3" || strings.HasPrefix(p, "/api/v3/") {
		prefix = "/api/v3"
		p = strings.TrimPrefix(p, "/api/v3")
		if p == "" {
			p = "/"
		}
	}
	return p, "http://" + r.Host + prefix + "/"
}

// bearer extracts the token from "Bearer <t>" or "token <t>".
func bearer(h string) string {
	scheme, tok, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok {
		return ""
	}
	switch strings.ToLower(scheme) {
	case "bearer", "token":
		return strings.TrimSpace(tok)
	}
	return ""
}

func (s *Server) jsonResponse(status int, v any) *response {
	b, err := json.Marshal(v)
	if err != nil {
		// Only the fake's own types are marshalled; this is a bug here.
		panic(fmt.Sprintf("ghfake: marshal %T: %v", v, err))
	}
	return &response{status: status, body: b, header: http.Header{}}
}

func (s *Server) errorResponse(status int, msg, doc string) *response {
	return s.jsonResponse(status, errorJSON{Message: msg, DocumentationURL: doc, Status: strconv.Itoa(status)})
}

func (s *Server) plainError(status int, msg string) *response {
	return s.errorResponse(status, msg, "https://docs.github.com/rest")
}

func (s *Server) validation(doc, resource, field, code, msg string) *response {
	return s.jsonResponse(http.StatusUnprocessableEntity, errorJSON{
		Message:          "Validation Failed",
		Errors:           []fieldErrorJSON{{Resource: resource, Field: field, Code: code, Message: msg}},
		DocumentationURL: doc,
		Status:           "422",
	})
}

// handleLocked authenticates, applies the primary limit, routes, and
// finishes the response (ETag, 304, rate headers). Called with s.mu held:
// every handler only touches memory, and holding the lock from the limit
// check to the commit is what keeps concurrent writers from overrunning a
// budget.
func (s *Server) handleLocked(c *call) *response {
	if s.app != nil {
		if resp := s.appLocked(c); resp != nil {
			return resp
		}
	}
	var resp *response
	key := s.rateKeyLocked(c.token)
	win := s.primaryLocked(key, c.now)
	exempt := c.method == http.MethodGet && c.path == "/rate_limit" // GitHub does not charge it
	switch {
	case c.token == "":
		resp = s.errorResponse(http.StatusUnauthorized, "Requires authentication", "https://docs.github.com/rest")
	case key == "":
		resp = s.errorResponse(http.StatusUnauthorized, "Bad credentials", "https://docs.github.com/rest")
	case win.exhausted() && !exempt:
		s.counts.PrimaryLimited++
		u := s.userLocked(s.st.tokens[c.token])
		resp = s.errorResponse(http.StatusForbidden,
			fmt.Sprintf("API rate limit exceeded for user ID %d. If you reach out to GitHub Support for help, please include the request ID %s and timestamp %s.",
				u.id, c.requestID, c.now.UTC().Format("2006-01-02 15:04:05 MST")),
			"https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-the-primary-rate-limit")
		exempt = true // a refused request does not use up more budget
	default:
		c.login = s.st.tokens[c.token]
		resp = s.routeLocked(c)
	}

	if c.method == http.MethodGet && resp.status == http.StatusOK {
		sum := sha256.Sum256(resp.body)
		etag := `W/"` + hex.EncodeToString(sum[:]) + `"`
		resp.header.Set("ETag", etag)
		if etagMatch(c.r.Header.Get("If-None-Match"), etag) {
			// GitHub does not charge a conditional request answered 304;
			// that is why pollers send them.
			resp = &response{status: http.StatusNotModified, header: http.Header{"Etag": {etag}}}
			exempt = true
		}
	}
	if !exempt {
		win.used++
	}
	s.setRateHeaders(resp.header, win)
	return resp
}

// etagMatch implements If-None-Match's weak comparison.
func etagMatch(header, etag string) bool {
	if header == "" {
		return false
	}
	want := strings.TrimPrefix(etag, "W/")
	for _, t := range strings.Split(header, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == want {
			return true
		}
	}
	return false
}
