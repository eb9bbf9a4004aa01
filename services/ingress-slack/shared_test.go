package ingressslack

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
)

// sharedDir is the shared Slack payloads, or skips: the core behaviours are
// covered by this package's own payloads.
func sharedDir(t *testing.T) string {
	t.Helper()
	return testkit.SharedTestdata(t, "slack")
}

// TestSharedPayloads runs every Events API body, interactivity payload,
// Socket Mode frame and url_verification body of the shared Slack examples
// through the service (over real HTTP, signed, and over the Socket Mode
// fake) and asserts the event or the drop reason of each. A file without an
// expectation fails the test, so a new example cannot go unjudged.
func TestSharedPayloads(t *testing.T) {
	dir := sharedDir(t)
	want := map[string]string{
		"events_api/app_mention.json":                              "dropped:ignored",
		"events_api/message.bot_profile.json":                      "dropped:self-authored",
		"events_api/message.channel.authorizations.json":           "published:work-item.create",
		"events_api/message.channel.json":                          "published:work-item.create",
		"events_api/message.message_changed.assistant_thread.json": "dropped:ignored",
		"events_api/message.message_changed.json":                  "dropped:ignored",
		"events_api/message.message_deleted.json":                  "dropped:ignored",
		"events_api/message.subtype_bot_message.json":              "dropped:self-authored",
		"events_api/message.subtype_bot_message.response_url.json": "dropped:self-authored",
		"events_api/message.thread_broadcast.json":                 "published:work-item.reply",
		"events_api/message.thread_reply.channel.json":             "published:gate.feedback",
		"events_api/message.thread_reply.im.json":                  "dropped:unmapped",
		"events_api/reaction_added.json":                           "dropped:ignored",
		"interactivity/block_actions.button.ephemeral.json":        "dropped:unmapped",
		"interactivity/block_actions.button.message.json":          "published:work-item.reply",
		"interactivity/block_actions.button.org_install.json":      "dropped:unmapped",
		"socket_mode/events_api.app_mention.json":                  "dropped:ignored",
		"socket_mode/events_api.message.json":                      "dropped:unauthorized-actor",
		"socket_mode/events_api.message.retry_timeout.json":        "published:work-item.create",
		"socket_mode/interactive.block_actions.view.json":          "dropped:ignored",
		"socket_mode/interactive.shortcut.json":                    "dropped:ignored",
		"socket_mode/slash_commands.json":                          "dropped:ignored",
		"socket_mode/hello.json":                                   "frame",
		"socket_mode/disconnect.too_many_websockets.json":          "reconnect",
		"url_verification/url_verification.json":                   "challenge",
	}
	e := newEnv(t)
	e.update(func(c *config.Config) { c.Channels.Slack.Channel = "C111" })
	e.bind("C111", "1633663824.000500", "github:octo/repo#11")
	e.bind("C111", "1726133698.626339", "github:octo/repo#12")
	e.bind("C111", "1678252213.679169", "github:octo/repo#13")
	e.setGraph("github:octo/repo#12", true)
	s := e.start()
	e.sock.WaitConnected(t, 1, waitFor)
	e.waitReady(s)

	var files []string
	for _, sub := range []string{"events_api", "interactivity", "socket_mode", "url_verification"} {
		m, _ := filepath.Glob(filepath.Join(dir, sub, "*.json"))
		for _, f := range m {
			files = append(files, sub+"/"+filepath.Base(f))
		}
	}
	sort.Strings(files)
	if len(files) < len(want) {
		t.Errorf("found %d shared payloads, want at least %d", len(files), len(want))
	}
	for _, name := range files {
		exp, ok := want[name]
		if !ok {
			t.Errorf("%s: no expectation; add one", name)
			continue
		}
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		got := e.sharedOne(s, name, raw)
		if got != exp {
			t.Errorf("%s: %s, want %s", name, got, exp)
		}
	}
}

func (e *env) sharedOne(s *svc, name string, raw []byte) string {
	e.t.Helper()
	i := e.logs.Len()
	switch {
	case strings.HasPrefix(name, "url_verification/"):
		r := e.post(s, PathEvents, raw)
		var c struct{ Challenge string }
		if r.status == 200 && json.Unmarshal([]byte(r.body), &c) == nil && c.Challenge != "" && strings.Contains(string(raw), c.Challenge) {
			return "challenge"
		}
		return r.body
	case strings.HasPrefix(name, "events_api/"):
		if r := e.post(s, PathEvents, raw); r.status != 200 {
			return "status " + r.body
		}
	case strings.HasPrefix(name, "interactivity/"):
		if r := e.post(s, PathInteractions, form(raw)); r.status != 200 {
			return "status " + r.body
		}
	default:
		var head struct {
			EnvelopeID string `json:"envelope_id"`
			Type       string `json:"type"`
		}
		_ = json.Unmarshal(raw, &head)
		switch head.Type {
		case "hello":
			e.sock.SendFrame(e.t, raw)
			if len(e.logs.Since(i, "channel.dropped", "bus.published")) != 0 {
				return "records"
			}
			return "frame"
		case "disconnect":
			n := e.sock.Connections()
			e.sock.SendFrame(e.t, raw)
			e.sock.WaitConnected(e.t, n+1, waitFor)
			return "reconnect"
		}
		e.sock.SendFrame(e.t, raw)
		env := e.sock.WaitAck(e.t, head.EnvelopeID, waitFor)
		if env.Latency() > ackWithin {
			e.t.Errorf("%s acked after %s", name, env.Latency())
		}
	}
	o, _ := e.settledSince(i)
	return o.String()
}
