package bus

import "github.com/the-loop/bus/pkg/envelope"

// FromEnvelope is the bus message of an encoded event (envelope.ToMessage):
// its subject, body and CloudEvents headers, with Nats-Msg-Id — which the bus
// sets itself and refuses among a message's headers — moved to MsgID. The
// encoding always sets it to the event id.
func FromEnvelope(m envelope.Message) Message {
	h := make(Header, len(m.Header))
	var id string
	for k, v := range m.Header {
		if k == envelope.HeaderMsgID {
			if len(v) > 0 {
				id = v[0]
			}
			continue
		}
		h[k] = v
	}
	return Message{Subject: m.Subject, Header: h, Data: m.Data, MsgID: id}
}
