package ingressslack

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/socketfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// TestSignatureFailClosed: a wrong signature, a stale or future timestamp,
// missing headers and a wrong secret are 401 on both endpoints, and nothing
// is published.
func TestSignatureFailClosed(t *testing.T) {
	e, s := started(t)
	body := messageBody("EvSig", reply("UALICE", thread1, "hi"))
	now := strconv.FormatInt(time.Now().Unix(), 10)
	stale := strconv.FormatInt(time.Now().Add(-6*time.Minute).Unix(), 10)
	future := strconv.FormatInt(time.Now().Add(6*time.Minute).Unix(), 10)
	cases := []struct {
		name    string
		headers map[string]string
	}{
		{"wrong signature", map[string]string{"X-Slack-Request-Timestamp": now, "X-Slack-Signature": sign("not-the-secret", now, body)}},
		{"signature of another body", map[string]string{"X-Slack-Request-Timestamp": now, "X-Slack-Signature": sign(testSecret, now, []byte("{}"))}},
		{"stale timestamp, validly signed", map[string]string{"X-Slack-Request-Timestamp": stale, "X-Slack-Signature": sign(testSecret, stale, body)}},
		{"future timestamp, validly signed", map[string]string{"X-Slack-Request-Timestamp": future, "X-Slack-Signature": sign(testSecret, future, body)}},
		{"no signature", map[string]string{"X-Slack-Request-Timestamp": now}},
		{"no timestamp", map[string]string{"X-Slack-Signature": sign(testSecret, now, body)}},
		{"no headers", nil},
		{"garbage signature", map[string]string{"X-Slack-Request-Timestamp": now, "X-Slack-Signature": "v0=zz"}},
	}
	before := e.stored()
	for _, c := range cases {
		for _, path := range []string{PathEvents, PathInteractions} {
			b := body
			if path == PathInteractions {
				b = form(pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, slackmsg.ApproveValue))
				if c.headers != nil && c.headers["X-Slack-Signature"] != "" && strings.Contains(c.name, "validly") {
					c.headers["X-Slack-Signature"] = sign(testSecret, c.headers["X-Slack-Request-Timestamp"], b)
				}
			}
			if r := e.postWith(s, path, b, c.headers); r.status != 401 {
				t.Errorf("%s on %s: %d, want 401", c.name, path, r.status)
			}
		}
	}
	if n := e.stored(); n != before {
		t.Errorf("the inbox stored %d message(s), want none", n-before)
	}
	if r := e.post(s, PathEvents, body); r.status != 200 {
		t.Errorf("correctly signed: %d, want 200", r.status)
	}
	if e.stored() != before+1 {
		t.Errorf("the correctly signed message was not published")
	}
	if !strings.Contains(e.logs.String(), "stale-timestamp") {
		t.Errorf("no rejection recorded as stale-timestamp")
	}
}

// TestURLVerification answers the handshake's challenge, signed only.
func TestURLVerification(t *testing.T) {
	e, s := started(t)
	body := []byte(`{"token":"x","challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P","type":"url_verification"}`)
	r := e.post(s, PathEvents, body)
	var got struct{ Challenge string }
	if r.status != 200 || json.Unmarshal([]byte(r.body), &got) != nil || got.Challenge != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Errorf("url_verification = %d %q", r.status, r.body)
	}
	if r := e.postWith(s, PathEvents, body, nil); r.status != 401 || strings.Contains(r.body, "3eZb") {
		t.Errorf("unsigned url_verification = %d %q, want 401 without the challenge", r.status, r.body)
	}
}

// TestSlackRetryPublishesOnce: Slack delivers one event again (a retry with
// X-Slack-Retry-Num, after the ledger-writer already consumed the first) and
// a press twice; each publishes once.
func TestSlackRetryPublishesOnce(t *testing.T) {
	e, s := started(t)
	before := e.stored()
	msg := reply("UALICE", thread1, "once")
	body := messageBody("EvRetry1", msg)
	if r := e.post(s, PathEvents, body); r.status != 200 {
		t.Fatalf("first delivery: %d", r.status)
	}
	e.waitEvent(messageID(testChannel, msg["ts"].(string))) // consumed and removed from the WorkQueue inbox
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	if r := e.postWith(s, PathEvents, body, map[string]string{
		"X-Slack-Request-Timestamp": ts, "X-Slack-Signature": sign(testSecret, ts, body),
		"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout",
	}); r.status != 200 {
		t.Fatalf("retry: %d", r.status)
	}
	// The same message under another event_id (its app_mention twin, or
	// a Socket Mode delivery) is the same event too.
	if r := e.post(s, PathEvents, messageBody("EvOther", msg)); r.status != 200 {
		t.Fatalf("twin: %d", r.status)
	}
	if n := e.stored() - before; n != 1 {
		t.Errorf("stored %d, want 1", n)
	}
	if d := metric(t, s.m.duplicates.WithLabelValues(viaEvents)); d != 2 {
		t.Errorf("dedup hits = %v, want 2", d)
	}
}

// TestNotReadyWithoutTokens: enabled with a token missing, the service runs,
// reads nothing and /readyz names the variable, never a value; disabled, it
// is ready and idle; both without ending Run.
func TestNotReadyWithoutTokens(t *testing.T) {
	e := newEnv(t)
	s := e.start(func(c *Config, _ *Options) { c.AppToken = noSecret })
	testkit.WaitWithin(e.t, waitFor, "readiness to name the missing app token", func() bool {
		return strings.Contains(s.ready.Check()[Name], "LOOP_SLACK_APP_TOKEN")
	})
	if strings.Contains(e.logs.String(), slackfake.Token) || strings.Contains(e.logs.String(), testSecret) {
		t.Errorf("a secret reached the log")
	}
	if e.sock.Opens() != 0 {
		t.Errorf("socket mode opened without an app token")
	}
	e.update(func(c *cfgT) { c.Channels.Slack.Enabled = false })
	e.waitReady(s)
	// A wrong app token: the reader fails, is restarted with back-off, and
	// readiness says so; the process carries on.
	s2 := e.start(func(c *Config, _ *Options) { c.AppToken = secret("xapp-wrong") })
	e.update(func(c *cfgT) { c.Channels.Slack.Enabled = true })
	testkit.WaitWithin(e.t, waitFor, "readiness to report the failing reader", func() bool {
		return strings.Contains(s2.ready.Check()[Name], "failed")
	})
	if strings.Contains(e.logs.String(), "xapp-wrong") {
		t.Errorf("the app token reached the log")
	}
	_ = socketfake.AppToken
}
