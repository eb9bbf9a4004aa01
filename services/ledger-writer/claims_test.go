package ledgerwriter

import (
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestMayClaim: the writer signs an event only when its subject, its type
// and its source agree, and never a session's event that names a person.
func TestMayClaim(t *testing.T) {
	const ref = "github:octo/repo#1"
	subject := func(typ catalog.Type) string {
		return "loop.in.3." + catalog.SubjectKey(ref) + "." + string(typ)
	}
	withActor := func(ev *loopv1.Event, a *loopv1.Actor) *loopv1.Event { ev.Actor = a; return ev }
	cases := []struct {
		name    string
		ev      *loopv1.Event
		subject string
		want    string // "" when it may
	}{
		{"a Slack gate answer", gateEv("slack:E1", ref, "approved"), subject(catalog.GateFeedback), ""},
		{"a session's question", questionEv("loop:ask:1", ref, "which one?"), subject(catalog.SessionAwaitingInput), ""},
		{"a graph notification", notifyEv("loop:n:1", ref), subject(catalog.PhaseApprovalPending), ""},
		{"an operator's control", func() *loopv1.Event {
			e := controlEv("cli:1", ref, "pause", "")
			e.Source = catalog.SourceCLI
			return e
		}(),
			subject(catalog.ControlCommand), ""},
		{"an operator's message to a standing session", func() *loopv1.Event {
			e := replyEv("cli:say:1", ref, "what is stuck?")
			e.Source = catalog.SourceCLI
			return e
		}(), subject(catalog.WorkItemReply), ""},
		{"a reply from a session", func() *loopv1.Event {
			e := replyEv("s:say:2", ref, "hi")
			e.Source, e.Actor = catalog.SourceSession, nil
			return e
		}(), subject(catalog.WorkItemReply), "does not raise it"},
		{"a gate answer from the cli", func() *loopv1.Event { e := gateEv("cli:E9", ref, "approved"); e.Source = catalog.SourceCLI; return e }(),
			subject(catalog.GateFeedback), "does not raise it"},
		{"a gate answer inside a question's subject", gateEv("slack:E2", ref, "approved"), subject(catalog.SessionAwaitingInput), "says type"},
		{"a gate answer from the loop", func() *loopv1.Event { e := gateEv("loop:E3", ref, "approved"); e.Source = catalog.SourceLoop; return e }(),
			subject(catalog.GateFeedback), "does not raise it"},
		{"a gate answer from a session", func() *loopv1.Event { e := gateEv("s:E4", ref, "approved"); e.Source = catalog.SourceSession; return e }(),
			subject(catalog.GateFeedback), "does not raise it"},
		{"a question from Slack", func() *loopv1.Event { e := questionEv("slack:E5", ref, "q"); e.Source = "slack"; return e }(),
			subject(catalog.SessionAwaitingInput), "does not raise it"},
		{"a session's question naming alice", withActor(questionEv("loop:ask:2", ref, "q"), &loopv1.Actor{Github: "alice"}),
			subject(catalog.SessionAwaitingInput), "names a person"},
		{"a session's question naming a Slack member", withActor(questionEv("loop:ask:3", ref, "q"), &loopv1.Actor{Slack: "UALICE"}),
			subject(catalog.SessionAwaitingInput), "names a person"},
		{"a comment.human from Slack", func() *loopv1.Event {
			e := gateEv("slack:E6", ref, "x")
			e.Type = string(catalog.CommentHuman)
			return e
		}(),
			subject(catalog.CommentHuman), "does not raise it"},
		{"an operator's graph override", overrideEv("loop:cli-graph:1", ref, "stuck"), subject(catalog.GraphOverride), ""},
		{"a graph override from a session", func() *loopv1.Event {
			e := overrideEv("loop:cli-graph:2", ref, "stuck")
			e.Source, e.Actor = catalog.SourceSession, nil
			return e
		}(), subject(catalog.GraphOverride), "does not raise it"},
		{"the loop's reaction", markEv("loop:r:1", ref, catalog.Reaction, nil), subject(catalog.Reaction), ""},
		{"the loop's alert", markEv("loop:a:1", ref, catalog.Alert, nil), subject(catalog.Alert), ""},
		{"an announcement from a session", func() *loopv1.Event {
			e := markEv("s:E9", ref, catalog.Announcement, nil)
			e.Source = catalog.SourceSession
			return e
		}(), subject(catalog.Announcement), "does not raise it"},
		{"a phase label from Slack", func() *loopv1.Event {
			e := markEv("slack:E10", ref, catalog.PhaseLabel, nil)
			e.Source = "slack"
			return e
		}(),
			subject(catalog.PhaseLabel), "does not raise it"},
		{"a graph override from Slack", func() *loopv1.Event { e := overrideEv("slack:E8", ref, "stuck"); e.Source = "slack"; return e }(),
			subject(catalog.GraphOverride), "does not raise it"},
		{"a graph override from the loop", func() *loopv1.Event {
			e := overrideEv("loop:cli-graph:3", ref, "stuck")
			e.Source = catalog.SourceLoop
			return e
		}(), subject(catalog.GraphOverride), "does not raise it"},
		{"a session's critic findings", findingsEv("loop:critic:1", ref, "1. x", "ok", ""), subject(catalog.CriticFindings), ""},
		{"critic findings from the loop", func() *loopv1.Event {
			e := findingsEv("loop:critic:2", ref, "1. x", "ok", "")
			e.Source = catalog.SourceLoop
			return e
		}(), subject(catalog.CriticFindings), "does not raise it"},
		{"critic findings from Slack", func() *loopv1.Event {
			e := findingsEv("slack:E9", ref, "1. x", "ok", "")
			e.Source = "slack"
			return e
		}(), subject(catalog.CriticFindings), "does not raise it"},
		{"critic findings naming alice", withActor(findingsEv("loop:critic:3", ref, "1. x", "ok", ""), &loopv1.Actor{Github: "alice"}),
			subject(catalog.CriticFindings), "names a person"},
		{"no type on the subject", gateEv("slack:E7", ref, "approved"), "loop.in.3", "says type"},
	}
	for _, c := range cases {
		err := mayClaim(c.ev, c.subject)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.want)
		}
	}
}
