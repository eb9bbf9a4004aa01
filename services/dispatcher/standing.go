package dispatcher

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/ask"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
)

// Standing sessions (docs/decisions/118-standing-sessions-keep-a-ledger-issue.md)
// are sessions of the operator's standingSessions that own no work item.
// Each has a ledger issue, and the dispatcher runs it as the session of that
// issue, with three differences from a work item's:
//
//   - only a start command spawns it (an authorized person's `the-loop
//     start` on the issue, relayed from its Slack thread, or `the-loop
//     standing start`): nothing arms it, and no other event brings it up;
//   - it boots with the standing directive and the operator's brief instead
//     of the spawn template, and starts no process graph: it has no gate to
//     answer and no node to complete;
//   - when its entry asks for Slack, its start is announced as a question
//     of the session's on the ledger issue, which the renderer posts in the
//     channel, binding the thread: an authorized member's replies there
//     reach its terminal, and what it asks with `the-loop ask` lands there.

// DropStandingNotStarted: an event for a standing session's ledger issue
// while the session is not running, other than its start. A reply never
// starts one.
const DropStandingNotStarted = "standing-not-started"

// standing returns the standing session whose ledger is ref, by the config
// in force.
func (s *Service) standing(ref string) (config.StandingSession, bool) {
	if s.deps.Config == nil {
		return config.StandingSession{}, false
	}
	cfg := s.deps.Config()
	if cfg == nil {
		return config.StandingSession{}, false
	}
	return cfg.Standing.ForLedger(ref)
}

// standingRefusal is why an event may not spawn the standing session st
// ("" if it may): only its start command does.
func standingRefusal(cmd control.Command) string {
	if cmd == control.Start {
		return ""
	}
	return DropStandingNotStarted
}

// standingDirective is what every standing session is told before its
// operator's brief, which is appended and never replaces it: the boundary
// of a session that owns no work item is not the operator's to delete.
const standingDirective = `You are %NAME%, a standing session of the-loop.

You own no work item: no ticket to deliver, no phase to advance, no pull
request to open unless your operator asks you to here. Your ledger is the
issue %REF%: everything said to you and everything you answer is recorded
there. You run until an operator stops you.

- Never answer a phase gate, approve anything, or write a control keyword
  (the-loop start, stop, pause, resume, execute, ...) on any issue, pull
  request or thread. Those are a named person's decisions; you have no
  standing to make them.
- You may read freely: the repositories, their issues and pull requests.
- Messages from your operator are typed into this terminal as events on
  %REF%.
- To answer them, or to tell them anything, run ` + "`the-loop ask \"<text>\"`" + `:
  it is recorded on %REF%%SLACK%. Nothing you print in the terminal reaches
  anyone.`

// standingPrompt is st's boot prompt: the directive, then the brief.
func standingPrompt(st config.StandingSession, slack bool) string {
	where := ""
	if slack {
		where = " and posted in your Slack thread"
	}
	p := strings.NewReplacer("%NAME%", st.Name, "%REF%", st.Ledger, "%SLACK%", where).Replace(standingDirective)
	if brief := strings.TrimSpace(st.Brief); brief != "" {
		// The operator's text, escaped like any prompt field: a brief read
		// from a file must not carry terminal control sequences.
		p += "\n\n---\n\n" + promptBlock(brief)
	}
	return p
}

// announces reports whether st's start is announced in Slack.
func announces(cfg *config.Config, st config.StandingSession) bool {
	return st.Slack && cfg != nil && cfg.Channels.Slack.Enabled && cfg.Channels.Slack.Channel != ""
}

// announce publishes st's announcement: a question of the session's on its
// ledger issue, under an id made from the start command's, so a retried
// start publishes it once. Best effort, as in the original: a failure is
// logged and never undoes the start.
func (s *Service) announce(ctx context.Context, in *input, st config.StandingSession, sessionID, target string) {
	now := time.Now()
	text := "Standing session `" + st.Name + "` is up."
	if d := strings.TrimSpace(st.Description); d != "" {
		text = "Standing session `" + st.Name + "` (" + strings.TrimSuffix(d, ".") + ") is up."
	}
	text += "\nReply in this thread to talk to it; its answers land here."
	ev := &loopv1.Event{
		Id:      envelope.LoopID("standing-up", in.ref, in.ev.GetId()),
		Source:  ask.Source,
		Type:    string(catalog.SessionAwaitingInput),
		Subject: in.ref,
		Time:    envelope.NewTime(now),
		Actor:   &loopv1.Actor{Name: "agent session " + target},
		Body:    &loopv1.Event_Question{Question: &loopv1.Question{Text: text, SessionId: sessionID}},
	}
	// Its publication is on the event log as any other (bus.published);
	// a failure is the dispatcher's to log, since the session runs.
	if _, err := flow.Publish(ctx, s.deps.Conn, ev); err != nil {
		s.deps.Log.LogAttrs(ctx, slog.LevelWarn, "dispatcher: standing session started, but its announcement was not published; it has no Slack thread until it is started again",
			slog.String("work_item", in.ref), slog.String("standing", st.Name), slog.String("event_id", ev.GetId()), slog.Any("err", err))
		return
	}
	s.deps.Log.LogAttrs(ctx, slog.LevelInfo, "dispatcher: standing session announced",
		slog.String("work_item", in.ref), slog.String("standing", st.Name), slog.String("event_id", ev.GetId()))
}
