package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/flow"
)

// marker asks, through the inbox, for what the loop says about its own work
// (docs/decisions/115-alerts-reactions-and-phase-labels.md): the marks the
// ledger-writer writes on GitHub (a reaction on what the loop acted on, the
// announcement of a work item's first session, the loop:<phase> label) and
// the alerts the Slack renderer posts to the collaborators of their roles.
// Each is best effort — a publish that fails is logged, never the event's
// failure — and each has an id derived from what it is about, so a
// redelivery publishes it once.
type marker struct {
	conn   *bus.Conn
	config func() *config.Config
	log    *slog.Logger
	// tmux: sessions run in tmux, so there is a session to attach to.
	tmux bool
}

func (mk *marker) publish(ctx context.Context, ev *loopv1.Event) {
	if mk == nil || mk.conn == nil {
		return
	}
	if _, err := flow.Publish(ctx, mk.conn, ev); err != nil {
		mk.log.Warn("dispatcher: not published; it is best effort", "event_type", ev.GetType(), "work_item", ev.GetSubject(),
			"event_id", ev.GetId(), "err", err)
	}
}

func markEvent(id, ref string, typ catalog.Type, causation string, n *loopv1.Notification) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: catalog.SourceLoop, Type: string(typ), Subject: ref,
		Time: envelope.NewTime(time.Now()), CausationId: causation, Body: &loopv1.Event_Notification{Notification: n}}
}

// react asks for the reaction of state (config.ReactionStarted, …) on what
// in's event is about: the comment it is, or records, or else the work item.
func (mk *marker) react(ctx context.Context, in *input, state string) {
	if mk == nil || mk.config().Routing.Reactions.Content(state) == "" || !onGitHub(in.ref) {
		return
	}
	detail := reactionTarget(in.ev)
	detail["state"] = state
	mk.publish(ctx, markEvent(envelope.LoopID("react", in.ev.GetId(), state), in.ref, catalog.Reaction, in.ev.GetId(),
		&loopv1.Notification{Detail: detail}))
}

// commentRepoRE reads owner/repo from a comment's browser URL.
var commentRepoRE = regexp.MustCompile(`^https://[^/]+/([A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100})/(issues|pull)/[0-9]+`)

// reactionTarget is where a reaction on ev goes: a GitHub comment (its id,
// its repository when the URL names it, review for a pull request's review
// comment), or nothing, which means the work item itself.
func reactionTarget(ev *loopv1.Event) map[string]string {
	d := map[string]string{}
	var c *loopv1.Comment
	switch {
	case ev.GetComment() != nil:
		c = ev.GetComment()
	case ev.GetLedgerRecord() != nil:
		c = ev.GetLedgerRecord().GetComment()
	case ev.GetLedger().GetCommentId() != 0:
		// A channel's reply: the loop acted on its record.
		c = &loopv1.Comment{CommentId: ev.GetLedger().GetCommentId(), Url: ev.GetLedger().GetUrl()}
	}
	if c.GetCommentId() <= 0 || c.GetReviewState() != "" {
		// A review takes no reaction of its own: the work item gets it.
		return d
	}
	d["comment_id"] = strconv.FormatInt(c.GetCommentId(), 10)
	if c.GetPath() != "" {
		d["review"] = "true"
	}
	if m := commentRepoRE.FindStringSubmatch(c.GetUrl()); m != nil {
		d["repo"] = m[1]
	}
	return d
}

// onGitHub reports whether ref is a GitHub issue or pull request, where the
// ledger-writer can write a mark (a standing session's ref is not).
func onGitHub(ref string) bool { return graphstate.WorkItemURL(ref) != "" }

// alert raises an alert of kind about in's work item, when the config has
// anyone to tell.
func (mk *marker) alert(ctx context.Context, in *input, kind, text string) {
	if mk == nil || !mk.config().Alerts(kind) {
		return
	}
	mk.publish(ctx, markEvent(envelope.LoopID("alert", kind, in.ev.GetId()), in.ref, catalog.Alert, in.ev.GetId(),
		&loopv1.Notification{Text: text, Url: graphstate.WorkItemURL(in.ref), Detail: map[string]string{"alert": kind}}))
}

// announce asks for the announcement of sess, the first session of in's
// work item. Its id is the work item's: the ledger records it once.
func (mk *marker) announce(ctx context.Context, in *input, sess *sessions.Session) {
	if mk == nil || !mk.tmux || sess == nil || sess.TmuxTarget == "" || !mk.config().Routing.Announce.Enabled || !onGitHub(in.ref) {
		return
	}
	mk.publish(ctx, markEvent(envelope.LoopID("announce", in.ref), in.ref, catalog.Announcement, in.ev.GetId(),
		&loopv1.Notification{Detail: map[string]string{"tmux_target": sess.TmuxTarget, "harness": sess.Harness}}))
}

// spawned is what a first session of in's work item says: 👀 and 🎉 on
// what started it, its announcement, and the work-item-spawned alert.
func (mk *marker) spawned(ctx context.Context, in *input, sess *sessions.Session, first bool) {
	mk.react(ctx, in, config.ReactionCompleted)
	if first {
		mk.announce(ctx, in, sess)
	}
	mk.alert(ctx, in, config.AlertWorkItemSpawned, fmt.Sprintf("A session was spawned for %s.", in.ref))
}

// gaveUp is what an event the loop could not deliver, on its last delivery,
// says: 😕 on it and the dispatch-failed alert.
func (mk *marker) gaveUp(ctx context.Context, in *input, what string) {
	if !in.last {
		return
	}
	mk.react(ctx, in, config.ReactionError)
	mk.alert(ctx, in, config.AlertDispatchFailed,
		fmt.Sprintf("The loop gave up on an event of %s (%s): %s failed on its last delivery; it is dead-lettered.", in.ref, in.ev.GetType(), what))
}

// phase asks for st's loop:<phase> label, when its node names a phase (a
// node without one leaves the label as it is, as in the original). The id
// is the entry's, so a renotify publishes it once.
func (gs *gates) phase(ctx context.Context, ref string, st *graph.State) {
	if st == nil || len(st.History) == 0 || !onGitHub(ref) {
		return
	}
	g, ok := gs.config().Graphs.Registry().Get(st.Graph)
	if !ok {
		return
	}
	n := g.Node(st.Current)
	if n == nil || n.Phase == "" {
		return
	}
	ev := markEvent(envelope.LoopID("phase", ref, strconv.Itoa(len(st.History)), n.Phase), ref, catalog.PhaseLabel, "",
		&loopv1.Notification{Node: st.Current, Detail: map[string]string{"phase": n.Phase, "graph": st.Graph}})
	if _, err := flow.Publish(ctx, gs.conn, ev); err != nil {
		gs.log.Warn("dispatcher: phase label not asked for; it is best effort", "work_item", ref, "phase", n.Phase, "err", err)
	}
}
