package ledgerwriter

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

func markEv(id, ref string, typ catalog.Type, detail map[string]string) *loopv1.Event {
	return &loopv1.Event{Id: id, Source: catalog.SourceLoop, Type: string(typ), Subject: ref,
		Time: envelope.NewTime(time.Now()), CausationId: "gh:cause",
		Body: &loopv1.Event_Notification{Notification: &loopv1.Notification{Detail: detail}}}
}

// settled publishes a notification behind what the test published on ref and
// waits for its fan-out: the partition handles in order, so everything
// before it on the work item has been handled.
func (e *env) settled(t *testing.T, ref, id string) {
	t.Helper()
	e.publish(notifyEv(id, ref))
	testkit.WaitWithin(t, 60*time.Second, "the notification behind the marks", func() bool { return len(e.fan.byID(id)) == 1 })
}

func withMarks(cfg *config.Config) *config.Config {
	cfg.Routing.Reactions = config.Reactions{Enabled: true, Started: "eyes", Completed: "hooray", Error: "confused"}
	cfg.Routing.Announce.Enabled = true
	return cfg
}

// TestReactionsOnceEach: the loop's started, completed and error reactions
// land on the comment (or the issue) once each, though the started one is
// asked for twice and a reaction's answer is lost after GitHub stored it (the
// redelivery asks again); a state the config skips adds nothing, and no mark
// is fanned out.
func TestReactionsOnceEach(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.cfg = withMarks(e.cfg)
	e.cfg.Routing.Reactions.Error = ""
	e.start("writer")
	ref := "github:" + testRepo + "#3"
	c := e.gh.AddComment(testRepo, 3, "octocat", "please do it")
	id := strconv.FormatInt(c.ID, 10)

	e.gh.DropResponseAfterWrite(1)
	e.publish(markEv("loop:react-1", ref, catalog.Reaction, map[string]string{"state": "started", "comment_id": id}))
	e.publish(markEv("loop:react-2", ref, catalog.Reaction, map[string]string{"state": "started", "comment_id": id}))
	e.publish(markEv("loop:react-3", ref, catalog.Reaction, map[string]string{"state": "completed", "comment_id": id}))
	e.publish(markEv("loop:react-4", ref, catalog.Reaction, map[string]string{"state": "error"}))
	e.publish(markEv("loop:react-5", ref, catalog.Reaction, map[string]string{"state": "completed"}))
	e.settled(t, ref, "loop:after-reactions")

	var got []string
	for _, r := range e.gh.Reactions(testRepo) {
		got = append(got, strconv.FormatInt(r.CommentID, 10)+"/"+strconv.Itoa(r.IssueNumber)+"/"+r.Content+"/"+r.Login)
	}
	want := []string{id + "/3/eyes/" + botLogin, id + "/3/hooray/" + botLogin, "0/3/hooray/" + botLogin}
	if !slices.Equal(got, want) {
		t.Errorf("reactions %v, want %v", got, want)
	}
	for _, r := range e.fan.all() {
		if catalog.IsMark(catalog.Type(r.ev.GetType())) {
			t.Errorf("mark %s was fanned out", r.ev.GetId())
		}
	}
	if n := len(e.dlq()); n != 0 {
		t.Errorf("%d dead letters", n)
	}
}

// TestReactionsOff: without routing.reactions nothing is written.
func TestReactionsOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer")
	ref := "github:" + testRepo + "#4"
	e.publish(markEv("loop:react-off", ref, catalog.Reaction, map[string]string{"state": "started"}))
	e.publish(markEv("loop:announce-off", ref, catalog.Announcement, map[string]string{"tmux_target": "loop-github-octo-repo-4", "harness": "claude"}))
	e.settled(t, ref, "loop:after-off")
	if n := len(e.gh.Reactions(testRepo)); n != 0 {
		t.Errorf("%d reactions with routing.reactions absent", n)
	}
	if n := len(e.gh.Comments(testRepo, 4)); n != 0 {
		t.Errorf("%d comments with routing.announce absent", n)
	}
}

// TestPhaseLabelFollows: the work item's loop:<phase> label follows the
// phases, the old one removed, other labels kept; asking for the phase it
// already has writes nothing; a phase that is not a plain name is refused,
// never written, never dead-lettered.
func TestPhaseLabelFollows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.start("writer")
	ref := "github:" + testRepo + "#5"
	e.gh.SetLabels(testRepo, 5, "bug", "loop:requirements", "loop:stale")

	e.publish(markEv("loop:phase-1", ref, catalog.PhaseLabel, map[string]string{"phase": "design"}))
	e.settled(t, ref, "loop:after-phase-1")
	is, _ := e.gh.Issue(testRepo, 5)
	if want := []string{"bug", "loop:design"}; !slices.Equal(is.Labels, want) {
		t.Fatalf("labels %v, want %v", is.Labels, want)
	}
	writes := e.gh.Counts().Writes
	e.publish(markEv("loop:phase-2", ref, catalog.PhaseLabel, map[string]string{"phase": "design"}))
	e.publish(markEv("loop:phase-3", ref, catalog.PhaseLabel, map[string]string{"phase": "loop:x\nrm"}))
	e.settled(t, ref, "loop:after-phase-2")
	if n := e.gh.Counts().Writes; n != writes {
		t.Errorf("%d writes for a phase the issue already shows, or a refused one", n-writes)
	}
	e.publish(markEv("loop:phase-4", ref, catalog.PhaseLabel, map[string]string{"phase": "implementation"}))
	e.settled(t, ref, "loop:after-phase-4")
	is, _ = e.gh.Issue(testRepo, 5)
	if want := []string{"bug", "loop:implementation"}; !slices.Equal(is.Labels, want) {
		t.Errorf("labels %v, want %v", is.Labels, want)
	}
	if n := len(e.dlq()); n != 0 {
		t.Errorf("%d dead letters", n)
	}
	if len(e.logs.WithMessage("ledger-writer: mark not written; it is best effort")) == 0 {
		t.Error("the refused phase was not logged")
	}
}

// TestPhaseLabelsArePaced: moving a phase label is two content writes (the
// old label removed, the new one added), and the pacer is charged for each.
// A run of phase moves against a fake enforcing GitHub's 80 content writes a
// minute (fake time 20× faster) lands in full without GitHub refusing one:
// charged one token a move, the pacer let twice its budget through, GitHub
// refused the excess and every work item behind a refused label on its
// partition waited out the Retry-After.
func TestPhaseLabelsArePaced(t *testing.T) {
	t.Parallel()
	const scale, items, moves = 20, 10, 12
	e := newEnv(t, testTopology(), ghfake.WithTimeScale(scale), ghfake.WithSecondaryLimits(80, 0))
	e.start("writer", WithTimeScale(scale), WithPacing(80, 0))
	phases := []string{"design", "implementation"}
	for n := 1; n <= items; n++ {
		e.gh.SetLabels(testRepo, n, "bug", "loop:requirements")
	}
	for m := range moves {
		for n := 1; n <= items; n++ {
			e.publish(markEv(fmt.Sprintf("loop:paced-%d-%d", n, m), fmt.Sprintf("github:%s#%d", testRepo, n),
				catalog.PhaseLabel, map[string]string{"phase": phases[m%2]}))
		}
	}
	for n := 1; n <= items; n++ {
		e.settled(t, fmt.Sprintf("github:%s#%d", testRepo, n), fmt.Sprintf("loop:after-paced-%d", n))
	}
	if c := e.gh.Counts(); c.SecondaryLimited != 0 {
		t.Errorf("GitHub refused %d of %d label writes for the secondary limit: the pacer charged a move as one write", c.SecondaryLimited, c.Writes)
	}
	for n := 1; n <= items; n++ {
		is, _ := e.gh.Issue(testRepo, n)
		if want := []string{"bug", "loop:" + phases[(moves-1)%2]}; !slices.Equal(is.Labels, want) {
			t.Errorf("issue %d: labels %v, want %v", n, is.Labels, want)
		}
	}
}

// TestAnnouncementOnce: the announcement is one marker-stamped comment with
// its envelope, even when GitHub's answer to it is lost (the redelivery
// finds it by reading back); it names the tmux session and the attach
// command by the socket setting, never a path. Hostile fields are refused.
func TestAnnouncementOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, testTopology())
	e.cfg = withMarks(e.cfg)
	e.start("writer")
	ref := "github:" + testRepo + "#6"
	e.gh.DropResponseAfterWrite(1)
	e.publish(markEv("loop:announce:6", ref, catalog.Announcement, map[string]string{"tmux_target": "loop-github-octo-repo-6", "harness": "claude"}))
	e.publish(markEv("loop:announce:evil", ref, catalog.Announcement, map[string]string{"tmux_target": "loop-x`; rm -rf ~", "harness": "claude"}))
	e.settled(t, ref, "loop:after-announce")

	cs := e.gh.Comments(testRepo, 6)
	if len(cs) != 1 {
		t.Fatalf("%d comments, want the one announcement", len(cs))
	}
	body := cs[0].Body
	for _, want := range []string{"`loop-github-octo-repo-6`", `tmux -S "$LOOP_TMUX_DIR/loop-github-octo-repo-6" attach -r`, "`claude`"} {
		if !strings.Contains(body, want) {
			t.Errorf("announcement lacks %q:\n%s", want, body)
		}
	}
	if !envelope.HasSelfMarker(body) {
		t.Error("the announcement is not marker-stamped: an ingress would read it back")
	}
	l, err := envelope.ParseLedger(testKey, envelope.Binding{Repo: testRepo, Number: 6}, body)
	if err != nil || l.ID != "loop:announce:6" {
		t.Errorf("envelope %+v, %v", l, err)
	}
	dl := e.dlq()
	if len(dl) != 1 || !strings.Contains(dl[0].Reason, "invalid") {
		t.Errorf("dead letters %+v, want the hostile announcement's", dl)
	}
}

// TestAnnouncementSurvivesACrash: the writer dies right after claiming the
// announcement, after writing it, and after marking it recorded; a fresh
// writer leaves exactly one announcement on the work item, fans nothing out
// and dead-letters nothing.
func TestAnnouncementSurvivesACrash(t *testing.T) {
	t.Parallel()
	for _, at := range []step{stepClaimed, stepWritten, stepRecorded} {
		t.Run("after-"+string(at), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, testTopology())
			e.cfg = withMarks(e.cfg)
			ref := "github:" + testRepo + "#7"
			ev := markEv("loop:announce:crash-"+string(at), ref, catalog.Announcement,
				map[string]string{"tmux_target": "loop-github-octo-repo-7", "harness": "claude"})
			killed := make(chan struct{})
			var once sync.Once
			var a *writer
			a = e.start("writer-a", append(crashOpts(), withHook(func(s step, id string) error {
				if s != at || id != ev.GetId() {
					return nil
				}
				var err error
				once.Do(func() {
					a.conn.Close()
					close(killed)
					err = errKilled
				})
				return err
			}))...)
			e.publish(ev)
			select {
			case <-killed:
			case <-time.After(60 * time.Second):
				t.Fatal("the writer never reached the step")
			}
			e.start("writer-b", crashOpts()...)
			e.settled(t, ref, "loop:after-crash-"+string(at))
			testkit.WaitWithin(t, 90*time.Second, "the inbox to drain", e.inboxEmpty)
			if n := len(e.gh.Comments(testRepo, 7)); n != 1 {
				t.Errorf("%d announcements, want exactly 1", n)
			}
			if n := len(e.fan.byID(ev.GetId())); n != 0 {
				t.Errorf("the announcement was fanned out %d times", n)
			}
			if d := e.dlq(); len(d) != 0 {
				t.Errorf("dead letters: %+v", d)
			}
		})
	}
}
