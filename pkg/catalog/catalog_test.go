package catalog

import (
	"bytes"
	"strings"
	"testing"
)

func TestCatalogShape(t *testing.T) {
	all := All()
	if len(all) != 17 {
		t.Fatalf("catalog has %d types, want 17", len(all))
	}
	seen := map[Type]bool{}
	for _, e := range all {
		if seen[e.Type] {
			t.Errorf("duplicate type %s", e.Type)
		}
		seen[e.Type] = true
		if e.Description == "" || e.RaisedBy == "" {
			t.Errorf("%s lacks a description or raiser", e.Type)
		}
		// A publishable type starts off the ledger, so it must be recorded.
		if e.Publishable && !e.Record.Recorded() {
			t.Errorf("%s is publishable but not recorded", e.Type)
		}
	}
	// R1.2 coverage, and the flags docs/configuration.md#catalog-event-types
	// lists.
	for typ, want := range map[Type][3]bool{ // subscribable, publishable, recorded
		SessionAwaitingInput: {true, false, true},
		DecisionPending:      {true, false, false},
		WorkItemComplete:     {true, false, false},
		CommentHuman:         {true, false, false},
		CommentAgent:         {true, false, false},
		WorkItemReply:        {true, true, true},
		GateFeedback:         {true, true, true},
		ControlCommand:       {true, true, true},
		WorkItemCreate:       {true, true, true},
		WorkItemActivity:     {true, false, false},
		LedgerRecord:         {false, false, false},
		GraphOverride:        {true, false, true},
		CriticFindings:       {true, false, true},
	} {
		e, ok := Lookup(typ)
		if !ok {
			t.Errorf("%s missing", typ)
			continue
		}
		if got := [3]bool{e.Subscribable, e.Publishable, e.Record.Recorded()}; got != want {
			t.Errorf("%s flags = %v, want %v", typ, got, want)
		}
	}
	if Known("standing.started") || Publishable(SessionAwaitingInput) || !Subscribable(CommentAgent) {
		t.Error("lookup helpers disagree with the table")
	}
}

func TestSubjects(t *testing.T) {
	cases := []struct{ ref, key string }{
		{"github:octo/repo#15", "github_octo_repo_15"},
		{"github:Octo/My.Repo#15", "github_octo_my_repo_15"},
		{"github:ghe.corp.example/octo/repo#2", "github_ghe_corp_example_octo_repo_2"},
		{"slack:C123/1700000000.000100", "slack_c123_1700000000_000100"},
		{"", "_"},
		{"a.*>b c", "a___b_c"},
	}
	for _, c := range cases {
		if got := SubjectKey(c.ref); got != c.key {
			t.Errorf("SubjectKey(%q) = %q, want %q", c.ref, got, c.key)
		}
	}
	long := "github:" + strings.Repeat("o", 200) + "/r#1"
	if k := SubjectKey(long); len(k) != maxKeyLen || k == SubjectKey(long+"2") {
		t.Errorf("long key %q (len %d) not bounded or not distinct", k, len(k))
	}
	s := InboxSubject("github:octo/repo#15", GateFeedback)
	if s != "loop.in.github_octo_repo_15.gate.feedback" {
		t.Errorf("InboxSubject = %q", s)
	}
	prefix, p, key, typ, ok := ParseSubject("loop.ev.7.github_octo_repo_15.comment.human", true)
	if !ok || prefix != EventsPrefix || p != "7" || key != "github_octo_repo_15" || typ != CommentHuman {
		t.Errorf("ParseSubject = %q %q %q %q %v", prefix, p, key, typ, ok)
	}
	if _, _, _, _, ok := ParseSubject("loop.in.key", false); ok {
		t.Error("ParseSubject accepted a subject without a type")
	}
	if got := LogSubject("ledger-writer", "bus.recorded"); got != "loop.log.ledger-writer.bus.recorded" {
		t.Errorf("LogSubject = %q", got)
	}
}

func TestTablesListEveryType(t *testing.T) {
	var text, md bytes.Buffer
	if err := WriteTable(&text); err != nil {
		t.Fatal(err)
	}
	if err := WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, e := range All() {
		if !strings.Contains(text.String(), string(e.Type)+" ") {
			t.Errorf("text table lacks %s", e.Type)
		}
		row := "| `" + string(e.Type) + "` | " + YesNo(e.Subscribable) + " | " + YesNo(e.Publishable) + " | " + e.Record.String() + " |"
		if !strings.Contains(md.String(), row) {
			t.Errorf("markdown lacks row %q", row)
		}
	}
}
