package socketfake

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// TeamID is the workspace id the payloads below name.
const TeamID = "T0FAKETEAM"

// MessageEvent is the events_api payload of a member's message: a reply in
// thread root of channel, or a top-level message when root is "".
func MessageEvent(channel, user, text, ts, root string) json.RawMessage {
	ev := map[string]any{"type": "message", "channel": channel, "channel_type": "channel", "user": user, "text": text, "ts": ts}
	if root != "" {
		ev["thread_ts"] = root
	}
	body, _ := json.Marshal(map[string]any{"token": "ignored", "team_id": TeamID, "api_app_id": AppID,
		"type": "event_callback", "event_id": "Ev" + strings.ReplaceAll(ts, ".", ""), "event_time": time.Now().Unix(), "event": ev})
	return body
}

// Press is a member pressing a button on a message the app posted.
type Press struct {
	Channel, User string
	// MessageTS, MessageUser and MessageBotID are the pressed message's ts
	// and poster; Root is its thread's root ts ("" or MessageTS for a
	// top-level message).
	MessageTS, MessageUser, MessageBotID, Root string
	ActionID, Value                            string
	// ActionTS defaults to now.
	ActionTS string
}

// Payload is the interactive (block_actions) payload of the press.
func (p Press) Payload() json.RawMessage {
	m := map[string]any{"type": "message", "ts": p.MessageTS, "user": p.MessageUser, "bot_id": p.MessageBotID}
	container := map[string]any{"type": "message", "message_ts": p.MessageTS, "channel_id": p.Channel}
	if p.Root != "" && p.Root != p.MessageTS {
		m["thread_ts"], container["thread_ts"] = p.Root, p.Root
	}
	ats := p.ActionTS
	if ats == "" {
		now := time.Now()
		ats = fmt.Sprintf("%d.%06d", now.Unix(), now.Nanosecond()/1000)
	}
	body, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]any{"id": p.User}, "channel": map[string]any{"id": p.Channel},
		"container": container, "message": m, "trigger_id": "1.2.3", "api_app_id": AppID,
		"actions": []map[string]any{{"type": "button", "action_id": p.ActionID, "block_id": "the-loop.actions",
			"value": p.Value, "text": map[string]any{"type": "plain_text", "text": "label"}, "action_ts": ats}},
	})
	return body
}
