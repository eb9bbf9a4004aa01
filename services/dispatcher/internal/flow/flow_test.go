package flow

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
)

func TestExcerpt(t *testing.T) {
	for _, c := range []struct {
		name, in string
		max      int
		want     string
	}{
		{"front matter stripped", "---\ntitle: x\napprovedBy: []\n---\n\n# Body\ntext\n", 0, "# Body\ntext"},
		{"dots close front matter", "---\na: 1\n...\nbody", 0, "body"},
		{"unclosed front matter kept", "---\na: 1\nbody", 0, "---\na: 1\nbody"},
		{"no front matter", "  plain  ", 0, "plain"},
		{"a rule later is not front matter", "# T\n---\nx", 0, "# T\n---\nx"},
		{"capped with an ellipsis", "abcdefghij", 5, "abcd…"},
		{"cap counts characters", "ääääää", 4, "äää…"},
		{"cap exactly fits", "abcde", 5, "abcde"},
		{"cap of one", "abc", 1, "…"},
		{"invalid UTF-8 replaced", "a\xffb", 0, "a\uFFFDb"},
	} {
		if got := Excerpt([]byte(c.in), c.max); got != c.want {
			t.Errorf("%s: Excerpt = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestReadArtifactStaysInWorkspace(t *testing.T) {
	dir, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret.md"), []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.md"), filepath.Join(dir, "requirements.md")); err != nil {
		t.Skip("no symlinks:", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bugfix.md"), []byte("fix"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, text, err := ReadArtifact(dir, "requirements.md|bugfix.md"); err == nil && string(text) == "secret" {
		t.Fatal("a symlink led the read out of the workspace")
	}
	name, text, err := ReadArtifact(dir, "design.md|bugfix.md")
	if err != nil || name != "bugfix.md" || string(text) != "fix" {
		t.Errorf("second alternative: %q %q %v", name, text, err)
	}
	if _, _, err := ReadArtifact(dir, "design.md"); !errors.Is(err, ErrNoArtifact) {
		t.Errorf("absent artifact: %v", err)
	}
	if _, _, err := ReadArtifact("", "design.md"); !errors.Is(err, ErrNoArtifact) {
		t.Errorf("no workspace: %v", err)
	}
}

func TestWriteApproval(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "design.md")
	if err := os.WriteFile(path, []byte("---\ntitle: D\napprovedBy: []\n---\nbody\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	a := graph.Approval{Login: "alice", Node: "design-approval", At: time.Date(2026, 5, 4, 9, 30, 0, 0, time.UTC),
		Provenance: graph.Provenance{Channel: "slack", Member: "U1", RecordURL: "https://github.com/o/r/issues/7#issuecomment-1"}}
	for range 2 { // the second is a redelivery: unchanged
		if name, err := WriteApproval(dir, "design.md", a); err != nil || name != "design.md" {
			t.Fatalf("WriteApproval = %q, %v", name, err)
		}
	}
	b, _ := os.ReadFile(path)
	if strings.Count(string(b), "@alice (design-approval") != 1 || !strings.HasSuffix(string(b), "---\nbody\n") {
		t.Errorf("artifact:\n%s", b)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
		t.Errorf("mode %v", fi.Mode().Perm())
	}
	if _, err := WriteApproval(dir, "requirements.md", a); !errors.Is(err, ErrNoArtifact) {
		t.Errorf("absent artifact: %v", err)
	}
}

// TestWritesNeverShowAHalfArtifact: a gate's feedback is written into an
// artifact while the dispatcher's own checks may read it (the work item has
// moved on); every read finds a whole document, old or new, and nothing of
// the writes is left beside it.
func TestWritesNeverShowAHalfArtifact(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "execution-log.md")
	doc := "---\nstatus: complete\n---\n# Execution log\n\n" + strings.Repeat("A line of the log.\n", 2000)
	if err := os.WriteFile(path, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	bad := make(chan string, 1)
	go func() {
		defer close(bad)
		for {
			select {
			case <-done:
				return
			default:
			}
			b, err := os.ReadFile(path)
			if err != nil || !strings.HasPrefix(string(b), "---\nstatus: complete\n---\n") || !strings.Contains(string(b), "A line of the log.") {
				bad <- fmt.Sprintf("a reader found %d bytes (%v)", len(b), err)
				return
			}
		}
	}()
	at := time.Date(2026, 5, 4, 9, 30, 0, 0, time.UTC)
	for i := range 200 {
		c := []graph.Comment{{Author: "alice", Body: fmt.Sprintf("round %d", i)}}
		if _, err := WriteFeedback(dir, "execution-log.md", "security-sign-off", graph.Outcome("approved"), at.Add(time.Duration(i)*time.Minute), c); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	if msg, ok := <-bad; ok {
		t.Fatal(msg)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("the directory holds %d entries, want the artifact alone", len(entries))
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want the artifact's own 0600", fi.Mode().Perm())
	}
}

// TestComplete: Complete moves agent nodes only, and the entered node's
// notification is published once under its id.
func TestComplete(t *testing.T) {
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	conn := srv.Connect(t, "graphstate-test")
	ctx := context.Background()
	s, err := graphstate.Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	reg := graph.NewRegistry()
	g, _ := reg.Get(graph.AdhocGraph)
	const ref = "github:octo/repo#5"
	if st, rev, err := s.Get(ctx, ref); st != nil || rev != 0 || err != nil {
		t.Fatalf("empty Get = %v %d %v", st, rev, err)
	}
	if _, _, err := Complete(ctx, s, reg, ref, time.Now()); err == nil {
		t.Error("Complete without a state succeeded")
	}
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st, err := s.Mutate(ctx, ref, func(cur *graph.State) (*graph.State, error) {
		next, _, err := graph.New(g, "ignored", at)
		return next, err
	})
	if err != nil || st.Ref != ref || st.Current != "work" {
		t.Fatalf("create = %+v, %v", st, err)
	}
	st, tr, err := Complete(ctx, s, reg, ref, at)
	if err != nil || tr.To != "review" || st.Current != "review" {
		t.Fatalf("complete = %+v %+v %v", st, tr, err)
	}
	if len(tr.Notifications) != 1 || tr.Notifications[0].Type != catalog.DecisionPending {
		t.Errorf("notifications = %+v", tr.Notifications)
	}
	if ns := Current(st, g); len(ns) != 1 || ns[0] != tr.Notifications[0] {
		t.Errorf("Current = %+v, want the entry's %+v", ns, tr.Notifications)
	}
	if _, _, err := Complete(ctx, s, reg, ref, at); err == nil || !strings.Contains(err.Error(), "human gate") {
		t.Errorf("Complete at a gate = %v", err)
	}
	ev, note := Event(tr.Notifications[0], st, Options{Now: at})
	if note != "" || ev.GetId() != graphstate.NotificationID(ref, "review", 1, catalog.DecisionPending) ||
		ev.GetNotification().GetUrl() != "https://github.com/octo/repo/issues/5" || ev.GetSource() != "loop" {
		t.Errorf("event = %v (note %q)", ev, note)
	}
	if _, err := Publish(ctx, conn, ev); err != nil {
		t.Fatal(err)
	}
	if ack, err := Publish(ctx, conn, ev); err != nil || !ack.Duplicate {
		t.Errorf("republish = %+v, %v: want a duplicate", ack, err)
	}
}

// TestArtifactExcerptIsScrubbed: an artifact is the agent's text, and an
// agent may have pasted its environment into it: the excerpt a channel is
// sent carries no session token and no secret-shaped value.
func TestArtifactExcerptIsScrubbed(t *testing.T) {
	dir := t.TempDir()
	token := "lst1.Z2l0aHViOm9jdG8vcmVwbyMx." + strings.Repeat("Qx", 21) + "Q"
	doc := "# Requirements\n\nLOOP_SESSION_TOKEN=" + token + "\nGH_TOKEN=ghp_0123456789abcdefghijKLMNOPqrstuvWXYZ\nThe widget shall frob.\n"
	if err := os.WriteFile(filepath.Join(dir, "requirements.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	st := &graph.State{Graph: "work-item", Ref: "github:octo/repo#1", Current: "requirements-approval"}
	n := graph.Notification{Ref: st.Ref, Node: "requirements-approval", Type: catalog.PhaseApprovalPending, Artifact: "requirements.md"}
	ev, note := Event(n, st, Options{Workdir: dir})
	got := ev.GetNotification().GetArtifactExcerpt()
	if note != "" || !strings.Contains(got, "The widget shall frob.") {
		t.Fatalf("excerpt %q (note %q)", got, note)
	}
	for name, secret := range map[string]string{"the session token": strings.Repeat("Qx", 10), "a GitHub token": "ghp_0123456789"} {
		if strings.Contains(got, secret) {
			t.Errorf("the excerpt carries %s:\n%s", name, got)
		}
	}
}
