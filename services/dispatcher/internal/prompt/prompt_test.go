package prompt

import (
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/pkg/excerpt"
	"github.com/the-loop/bus/pkg/graph"
)

func TestSafeSubstitute(t *testing.T) {
	vars := map[string]string{"a": "A", "work_item": "W", "x": "$a"}
	for _, c := range []struct{ in, want string }{
		{"$a", "A"},
		{"${a}", "A"},
		{"$$a", "$a"},
		{"$$$a", "$A"},
		{"$work_item", "W"},
		{"$work_items", "$work_items"}, // longest name: unknown, stays
		{"${work_item}s", "Ws"},
		{"$unknown ${unknown}", "$unknown ${unknown}"},
		{"$ $1 ${ ${1} ${a", "$ $1 ${ ${1} ${a"},
		{"$x", "$a"}, // values are not scanned again
		{"cost: 5$", "cost: 5$"},
		{"${A}", "${A}"}, // names are case-sensitive
		{"ü$aü", "üAü"},
	} {
		if got := SafeSubstitute(c.in, vars); got != c.want {
			t.Errorf("SafeSubstitute(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestDirectiveAppendedWhenOmitted(t *testing.T) {
	tm := Templates{Event: "event $event  \n\n", Spawn: "spawn ${interaction_directive} end", Mode: ModeCLI}
	got := tm.Render(Event, Data{Event: "issues"})
	if want := "event issues\n\n" + directiveCLI + "\n"; got != want {
		t.Errorf("event = %q, want %q", got, want)
	}
	if got := tm.Render(Spawn, Data{}); got != "spawn "+directiveCLI+" end" {
		t.Errorf("spawn = %q", got)
	}
}

func TestDashesAndModes(t *testing.T) {
	got := Defaults().Render(Event, Data{WorkItem: "github:o/r#1"})
	if !strings.Contains(got, "- event:  / -\n") || !strings.Contains(got, "- delivery: -\n") {
		t.Errorf("empty action and delivery id are not '-':\n%s", got)
	}
	for in, want := range map[string]Mode{"": ModeWorkItem, " CLI ": ModeCLI, "work-item": ModeWorkItem} {
		if m, ok := ParseMode(in); m != want || !ok {
			t.Errorf("ParseMode(%q) = %q, %v", in, m, ok)
		}
	}
	if m, ok := ParseMode("chat"); m != ModeWorkItem || ok {
		t.Errorf("an unknown mode gave %q, %v; want work-item and a warning", m, ok)
	}
}

// TestUntrustedFramingAdjacent: in both built-in templates the UNTRUSTED
// framing is the last thing before the excerpt's fence.
func TestUntrustedFramingAdjacent(t *testing.T) {
	for name, tmpl := range map[string]string{"event": DefaultEvent, "spawn": DefaultSpawn} {
		i := strings.LastIndex(tmpl, "UNTRUSTED")
		j := strings.Index(tmpl, "```json\n$payload_excerpt\n```")
		if i < 0 || j < i || strings.Contains(tmpl[i:j], "$") {
			t.Errorf("%s: the UNTRUSTED framing is not right above the excerpt", name)
		}
	}
}

// TestOrdinaryCommentSize pins the size of the prompt an ordinary comment
// renders (docs/requirements.md E5: about 2,900 characters with a graph block),
// so a change to the constant text is a decision, not a drift.
func TestOrdinaryCommentSize(t *testing.T) {
	payload := `{"action":"created","comment":{"body":"the-loop execute\n\nPlease keep the anchor for inline comments.",` +
		`"html_url":"https://github.com/o/r/issues/243#issuecomment-9876543210","user":{"login":"reviewer","avatar_url":"x"}},` +
		`"issue":{"number":243,"title":"t","body":"long"},"repository":{"full_name":"o/r"}}`
	ex, err := excerpt.Excerpt("issue_comment", []byte(payload))
	if err != nil || len(ex) != 203 {
		t.Fatalf("excerpt = %d chars (%v), want the 203 of docs/requirements.md E5", len(ex), err)
	}
	g, _ := graph.Builtin("work-item")
	st, _, err := graph.New(g, "github:o/r#243", testTime)
	if err != nil {
		t.Fatal(err)
	}
	gc := graph.Context(st, g)
	got := Defaults().Render(Event, Data{WorkItem: "github:o/r#243", Event: "issue_comment", Action: "created",
		Repository: "o/r", DeliveryID: "gh:issue-comment:9876543210", Excerpt: ex, GraphContext: gc})
	const want = 2633 // ours; the original renders 2,865 for the same comment
	if len(got) < 2600 || len(got) > 3200 || len(got) != want {
		t.Errorf("ordinary comment prompt = %d chars (graph block %d), want about 2,900", len(got), len(gc))
	}
	t.Logf("prompt %d chars: directive %d, graph block %d, excerpt %d", len(got), len(directiveWorkItem), len(gc), len(ex))
}

var testTime = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
