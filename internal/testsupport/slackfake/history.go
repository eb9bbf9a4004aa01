package slackfake

// Reading a channel back: conversations.history and conversations.replies,
// with their cursors.

import (
	"encoding/base64"
	"sort"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/slackmsg"
)

// page applies oldest/latest/inclusive, limit and cursor to msgs (already in
// the order the method returns them).
func (s *Server) pageLocked(c *call, msgs []*Message) response {
	oldest, latest := c.args.Get("oldest"), c.args.Get("latest")
	incl := truthy(c.args.Get("inclusive"))
	var in []*Message
	for _, m := range msgs {
		if oldest != "" && (slackmsg.CompareTS(m.TS, oldest) < 0 || (!incl && m.TS == oldest)) {
			continue
		}
		if latest != "" && (slackmsg.CompareTS(latest, m.TS) < 0 || (!incl && m.TS == latest)) {
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
	sort.SliceStable(msgs, func(i, j int) bool { return slackmsg.CompareTS(msgs[j].TS, msgs[i].TS) < 0 })
	return s.pageLocked(c, msgs)
}
