package ingressslack

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/socketfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// ackWithin is Slack's Socket Mode deadline.
const ackWithin = 3 * time.Second

// sendEnvelope sends one envelope and waits for its ack, returning what
// became of its message.
func (e *env) sendEnvelope(typ string, payload []byte, opts ...socketfake.SendOption) (outcome, map[string]any, socketfake.Envelope) {
	e.t.Helper()
	i := e.logs.Len()
	id := e.sock.Send(e.t, typ, json.RawMessage(payload), opts...)
	env := e.sock.WaitAck(e.t, id, waitFor)
	if env.Latency() > ackWithin {
		e.t.Errorf("envelope %s acked after %s, over Slack's %s", id, env.Latency(), ackWithin)
	}
	o, rec := e.settledSince(i)
	return o, rec, env
}

// TestSocketMode runs the service against a local Socket Mode server: hello,
// events_api and interactive envelopes acked after their message is
// published, a redelivery acked and published once, envelopes the-loop does
// not handle acked too, and a disconnect frame and a dropped socket both
// followed by a reconnect that keeps working.
func TestSocketMode(t *testing.T) {
	e := newEnv(t)
	s := e.start()
	e.sock.WaitConnected(t, 1, waitFor)
	e.waitReady(s)

	msg := reply("UALICE", thread1, "over the socket")
	payload := messageBody("EvSock1", msg)
	got, rec, first := e.sendEnvelope("events_api", payload)
	if got.typ != catalog.WorkItemReply || rec["via"] != viaSocket {
		t.Fatalf("events_api: %v %v", got, rec)
	}
	e.waitEvent(messageID(testChannel, msg["ts"].(string)))
	before := e.stored()
	// Slack's retry of an envelope it thinks unacked: acked, published once.
	if got, _, _ := e.sendEnvelope("events_api", payload, socketfake.WithEnvelopeID(first.ID), socketfake.WithRetry(1, "timeout")); !got.published() {
		t.Errorf("retry: %v", got)
	}
	if n := e.stored() - before; n != 0 {
		t.Errorf("the retry stored %d new message(s)", n)
	}

	// An interactive envelope: a rendered Approved press at a gate.
	if got, _, _ := e.sendEnvelope("interactive", pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, e.gateValue(refGate))); got.typ != catalog.GateFeedback {
		t.Errorf("interactive: %v", got)
	}
	// A link button, a slash command and an event slack-go cannot parse:
	// acknowledged and ignored.
	if got, _, _ := e.sendEnvelope("interactive", pressBody("UALICE", testChannel, gate, "", slackmsg.LinkActionID, "")); got.reason != reasonIgnored {
		t.Errorf("link button: %v", got)
	}
	if got, _, _ := e.sendEnvelope("slash_commands", []byte(`{"command":"/loop","text":"the-loop stop","user_id":"UALICE","channel_id":"C0LOOP"}`)); got.reason != reasonIgnored {
		t.Errorf("slash command: %v", got)
	}
	if got, _, _ := e.sendEnvelope("events_api", []byte(`{"type":"event_callback","event_id":"EvNew","event":{"type":"brand_new_event_type","user":"UALICE"}}`)); got.reason != reasonIgnored {
		t.Errorf("unknown event: %v", got)
	}

	// Slack asks the client to reconnect: it opens a new connection and
	// carries on.
	e.sock.Disconnect(t, "refresh_requested")
	e.sock.WaitConnected(t, 2, waitFor)
	if got, _, env := e.sendEnvelope("events_api", messageBody("EvSock2", reply("UALICE", thread1, "after refresh"))); !got.published() || env.Conn != 2 {
		t.Errorf("after disconnect: %v on connection %d", got, env.Conn)
	}
	// The socket dies without a word: the client reconnects too.
	e.sock.Drop(t)
	e.sock.WaitConnected(t, 3, waitFor)
	if got, _, env := e.sendEnvelope("events_api", messageBody("EvSock3", reply("UALICE", thread1, "after drop"))); !got.published() || env.Conn != 3 {
		t.Errorf("after drop: %v on connection %d", got, env.Conn)
	}
	if n := e.sock.Opens(); n < 3 {
		t.Errorf("apps.connections.open called %d times, want a call per connection", n)
	}
	if a := metric(t, s.m.acks); a < 7 {
		t.Errorf("acks = %v, want every envelope acked", a)
	}
}

// TestSocketUnsettledIsNotAcked: while the bus refuses the publish the
// envelope is left unacked (Slack will redeliver); Slack's redelivery once
// the bus is back is acked and published once.
func TestSocketUnsettledIsNotAcked(t *testing.T) {
	e := newEnv(t)
	s := e.start(func(_ *Config, o *Options) { o.ProcessTimeout = 500 * time.Millisecond })
	e.sock.WaitConnected(t, 1, waitFor)
	e.waitReady(s)
	// NATS goes away: the thread lookup and the publish both fail.
	e.srv.Shutdown()
	msg := reply("UALICE", thread1, "lost?")
	payload := messageBody("EvUnsettled", msg)
	id := e.sock.Send(t, "events_api", payload)
	testkit.WaitWithin(e.t, waitFor, "the failed attempt to be counted", func() bool { return metric(t, s.m.retried.WithLabelValues(viaSocket)) >= 1 })
	if env, _ := e.sock.Envelope(id); env.Acked {
		t.Fatalf("an envelope whose message was not published was acked")
	}
	e.srv.Restart(t)
	testkit.WaitWithin(e.t, waitFor, "the bus to reconnect", e.conn.Connected)
	e.sock.Send(t, "events_api", payload, socketfake.WithEnvelopeID(id), socketfake.WithRetry(1, "timeout"))
	e.sock.WaitAck(t, id, waitFor)
	e.waitEvent(messageID(testChannel, msg["ts"].(string)))
}
