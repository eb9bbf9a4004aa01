package ingressslack

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// seeds are this package's own payloads (testdata/) plus the shared ones
// when present.
func seeds(f *testing.F) [][]byte {
	var out [][]byte
	for _, glob := range []string{"testdata/*.json", "../../../shared/testdata/slack/*/*.json"} {
		m, _ := filepath.Glob(glob)
		for _, p := range m {
			if b, err := os.ReadFile(p); err == nil {
				out = append(out, b)
			}
		}
	}
	value := slackmsg.GateValue{Ref: refGate, Visit: "requirements-approval.3.1700000000000"}.String()
	out = append(out, messageBody("EvF", reply("UALICE", thread1, "the-loop stop")),
		pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, slackmsg.ApproveValue),
		pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, value),
		pressBody("UALICE", testChannel, gate, "", slackmsg.RequestChangesActionID, value+"x"),
		pressBody("UALICE", testChannel, gate, "", slackmsg.ApproveActionID, value+" "+strings.Repeat("9", slackmsg.MaxGateValue)),
		[]byte("{}"), []byte("null"))
	return out
}

// FuzzDecodeClassify: the decoders never panic, every message they accept
// carries a well-formed id, a gate button's value is either read as the
// gate value it is (a visit graph.ParseVisit accepts, or a legacy value
// without one) or refused as invalid — never taken as free text — and the
// classifier returns exactly one of its three types, control whenever the
// grammar finds a keyword.
func FuzzDecodeClassify(f *testing.F) {
	for _, b := range seeds(f) {
		f.Add(b, "the-loop stop", true)
	}
	f.Add([]byte(`{"type":"event_callback","event":{"type":"message","channel":"C","ts":"1.2","user":"U","text":"x"}}`), "approved", false)
	g := control.Default()
	f.Fuzz(func(t *testing.T, body []byte, text string, gate bool) {
		for _, dec := range []func() (*inbound, error){
			func() (*inbound, error) { in, _, err := decodeEvents(body, viaEvents); return in, err },
			func() (*inbound, error) { return decodeInteraction(body, viaSocket) },
		} {
			in, err := dec()
			if err != nil || in == nil || in.ignore != "" {
				continue
			}
			if p := in.press; p != nil && (p.actionID == slackmsg.ApproveActionID || p.actionID == slackmsg.RequestChangesActionID) {
				_, perr := slackmsg.ParseGateValue(p.value)
				switch {
				case in.invalid != "":
					if p.rendered || in.text != "" || !errors.Is(perr, slackmsg.ErrBadGateValue) {
						t.Errorf("refused gate value read anyway: %+v %+v", in, p)
					}
					continue
				case p.rendered && p.gate.Visit == "":
					if !slackmsg.LegacyGateValue(p.actionID, p.value) {
						t.Errorf("a gate press without a visit that is not a legacy value: %+v", p)
					}
				case p.rendered:
					if perr != nil || p.gate.String() != p.value {
						t.Errorf("gate value %q read as %+v (%v)", p.value, p.gate, perr)
					}
				case !errors.Is(perr, slackmsg.ErrNotGateValue):
					t.Errorf("gate value %q taken as free text: %v", p.value, perr)
				}
				if p.rendered && in.text != graph.ApproveText && in.text != graph.RequestChangesText {
					t.Errorf("gate press injects %q", in.text)
				}
			}
			if in.invalid != "" {
				t.Errorf("invalid outside a gate button: %+v", in)
				continue
			}
			if !strings.HasPrefix(in.id, "slack:") || in.channel == "" || in.ts == "" {
				t.Errorf("accepted message without a proper id: %+v", in)
			}
			_ = in.topLevel()
			_ = in.at(time.Now())
			if in.text == "" && in.subtype != "bot_message" {
				t.Errorf("accepted a message with no text: %+v", in)
			}
		}
		typ, res, err := classify(g, text, func() (bool, error) { return gate, nil })
		switch {
		case err != nil:
			t.Fatal(err)
		case g.Parse(text).Found():
			if typ != catalog.ControlCommand || !res.Found() {
				t.Errorf("keyword text %q classified %s", text, typ)
			}
		case gate && typ != catalog.GateFeedback, !gate && typ != catalog.WorkItemReply:
			t.Errorf("text %q at gate=%v classified %s", text, gate, typ)
		}
		_ = title(text)
	})
}

// FuzzHandlers posts arbitrary bodies to both endpoints of a running
// service on real JetStream: unsigned ones are always 401; signed ones are
// answered 200 (settled) or 400 (malformed), never a server error.
func FuzzHandlers(f *testing.F) {
	for _, b := range seeds(f) {
		f.Add(b, true, false)
		f.Add(b, false, true)
	}
	e := newEnv(f)
	s := e.start()
	e.waitReady(s)
	client := &http.Client{Timeout: waitFor}
	f.Fuzz(func(t *testing.T, body []byte, signed, interactions bool) {
		path := PathEvents
		if interactions {
			path = PathInteractions
			body = form(body)
		}
		req, _ := http.NewRequest(http.MethodPost, s.http.URL+path, bytes.NewReader(body))
		if signed {
			ts := strconv.FormatInt(time.Now().Unix(), 10)
			req.Header.Set("X-Slack-Request-Timestamp", ts)
			req.Header.Set("X-Slack-Signature", sign(testSecret, ts, body))
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		switch {
		case !signed && resp.StatusCode != http.StatusUnauthorized:
			t.Errorf("unsigned: %d, want 401", resp.StatusCode)
		case signed && resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusBadRequest && resp.StatusCode != http.StatusRequestEntityTooLarge:
			t.Errorf("signed: %d", resp.StatusCode)
		}
	})
}
