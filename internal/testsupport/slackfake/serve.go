package slackfake

// Serving a Web API call: authentication, faults and limits, the form or
// JSON arguments, the answer.

import (
	"bytes"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

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
