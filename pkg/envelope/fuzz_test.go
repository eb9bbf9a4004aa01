package envelope

import (
	"errors"
	"strings"
	"testing"
)

// FuzzParseLedger: the parser never panics, never accepts what the key did not
// sign, and what it accepts re-encodes to the same envelope.
func FuzzParseLedger(f *testing.F) {
	enc, _ := SealLedger(testKey, ledgerFixture(), nil, testRecord, nil)
	for _, s := range []string{"", "LGTM", enc, enc + enc, "LGTM\n" + enc, envelopeOpen + "{}" + envelopeClose, envelopeOpen + `{"v":2,"sig":"x"}` + envelopeClose} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		l, err := ParseLedger(testKey, testRecord, body)
		if err != nil {
			if !errors.Is(err, ErrNoEnvelope) && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrForged) {
				t.Fatalf("unexpected error class: %v", err)
			}
			return
		}
		// Accepted: re-signing the same values for the same record and
		// visible text gives the very envelope the body carries.
		i := strings.Index(body, envelopeOpen)
		j := i + strings.Index(body[i:], envelopeClose) + len(envelopeClose)
		re, err := SealLedger(testKey, l, nil, testRecord, func(env string) string { return body[:i] + env + body[j:] })
		if err != nil {
			t.Fatalf("accepted envelope does not re-encode: %v", err)
		}
		if re != body {
			t.Fatalf("accepted envelope is not the canonical one")
		}
	})
}

// FuzzLedgerValues: whatever the values, the encoded envelope cannot close the
// comment or carry the marker, and it round-trips.
func FuzzLedgerValues(f *testing.F) {
	f.Add("octocat", "Mona -->", "1700000000.000100")
	f.Add("", "<!-- the-loop:agent-comment -->", "the-loop stop")
	f.Fuzz(func(t *testing.T, gh, name, ts string) {
		l := ledgerFixture()
		l.Actor.GitHub, l.Actor.Name, l.Conversation.ThreadTS = gh, name, ts
		enc, err := SealLedger(testKey, l, []string{"the-loop stop"}, testRecord, nil)
		if err != nil {
			if errors.Is(err, ErrUnsafe) {
				return
			}
			t.Fatal(err)
		}
		inner := strings.TrimSuffix(strings.TrimPrefix(enc, envelopeOpen), envelopeClose)
		if strings.Contains(inner, "--") || strings.Contains(inner, ">") || strings.Contains(strings.ToLower(inner), "the-loop stop") {
			t.Fatalf("unsafe encoding: %s", enc)
		}
		if _, err := ParseLedger(testKey, testRecord, enc); err != nil {
			t.Fatalf("own envelope refused: %v", err)
		}
	})
}

// FuzzFromMessage: decoding arbitrary bodies never panics.
func FuzzFromMessage(f *testing.F) {
	m, _ := ToMessage(replyEvent(), Inbox, "")
	f.Add(m.Data, m.Header[HeaderType][0])
	f.Add([]byte(`{}`), "work-item.reply")
	f.Fuzz(func(t *testing.T, data []byte, typ string) {
		h := map[string][]string{}
		for k, v := range m.Header {
			h[k] = v
		}
		h[HeaderType] = []string{typ}
		ev, err := FromMessage(Message{Subject: m.Subject, Header: h, Data: data})
		if err == nil && ev.GetType() != typ {
			t.Fatalf("accepted a message whose type header and body disagree")
		}
	})
}
