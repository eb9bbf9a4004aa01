package slackfake

// What a test does to the fake and reads back from it: faults, rate
// limits, hooks, the messages and requests it holds, waiting for a change.

import (
	"fmt"
	"time"
)

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
