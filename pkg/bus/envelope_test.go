package bus

import (
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

func TestFromEnvelope(t *testing.T) {
	ev := &loopv1.Event{Id: "slack:C1:1.2", Source: "slack", Type: "work-item.reply", Subject: "github:octo/repo#1",
		Time: envelope.NewTime(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)), Body: &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "hi"}}}
	m, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		t.Fatal(err)
	}
	got := FromEnvelope(m)
	if got.MsgID != ev.GetId() || got.Subject != m.Subject || string(got.Data) != string(m.Data) {
		t.Errorf("FromEnvelope = %+v", got)
	}
	if _, ok := got.Header[envelope.HeaderMsgID]; ok || len(got.Header) != len(m.Header)-1 {
		t.Errorf("headers %v: want every header of %v but %s", got.Header, m.Header, envelope.HeaderMsgID)
	}
	if _, ok := m.Header[envelope.HeaderMsgID]; !ok {
		t.Error("FromEnvelope changed the encoded message's headers")
	}
}
