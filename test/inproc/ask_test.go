package inproc

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// The ask (R3.3): a session's question becomes one comment on the work item
// — the question itself, marker-stamped and carrying the envelope — whose URL
// `the-loop ask` prints; the bound Slack thread shows it once, and the
// comment's webhook is the-loop's own (no comment.agent echo).
func TestAskRecordsOneComment(t *testing.T) {
	w := newWorld(t)
	number, r := w.start("Ask")
	root := w.thread(r)
	before := len(w.gh.Comments(repo, number))
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	const q = "Which database should the widget use, ask-probe?"
	ans, err := w.agentSession(r).Ask(ctx, "", q, wait)
	if err != nil {
		t.Fatal(err)
	}
	id, url := ans.ID, ans.URL
	var recs []string
	for _, c := range w.gh.Comments(repo, number)[before:] {
		if strings.Contains(c.Body, "ask-probe") {
			recs = append(recs, c.HTMLURL)
			if !strings.Contains(c.Body, "<!-- the-loop:agent-comment -->") || !strings.Contains(c.Body, "<!-- the-loop:envelope ") {
				t.Errorf("question comment without marker or envelope:\n%s", c.Body)
			}
		}
	}
	if len(recs) != 1 || recs[0] != url {
		t.Fatalf("question comments %v, ask printed %q: want exactly one, its URL", recs, url)
	}
	w.waitSlack(root, string(catalog.SessionAwaitingInput), "ask-probe")
	w.waitLog("routing.dropped", map[string]any{"reason": "self-authored"})
	w.comment(number, alice, "sentinel after the question")
	w.waitSlack(root, "sentinel after the question")
	n := 0
	for _, m := range w.slack.Thread(channel, root) {
		if strings.Contains(messageText(m), "ask-probe") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the question shows %d times in Slack", n)
	}
	if len(w.logs.Find("bus.published", map[string]any{"event_type": string(catalog.CommentAgent), "work_item": r})) != 0 {
		t.Error("the question comment was echoed as comment.agent")
	}
	// The record stays where the ledger put it: its claim on the
	// question's id says recorded, at the URL the ask printed.
	kv, err := w.conn.KV(ctx, bus.BucketLedger)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, id)
	if err != nil {
		t.Fatalf("the ledger's claim on %s: %v", id, err)
	}
	var claim struct {
		State  string `json:"state"`
		Record *struct {
			URL string `json:"url"`
		} `json:"record"`
	}
	if err := json.Unmarshal(e.Value, &claim); err != nil || claim.State != "recorded" || claim.Record == nil || claim.Record.URL != url {
		t.Errorf("the ledger's claim on %s = %s (%v): want recorded at %s", id, e.Value, err, url)
	}
}
