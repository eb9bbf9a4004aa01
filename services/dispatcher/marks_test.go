package dispatcher

import (
	"context"
	"testing"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// withMarksAndAlerts turns on reactions, the announcement and every alert
// (to alice, an engineer, in C0ALERTS).
func (e *env) withMarksAndAlerts() {
	c := *e.cfg.Load()
	c.Routing.Reactions = config.Reactions{Enabled: true, Started: "eyes", Completed: "hooray", Error: "confused"}
	c.Routing.Announce.Enabled = true
	c.Collaborators = []config.Collaborator{{Handle: alice, Roles: []string{"engineer"}, Slack: []string{"C0ALERTS"}}}
	c.Notifications = config.Notifications{Enabled: true, Events: map[string][]string{}}
	for _, k := range config.AlertKinds {
		c.Notifications.Events[k] = []string{"engineer"}
	}
	e.cfg.Store(&c)
}

func (e *env) countOf(box *inbox, typ catalog.Type, ref string) int {
	box.mu.Lock()
	defer box.mu.Unlock()
	n := 0
	for _, ev := range box.evs {
		if ev.GetType() == string(typ) && ev.GetSubject() == ref {
			n++
		}
	}
	return n
}

// TestMarksAndAlertsOfASession: a first spawn asks for 👀 and 🎉 on the
// comment that started it, announces the session (its tmux target and
// harness only), alerts work-item-spawned and labels the start node's phase;
// an unauthorized person's comment is alerted; a session found dead is
// alerted as session-died when the next event respawns it, and the respawn
// announces nothing further. Every one is a loop event on the work item,
// which sessions cannot raise (the bus lets only the dispatcher's identity
// publish these types to the inbox, pkg/bus InboxTypes).
func TestMarksAndAlertsOfASession(t *testing.T) {
	e := newEnv(t, nil)
	e.withMarksAndAlerts()
	box := e.inbox()
	const ref = "github:octo/repo#71"
	sess := e.start(ref, 9700)
	started := comment(ref, 9700, alice, "the-loop start")

	for _, state := range []string{config.ReactionStarted, config.ReactionCompleted} {
		ev := e.inboxFind(box, state+" reaction", func(ev *loopv1.Event) bool {
			return ev.GetId() == envelope.LoopID("react", started.GetId(), state)
		})
		if d := ev.GetNotification().GetDetail(); ev.GetType() != string(catalog.Reaction) || ev.GetSource() != catalog.SourceLoop ||
			d["comment_id"] != "9700" || d["repo"] != "octo/repo" || d["state"] != state || ev.GetCausationId() != started.GetId() {
			t.Errorf("%s reaction: %v", state, ev)
		}
	}
	ann := e.inboxFind(box, "the announcement", func(ev *loopv1.Event) bool { return ev.GetId() == envelope.LoopID("announce", ref) })
	if d := ann.GetNotification().GetDetail(); ann.GetType() != string(catalog.Announcement) || d["tmux_target"] != tmux.Target(ref) ||
		d["harness"] != sess.Harness || len(d) != 2 {
		t.Errorf("announcement: %v", ann)
	}
	spawned := e.inboxFind(box, "the work-item-spawned alert", func(ev *loopv1.Event) bool {
		return ev.GetType() == string(catalog.Alert) && ev.GetNotification().GetDetail()["alert"] == config.AlertWorkItemSpawned
	})
	if spawned.GetSubject() != ref || spawned.GetNotification().GetUrl() != "https://github.com/octo/repo/issues/71" {
		t.Errorf("work-item-spawned alert: %v", spawned)
	}
	label := e.inboxFind(box, "the phase label", func(ev *loopv1.Event) bool { return ev.GetType() == string(catalog.PhaseLabel) })
	if label.GetNotification().GetDetail()["phase"] != "selection" || label.GetSubject() != ref {
		t.Errorf("phase label: %v", label)
	}

	stranger := comment(ref, 9701, "mallory", "do something else")
	e.publish(stranger)
	e.inboxFind(box, "the unauthorized alert", func(ev *loopv1.Event) bool {
		return ev.GetId() == envelope.LoopID("alert", config.AlertDroppedUnauthorized, stranger.GetId())
	})

	if err := e.server(ref).Kill(context.Background(), sess.TmuxTarget); err != nil {
		t.Fatal(err)
	}
	next := comment(ref, 9702, alice, "are you still there?")
	e.publish(next)
	e.waitRecord("session.respawned", map[string]any{"work_item": ref})
	died := e.inboxFind(box, "the session-died alert", func(ev *loopv1.Event) bool {
		return ev.GetId() == envelope.LoopID("alert", config.AlertSessionDied, next.GetId())
	})
	if died.GetCausationId() != next.GetId() {
		t.Errorf("session-died alert: %v", died)
	}
	e.inboxFind(box, "🎉 on the event the respawn took", func(ev *loopv1.Event) bool {
		return ev.GetId() == envelope.LoopID("react", next.GetId(), config.ReactionCompleted)
	})
	if n := e.countOf(box, catalog.Announcement, ref); n != 1 {
		t.Errorf("%d announcements, want the first spawn's only", n)
	}
}

// TestReactionTarget: a reaction goes on the comment the event is, or
// records, in the repository its URL names; a review comment is reacted to
// as one; a review, or activity, puts it on the work item itself.
func TestReactionTarget(t *testing.T) {
	t.Parallel()
	for name, tt := range map[string]struct {
		ev   *loopv1.Event
		want map[string]string
	}{
		"a comment": {comment("github:octo/repo#3", 41, alice, "hi"), map[string]string{"comment_id": "41", "repo": "octo/repo"}},
		"a comment on a linked pull request elsewhere": {&loopv1.Event{Body: &loopv1.Event_Comment{Comment: &loopv1.Comment{
			CommentId: 42, Url: "https://github.com/octo/other/pull/9#issuecomment-42"}}}, map[string]string{"comment_id": "42", "repo": "octo/other"}},
		"a review comment": {&loopv1.Event{Body: &loopv1.Event_Comment{Comment: &loopv1.Comment{
			CommentId: 43, Path: "main.go", Url: "https://github.com/octo/repo/pull/9#discussion_r43"}}},
			map[string]string{"comment_id": "43", "review": "true", "repo": "octo/repo"}},
		"a review": {&loopv1.Event{Body: &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 44, ReviewState: "approved"}}}, map[string]string{}},
		"a relayed record": {&loopv1.Event{Body: &loopv1.Event_LedgerRecord{LedgerRecord: &loopv1.LedgerRecord{Comment: &loopv1.Comment{
			CommentId: 45, Url: "https://ghe.example/octo/repo/issues/3"}}}}, map[string]string{"comment_id": "45", "repo": "octo/repo"}},
		"a channel's reply": {&loopv1.Event{Ledger: &loopv1.LedgerRef{CommentId: 46}, Body: &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "x"}}},
			map[string]string{"comment_id": "46"}},
		"activity": {labeled("github:octo/repo#3", "d1"), map[string]string{}},
	} {
		got := reactionTarget(tt.ev)
		if len(got) != len(tt.want) {
			t.Errorf("%s: %v, want %v", name, got, tt.want)
			continue
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("%s: %v, want %v", name, got, tt.want)
			}
		}
	}
}
