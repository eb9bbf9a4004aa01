package slackfake

// The methods that post, show and change messages.

import (
	"encoding/json"
	"time"
)

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

// contentIn is content for a message in channel ch, which must be one the
// fake knows (channel_not_found otherwise).
func (s *Server) contentIn(c *call, ch string) (text string, blocks json.RawMessage, md *Metadata, errCode string) {
	if !s.channelOK(ch) {
		return "", nil, nil, "channel_not_found"
	}
	return content(c)
}

func (s *Server) postMessage(c *call) response {
	ch := c.args.Get("channel")
	text, blocks, md, code := s.contentIn(c, ch)
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
	text, blocks, md, code := s.contentIn(c, ch)
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
