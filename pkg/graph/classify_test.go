package graph

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestButtonTexts(t *testing.T) {
	t.Parallel()
	tests := []struct {
		text string
		want Outcome
	}{
		{ApproveText, OutcomeApproved},
		{RequestChangesText, OutcomeChangesRequested},
		{relayed(ApproveText, "U012AB3CD"), OutcomeApproved},
		{relayed(RequestChangesText, "U012AB3CD"), OutcomeChangesRequested},
		// decision 014: the label "Approve" is not an approval phrase.
		{"Approve", OutcomeWait},
		{relayed("Approve", "U012AB3CD"), OutcomeWait},
	}
	for _, tt := range tests {
		if got := ClassifyFeedback([]string{tt.text}).Outcome; got != tt.want {
			t.Errorf("ClassifyFeedback(%q) = %s, want %s", tt.text, got, tt.want)
		}
	}
}

func TestClassifyFeedback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		bodies   []string
		want     Outcome
		deciders []int
	}{
		// docs/requirements.md K20 step by step.
		{"no comments", nil, OutcomeWait, nil},
		{"only empty comments", []string{"", "  \n"}, OutcomeWait, nil},
		{"changes requested", []string{"Changes requested: see inline"}, OutcomeChangesRequested, nil},
		{"request changes", []string{"I request changes."}, OutcomeChangesRequested, nil},
		{"please change", []string{"please change the title"}, OutcomeChangesRequested, nil},
		{"rejected", []string{"Rejected."}, OutcomeChangesRequested, nil},
		{"changes win over approval", []string{"LGTM", "please change the title"}, OutcomeChangesRequested, nil},
		{"changes win inside one comment", []string{"approved, but please change X"}, OutcomeChangesRequested, nil},
		{"approved", []string{"Approved"}, OutcomeApproved, []int{0}},
		{"lgtm", []string{"lgtm!"}, OutcomeApproved, []int{0}},
		{"looks good", []string{"Looks good to me."}, OutcomeApproved, []int{0}},
		{"ship it", []string{"Ship it 🚀"}, OutcomeApproved, []int{0}},
		{"two comments", []string{"LGTM", "thanks for the quick turnaround"}, OutcomeApprovedWithComments, []int{0}},
		{"two approvers", []string{"LGTM", "Approved"}, OutcomeApprovedWithComments, []int{0, 1}},
		{"but", []string{"LGTM but rename the flag"}, OutcomeApprovedWithComments, []int{0}},
		{"nit", []string{"nit: typo in §2. Approved"}, OutcomeApprovedWithComments, []int{0}},
		{"other text is not decisive", []string{"I'll read it tonight"}, OutcomeWait, nil},
		// The docs/requirements.md K20 substring pitfalls, kept as specified: "but"
		// and "nit" inside a person's own words flip approved to with-comments.
		{"pitfall attribution", []string{"LGTM, the attribution is right"}, OutcomeApprovedWithComments, []int{0}},
		{"pitfall contribution", []string{"Approved, nice contribution"}, OutcomeApprovedWithComments, []int{0}},
		{"pitfall distributed", []string{"looks good; distributed locks are fine"}, OutcomeApprovedWithComments, []int{0}},
		{"pitfall unit", []string{"LGTM, unit tests pass"}, OutcomeApprovedWithComments, []int{0}},
		{"pitfall initial", []string{"ship it, initial version"}, OutcomeApprovedWithComments, []int{0}},
		// ... but never because of the record around them (decision 014).
		{"relayed attribution line is not read", []string{relayed("LGTM", "U1")}, OutcomeApproved, []int{0}},
		{"member id with nit is not read", []string{relayed("LGTM", "UNIT42")}, OutcomeApproved, []int{0}},
		{"envelope is not read", []string{"LGTM\n<!-- the-loop:envelope {\"actor\":{\"name\":\"Anita\"},\"note\":\"distributed\"} -->"}, OutcomeApproved, []int{0}},
		{"html comment is not read", []string{"LGTM <!-- but rejected -->"}, OutcomeApproved, []int{0}},
		{"unclosed html comment hides the rest", []string{"LGTM <!-- please change"}, OutcomeApproved, []int{0}},
		{"quoted attribution line", []string{"> 📨 Relayed from `U1` on the **slack** channel: rejected\nLGTM"}, OutcomeApproved, []int{0}},
		// Whole words only for approvals.
		{"unapproved", []string{"this is unapproved"}, OutcomeWait, nil},
		{"disapproved", []string{"Disapproved."}, OutcomeWait, nil},
		{"pre-approved counts", []string{"pre-approved"}, OutcomeApproved, []int{0}},
		// An objection or a question is never an approval.
		{"not approved", []string{"not approved"}, OutcomeWait, nil},
		{"NOT approved yet", []string{"This is NOT approved yet."}, OutcomeWait, nil},
		{"no, not lgtm", []string{"no lgtm from me"}, OutcomeWait, nil},
		{"don't think it looks good", []string{"I don't think it looks good"}, OutcomeWait, nil},
		{"typographic apostrophe", []string{"I don’t think it looks good"}, OutcomeWait, nil},
		{"zero-width space cannot hide a negation", []string{"n\u200bot approved"}, OutcomeWait, nil},
		{"never ship it", []string{"never ship it like this"}, OutcomeWait, nil},
		{"question", []string{"is this approved?"}, OutcomeWait, nil},
		{"question later in sentence", []string{"LGTM, does that work for you?"}, OutcomeWait, nil},
		{"question then approval", []string{"Tests pass? yes. LGTM."}, OutcomeApproved, []int{0}},
		{"approval then separate question", []string{"LGTM. Want me to merge?"}, OutcomeApproved, []int{0}},
		{"negation in an earlier sentence", []string{"Not sure at first. Looks good now."}, OutcomeApproved, []int{0}},
		{"negation beyond the window", []string{"not a fan of the colour scheme we picked earlier, fine, lgtm"}, OutcomeApproved, []int{0}},
		{"negation cut by the window edge is not a word", []string{"the piano is tuned and everything in it, lgtm"}, OutcomeApproved, []int{0}},
		{"objection voids another's approval", []string{"LGTM", "not approved until CI is green"}, OutcomeWait, nil},
		{"objection voids own approval", []string{"looks good, not approved until CI is green"}, OutcomeWait, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := ClassifyFeedback(tt.bodies)
			if v.Outcome != tt.want {
				t.Errorf("outcome = %s (%s), want %s", v.Outcome, v.Reason, tt.want)
			}
			if d := cmp.Diff(tt.deciders, v.Deciders); d != "" {
				t.Errorf("deciders (-want +got):\n%s", d)
			}
			if v.Reason == "" {
				t.Error("no reason")
			}
		})
	}
}

func TestClassifyReply(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		bodies []string
		want   Outcome
	}{
		{"silence", nil, OutcomeWait},
		{"empty", []string{" "}, OutcomeWait},
		{"done", []string{"Done, thanks"}, OutcomeDone},
		{"all done", []string{"all done"}, OutcomeDone},
		{"we're done", []string{"We’re done here."}, OutcomeDone},
		{"that's all", []string{"that's all"}, OutcomeDone},
		{"thats all", []string{"thats all"}, OutcomeDone},
		{"nothing else", []string{"nothing else"}, OutcomeDone},
		{"no more", []string{"no more from me"}, OutcomeDone},
		{"all set", []string{"All set!"}, OutcomeDone},
		{"close it", []string{"close it"}, OutcomeDone},
		{"close this", []string{"please close this"}, OutcomeDone},
		{"lgtm", []string{"LGTM"}, OutcomeDone},
		{"looks good", []string{"looks good"}, OutcomeDone},
		{"ship it", []string{"ship it"}, OutcomeDone},
		{"approved", []string{"approved"}, OutcomeDone},
		{"phrase inside a negation phrase is no negation", []string{"No more changes, we're done"}, OutcomeDone},
		{"other reply", []string{"also add a test for the parser"}, OutcomeMoreWork},
		{"not done", []string{"not done yet"}, OutcomeMoreWork},
		{"isn't done", []string{"it isn't done"}, OutcomeMoreWork},
		{"nope", []string{"nope, close it later"}, OutcomeMoreWork},
		{"aren't all set", []string{"we aren't all set"}, OutcomeMoreWork},
		{"question", []string{"are we done?"}, OutcomeMoreWork},
		{"whole phrase only", []string{"abandoned the approach"}, OutcomeMoreWork},
		{"newest counts", []string{"done", "wait, one more thing"}, OutcomeMoreWork},
		{"newest counts the other way", []string{"one more thing", "done"}, OutcomeDone},
		{"newest non-empty counts", []string{"done", relayed("", "U1")}, OutcomeDone},
		{"negation in an earlier clause", []string{"no idea why it took so long to get here; done"}, OutcomeDone},
		{"negation beyond the window", []string{"no rush on any of this, whenever you are ready: all done"}, OutcomeDone},
		{"negation within 40", []string{"not sure this part of it is finally done"}, OutcomeMoreWork},
		{"relayed done", []string{relayed("that's all, thanks", "U1")}, OutcomeDone},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if v := ClassifyReply(tt.bodies); v.Outcome != tt.want {
				t.Errorf("outcome = %s (%s), want %s", v.Outcome, v.Reason, tt.want)
			}
		})
	}
}

func TestClassifyExecute(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		bodies   []string
		keyword  string
		want     Outcome
		deciders []int
	}{
		{"keyword", []string{"the-loop execute"}, "the-loop execute", OutcomeExecute, []int{0}},
		{"case-insensitive, anywhere", []string{"ok — The-Loop EXECUTE please"}, "the-loop execute", OutcomeExecute, []int{0}},
		{"newest decides", []string{"the-loop execute", "x", "the-loop execute now"}, "the-loop execute", OutcomeExecute, []int{2}},
		{"not a whole token", []string{"the-loop executed"}, "the-loop execute", OutcomeWait, nil},
		{"glued with a dash", []string{"the-loop execute-all"}, "the-loop execute", OutcomeWait, nil},
		{"approval is not execute", []string{"LGTM"}, "the-loop execute", OutcomeWait, nil},
		{"configured keyword", []string{"go go go"}, "go go go", OutcomeExecute, []int{0}},
		{"default keyword when another is configured", []string{"the-loop execute"}, "loop run", OutcomeWait, nil},
		{"disabled", []string{"the-loop execute"}, "", OutcomeWait, nil},
		{"inside an envelope", []string{"hi <!-- the-loop execute -->"}, "the-loop execute", OutcomeWait, nil},
		{"silence", nil, "the-loop execute", OutcomeWait, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			v := ClassifyExecute(tt.bodies, tt.keyword)
			if v.Outcome != tt.want {
				t.Errorf("outcome = %s (%s), want %s", v.Outcome, v.Reason, tt.want)
			}
			if d := cmp.Diff(tt.deciders, v.Deciders); d != "" {
				t.Errorf("deciders (-want +got):\n%s", d)
			}
		})
	}
}

func TestClassifyDispatch(t *testing.T) {
	t.Parallel()
	if v := Classify(Feedback, []string{"LGTM"}, ""); v.Outcome != OutcomeApproved {
		t.Errorf("feedback: %v", v)
	}
	if v := Classify(Reply, []string{"done"}, ""); v.Outcome != OutcomeDone {
		t.Errorf("reply: %v", v)
	}
	if v := Classify(Execute, []string{"the-loop execute"}, "the-loop execute"); v.Outcome != OutcomeExecute {
		t.Errorf("execute: %v", v)
	}
	if v := Classify("vibes", []string{"LGTM"}, ""); v.Outcome != OutcomeWait {
		t.Errorf("unknown: %v", v)
	}
}

func TestRelayedText(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{relayed("LGTM\nsecond line", "U1"), "LGTM\nsecond line"},
		{"_📨 Opened from `U1` on the **slack** channel._\nbody", "body"},
		{"a <!-- x --> b <!-- y --> c", "a  b  c"},
		{"a <!-- open", "a"},
		{"📨text without the space stays", "📨text without the space stays"},
		{"  \n📨 Relayed from x:\n\n", ""},
	}
	for _, tt := range tests {
		if got := RelayedText(tt.in); got != tt.want {
			t.Errorf("RelayedText(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestRelayedTextKeepsMiddleLines(t *testing.T) {
	t.Parallel()
	in := "LGTM\n📨 please change the title"
	if got := RelayedText(in); got != in {
		t.Errorf("RelayedText(%q) = %q", in, got)
	}
	if v := ClassifyFeedback([]string{in}); v.Outcome != OutcomeChangesRequested {
		t.Errorf("outcome = %s", v.Outcome)
	}
}
