package envelope

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Event ids are deterministic, so a provider's retry or a crashed producer's
// second attempt yields the same id and the bus stores the event once
// (docs/architecture.md#the-ledger).

// GitHubID is the id of an event raised from a GitHub delivery.
func GitHubID(deliveryID string) string { return "gh:" + deliveryID }

// SlackEventID is the id of an event raised from a Slack Events API event.
func SlackEventID(eventID string) string { return "slack:" + eventID }

// SlackMessageID is the id of an event raised from a Slack message, whatever
// transport brought it (Events API, Socket Mode, polling): the channel and the
// message ts identify a message across Slack's retries, the message and
// app_mention twins of one post, and a re-read after a mode change, which
// Slack's per-delivery event_id does not.
func SlackMessageID(channel, ts string) string { return "slack:" + channel + ":" + ts }

// SlackInteractionID is the id of an event raised from a Block Kit
// interaction, which carries no event_id: the message it acted on and the
// action identify it.
func SlackInteractionID(channel, messageTS, actionID string) string {
	return "slack:" + channel + ":" + messageTS + ":" + actionID
}

// LoopID is the id of an event the loop raises itself. kind names what raised
// it (ask, notify, ...); parts are the facts that make it unique (work item,
// node, attempt...). The parts are hashed so the id stays short and carries no
// text.
func LoopID(kind string, parts ...string) string {
	h := sha256.New()
	for _, p := range parts {
		// A length prefix keeps ("ab","c") and ("a","bc") apart.
		h.Write([]byte{byte(len(p) >> 8), byte(len(p))})
		h.Write([]byte(p))
	}
	return "loop:" + kind + ":" + hex.EncodeToString(h.Sum(nil)[:16])
}

// validID reports whether id can be a ce-id and a Nats-Msg-Id: non-empty,
// printable ASCII without spaces, at most 256 bytes.
func validID(id string) bool {
	if id == "" || len(id) > 256 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return !strings.ContainsAny(id, "\"\\")
}
