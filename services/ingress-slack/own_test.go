package ingressslack

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOwnPayloads runs this package's own payloads (testdata/), which cover
// the core behaviours wherever the shared examples are absent, through the
// HTTP handlers, asserting the event or drop reason of each.
func TestOwnPayloads(t *testing.T) {
	want := map[string]string{
		"events.reply.json":         "published:work-item.reply",
		"events.gate-reply.json":    "published:gate.feedback",
		"events.control.json":       "published:control.command",
		"events.kickoff.json":       "published:work-item.create",
		"events.bot.json":           "dropped:self-authored",
		"events.unauthorized.json":  "dropped:unauthorized-actor",
		"events.edit.json":          "dropped:ignored",
		"events.unmapped.json":      "dropped:unmapped",
		"interactions.approve.json": "published:gate.feedback",
		"interactions.crafted.json": "published:control.command",
		"interactions.link.json":    "dropped:ignored",
	}
	e, s := started(t)
	files, _ := filepath.Glob("testdata/*.json")
	if len(files) != len(want) {
		t.Errorf("%d payloads in testdata, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		name := filepath.Base(f)
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		i := e.logs.Len()
		path, body := PathEvents, raw
		if strings.HasPrefix(name, "interactions.") {
			path, body = PathInteractions, form(raw)
		}
		if r := e.post(s, path, body); r.status != 200 {
			t.Errorf("%s: %d %s", name, r.status, r.body)
			continue
		}
		if got, _ := e.settledSince(i); got.String() != want[name] {
			t.Errorf("%s: %s, want %s", name, got, want[name])
		}
	}
}
