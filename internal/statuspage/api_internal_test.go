package statuspage

import (
	"testing"
	"time"
)

// TestAttentionOrderAndKinds: what waits for a person, oldest first — a
// gate, an unanswered question, a work item at an agent's node whose
// session is gone, a dead letter and a day's refusals; a live session
// working its node, and a finished work item, are not listed.
func TestAttentionOrderAndKinds(t *testing.T) {
	at := func(m int) time.Time { return time.Date(2026, 12, 2, 10, m, 0, 0, time.UTC) }
	items := []WorkItem{
		{Ref: "github:o/r#1", Status: "waiting", Current: "review", Gate: &Gate{Node: "review", Kind: "feedback", Since: at(5)}},
		{Ref: "github:o/r#2", Status: "active", Current: "design", UpdatedAt: at(3)},
		{Ref: "github:o/r#3", Status: "active", Current: "design", UpdatedAt: at(1)},
		{Ref: "github:o/r#4", Status: "complete", Current: "complete", UpdatedAt: at(0)},
	}
	sess := []Session{
		{Ref: "github:o/r#2", Status: "closed"},
		{Ref: "github:o/r#3", Status: "active"},
		{Ref: "github:o/r#4", Status: "closed"},
		{Ref: "github:o/r#5", Status: "active", AwaitingInput: "q-1", LastInputAt: at(2)},
	}
	dl := []DeadLetter{{Seq: 7, EventID: "e", Consumer: "ledger-writer", Reason: "bad", Time: at(4)}}
	refused := []Attention{{Kind: AttentionRefused, Since: at(6), Summary: "2 webhook.rejected in the last 24h0m0s"}}
	got := attention(items, sess, dl, refused)
	want := []struct{ kind, ref string }{
		{AttentionAsk, "github:o/r#5"}, {AttentionSession, "github:o/r#2"}, {AttentionDeadLetter, ""}, {AttentionGate, "github:o/r#1"}, {AttentionRefused, ""},
	}
	if len(got) != len(want) {
		t.Fatalf("attention = %+v, want %d items", got, len(want))
	}
	for i, w := range want {
		if got[i].Kind != w.kind || got[i].Ref != w.ref {
			t.Errorf("item %d = %s %s, want %s %s", i, got[i].Kind, got[i].Ref, w.kind, w.ref)
		}
	}
}
