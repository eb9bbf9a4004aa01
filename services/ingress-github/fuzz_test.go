package ingressgithub

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/envelope"
)

// FuzzWebhook drives the handler, on a real bus, with random bodies, event
// names and signatures (valid or not). It must never panic; a request
// without a valid signature is always 401 and publishes nothing; anything
// else is 2xx or a 4xx of the documented set; every event it publishes is a
// listed in the answer (the other tests check what events contain).
func FuzzWebhook(f *testing.F) {
	for _, s := range [][]byte{
		issueCommentJSON("created", 1, "alice", "OWNER", "hi"),
		issueCommentJSON("created", 2, "carol", "COLLABORATOR", envelope.MarkSelfAuthored("x")),
		issuesJSON("closed", "mallory", "ghe.example"),
		pullRequestJSON("opened", "alice", "Fixes #1, closes https://github.com/a/b/issues/2 and GH-3", "issue/4"),
		workflowRunJSON(10),
		[]byte(`{}`), []byte(`[]`), []byte(`{"repository":{"full_name":"a/b"},"issue":{"number":1e400}}`),
	} {
		f.Add(s, "issue_comment", true, "")
		f.Add(s, "pull_request", false, "sha256=00")
	}
	fe := newEnvBare(f)
	f.Fuzz(func(t *testing.T, body []byte, event string, signed bool, sig string) {
		fe.t = t
		req := httptest.NewRequest(http.MethodPost, WebhookPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", "fuzz")
		valid := signed
		if signed {
			req.Header.Set("X-Hub-Signature-256", sign(testSecret, body))
		} else {
			req.Header.Set("X-Hub-Signature-256", sig)
			valid = sig == sign(testSecret, body)
		}
		before := fe.stored()
		w := httptest.NewRecorder()
		fe.svc.Handler().ServeHTTP(w, req)
		after := fe.stored()
		switch {
		case !valid:
			if w.Code != http.StatusUnauthorized {
				t.Fatalf("unsigned request: %d, want 401", w.Code)
			}
		case w.Code == http.StatusAccepted:
		case w.Code == http.StatusOK, w.Code == http.StatusBadRequest:
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body)
		}
		if w.Code != http.StatusAccepted && after != before {
			t.Fatalf("status %d but %d messages stored", w.Code, after-before)
		}
		if w.Code == http.StatusAccepted {
			var r response
			if err := json.Unmarshal(w.Body.Bytes(), &r); err != nil || len(r.Events) == 0 {
				t.Fatalf("202 without event ids: %s", w.Body)
			}
		}
		// Clean up this delivery's seen key so the next input is routed.
		if kv, err := fe.conn.KV(context.Background(), bus.BucketSeen); err == nil {
			_ = kv.Delete(context.Background(), deliveryKey("fuzz"))
		}
	})
}
