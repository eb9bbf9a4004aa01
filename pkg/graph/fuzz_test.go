package graph

import (
	"strings"
	"testing"
	"time"
)

func FuzzLoad(f *testing.F) {
	for _, name := range BuiltinNames() {
		data, _ := BuiltinYAML(name)
		f.Add(data)
	}
	f.Add([]byte(valid))
	f.Add([]byte("name: x\nstart: a\nnodes:\n  a: {actor: agent, on: {done: a}}\n"))
	f.Add([]byte("name: x\nnodes: [1, 2]\n"))
	f.Add([]byte("&a [*a]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		g, err := Load(data)
		if err != nil {
			return
		}
		// A graph that loads can be walked from its start without error.
		s, _, err := New(g, "github:o/r#1", time.Unix(0, 0))
		if err != nil {
			t.Fatalf("New on a valid graph: %v", err)
		}
		for i := 0; i < 2*len(g.Nodes) && !s.Terminal(); i++ {
			n := g.Node(s.Current)
			o := OutcomeDone
			if n.IsGate() {
				o = n.Gate.Outcomes()[0]
			}
			if _, err := s.Advance(g, o, time.Unix(int64(i), 0)); err != nil {
				t.Fatalf("Advance(%s) at %s: %v", o, s.Current, err)
			}
		}
		_ = Context(s, g)
	})
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{
		ApproveText, RequestChangesText, "not approved", "is this approved?", "LGTM but nit",
		"no more, we're done", "the-loop execute", relayed("LGTM", "U1"), "a <!-- b", "n\u2019t lgtm",
	} {
		f.Add(s, "x", "the-loop execute")
	}
	f.Fuzz(func(t *testing.T, a, b, keyword string) {
		bodies := []string{a, b}
		fb := ClassifyFeedback(bodies)
		switch fb.Outcome {
		case OutcomeWait, OutcomeApproved, OutcomeApprovedWithComments, OutcomeChangesRequested:
		default:
			t.Fatalf("feedback outcome %q", fb.Outcome)
		}
		// An approval always names an approver; and is never an approval
		// when a negated approval phrase is added in its own comment.
		if (fb.Outcome == OutcomeApproved || fb.Outcome == OutcomeApprovedWithComments) && len(fb.Deciders) == 0 {
			t.Fatal("approval without deciders")
		}
		if v := ClassifyFeedback(append(bodies, "not approved")); v.Outcome == OutcomeApproved || v.Outcome == OutcomeApprovedWithComments {
			t.Fatalf("approval despite an objection: %q %q", a, b)
		}
		reply := ClassifyReply(bodies).Outcome
		hasText := RelayedText(a) != "" || RelayedText(b) != ""
		if hasText != (reply == OutcomeDone || reply == OutcomeMoreWork) || (!hasText && reply != OutcomeWait) {
			t.Fatalf("reply outcome %q with text %v", reply, hasText)
		}
		switch ClassifyExecute(bodies, keyword).Outcome {
		case OutcomeWait, OutcomeExecute:
		default:
			t.Fatal("execute outcome")
		}
		// Deterministic, and stripping is idempotent.
		if again := ClassifyFeedback(bodies); again.Outcome != fb.Outcome {
			t.Fatal("not deterministic")
		}
		if r := RelayedText(a); RelayedText(r) != r {
			t.Fatalf("RelayedText not idempotent on %q", a)
		}
		// Any markdown either gets the approval or a clean refusal.
		ap := Approval{Login: "alice", Node: "n"}
		if out, err := AddApproval([]byte(a), ap); err == nil && !strings.Contains(string(out), ap.Entry()) {
			t.Fatalf("AddApproval(%q) lost the entry: %q", a, out)
		}
	})
}
