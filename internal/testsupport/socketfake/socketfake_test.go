package socketfake

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"testing"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
)

// client runs slack-go's Socket Mode client against s, acking every
// envelope it receives, and returns the envelope ids seen.
func client(t *testing.T, s *Server, appToken string) (<-chan socketmode.Event, func()) {
	t.Helper()
	api := slack.New(slackfake.Token, slack.OptionAPIURL(s.URL()), slack.OptionAppLevelToken(appToken))
	c := socketmode.New(api, socketmode.OptionLog(log.New(io.Discard, "", 0)), socketmode.OptionPingInterval(3*time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan socketmode.Event, 100)
	done := make(chan struct{})
	go func() { _ = c.RunContext(ctx) }()
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case ev := <-c.Events:
				if ev.Request != nil && ev.Request.EnvelopeID != "" {
					_ = c.Ack(*ev.Request)
				}
				select {
				case out <- ev:
				default:
				}
			}
		}
	}()
	return out, func() { cancel(); <-done }
}

// TestProtocol: hello, an envelope acked, a disconnect frame and a dropped
// socket each followed by a reconnect, and the Web API passed through.
func TestProtocol(t *testing.T) {
	api := slackfake.New(t)
	s := New(t, WithAPI(api.URL()), WithPingInterval(100*time.Millisecond))
	_, stop := client(t, s, AppToken)
	defer stop()
	s.WaitConnected(t, 1, 10*time.Second)
	id := s.Send(t, "events_api", json.RawMessage(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","channel":"C1","user":"U1","text":"hi","ts":"1.000001"}}`))
	if e := s.WaitAck(t, id, 10*time.Second); !e.Acked || e.Conn != 1 {
		t.Errorf("envelope = %+v", e)
	}
	s.Disconnect(t, "refresh_requested")
	s.WaitConnected(t, 2, 10*time.Second)
	id = s.Send(t, "interactive", json.RawMessage(`{"type":"block_actions","user":{"id":"U1"},"actions":[]}`))
	if e := s.WaitAck(t, id, 10*time.Second); e.Conn != 2 {
		t.Errorf("after disconnect: %+v", e)
	}
	s.Drop(t)
	s.WaitConnected(t, 3, 10*time.Second)
	if s.Opens() < 3 {
		t.Errorf("opens = %d", s.Opens())
	}
	// Other methods reach the Web API fake behind.
	resp, err := slack.New(slackfake.Token, slack.OptionAPIURL(s.URL())).AuthTest()
	if err != nil || resp.UserID != slackfake.BotUserID {
		t.Errorf("auth.test through the fake = %v, %v", resp, err)
	}
}

// TestRefusesWrongToken: apps.connections.open refuses another token, so no
// socket is opened.
func TestRefusesWrongToken(t *testing.T) {
	s := New(t)
	api := slack.New("xoxb-x", slack.OptionAPIURL(s.URL()), slack.OptionAppLevelToken("xapp-wrong"))
	if _, _, err := api.StartSocketModeContext(context.Background()); err == nil || err.Error() != "invalid_auth" {
		t.Errorf("open with a wrong token = %v, want invalid_auth", err)
	}
	if s.Opens() != 0 || s.Connections() != 0 {
		t.Errorf("opens %d connections %d", s.Opens(), s.Connections())
	}
}
