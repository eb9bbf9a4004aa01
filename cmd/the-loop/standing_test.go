package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// TestStandingVerbs: `the-loop standing` lists the declared sessions with
// their state, asks for a start or a stop as the control command on the
// session's ledger issue, and says something to a running one as a reply
// on it — each from an authorized person, each refused clearly otherwise.
func TestStandingVerbs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	conn := srv.Connect(t, "standing-test")
	ctx := context.Background()
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	cfgText := `version: "0.7.0"
routing:
  authorizedUsers:
    - {github: alice, slack: U1, name: Alice}
standingSessions:
  enabled: true
  sessions:
    - {name: triage, ledger: octo/repo#7, description: watches the queue}
    - {name: filer, ledger: octo/repo#8, autoStart: false}
    - {name: nowhere}
`
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o600); err != nil {
		t.Fatal(err)
	}
	env := config.Env{"LOOP_NATS_URL": srv.URL(), "LOOP_CONFIG": cfgPath}

	code, out, stderr := runVerb(t, env, "standing", "list")
	if code != 0 || !strings.Contains(out, "triage") || !strings.Contains(out, "github:octo/repo#7") ||
		!strings.Contains(out, "not running") || !strings.Contains(out, "no ledger issue") || !strings.Contains(out, "3 standing session(s), on") {
		t.Fatalf("standing list: %d\n%s%s", code, out, stderr)
	}

	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"standing", "start", "triage"}, "usage"},
		{[]string{"standing", "start", "ghost", "--as", "alice"}, "no standing session \"ghost\""},
		{[]string{"standing", "start", "nowhere", "--as", "alice"}, "names no ledger issue"},
		{[]string{"standing", "start", "triage", "--as", "mallory"}, "not in routing.authorizedUsers"},
		{[]string{"standing", "say", "triage", "--text", "hi", "--as", "alice"}, "is not running"},
		{[]string{"standing", "say", "triage", "--as", "alice"}, "usage"},
		{[]string{"standing", "wave"}, "usage"},
	} {
		if code, _, stderr := runVerb(t, env, tt.args...); code == 0 || !strings.Contains(stderr, tt.want) {
			t.Errorf("%q: exit %d, stderr %q; want a failure saying %q", tt.args, code, stderr, tt.want)
		}
	}

	// Read the requests back as the ledger-writer receives them.
	got := make(chan *loopv1.Event, 16)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go conn.Run(rctx, bus.ConsumerSpec{Service: bus.ServiceLedgerWriter, Stream: bus.StreamInbox, Partitions: 2}, bus.HandlerFunc(func(_ context.Context, d *bus.Delivery) error {
		ev, err := envelope.FromMessage(envelope.Message{Subject: d.Subject, Header: d.Header, Data: d.Data})
		if err == nil {
			got <- ev
		}
		return err
	}))
	next := func() *loopv1.Event {
		t.Helper()
		var ev *loopv1.Event
		testkit.WaitWithin(t, 60*time.Second, "a request on the inbox", func() bool {
			select {
			case ev = <-got:
				return true
			default:
				return false
			}
		})
		return ev
	}

	// No name: every auto-starting one with a ledger — triage alone.
	if code, out, stderr := runVerb(t, env, "standing", "start", "--as", "alice"); code != 0 || strings.Count(out, "requested start") != 1 {
		t.Fatalf("standing start: %d\n%s%s", code, out, stderr)
	}
	if ev := next(); ev.GetType() != string(catalog.ControlCommand) || ev.GetSubject() != "github:octo/repo#7" || ev.GetSource() != catalog.SourceCLI ||
		ev.GetActor().GetGithub() != "alice" || ev.GetControlCommand().GetCommand() != "start" {
		t.Errorf("start request = %v", ev)
	}
	if code, out, stderr := runVerb(t, env, "standing", "stop", "filer", "--as", "alice"); code != 0 || !strings.Contains(out, "requested stop of github:octo/repo#8") {
		t.Fatalf("standing stop filer: %d\n%s%s", code, out, stderr)
	}
	if ev := next(); ev.GetSubject() != "github:octo/repo#8" || ev.GetControlCommand().GetCommand() != "stop" {
		t.Errorf("stop request = %v", ev)
	}

	// Running (as the dispatcher records it), it is listed so and may be
	// spoken to.
	store, err := sessions.Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Mutate(ctx, "github:octo/repo#7", func(r *sessions.Record) error {
		r.Session = &sessions.Session{Harness: "claude", Host: "box-1", TmuxTarget: "loop-github-octo-repo-7", Status: sessions.Active, Kind: sessions.KindStanding}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runVerb(t, env, "standing", "list"); code != 0 || !strings.Contains(out, "box-1") {
		t.Errorf("standing list of a running session:\n%s", out)
	}
	if code, out, stderr := runVerb(t, env, "standing", "say", "triage", "--text", "what is stuck?", "--as", "alice"); code != 0 || !strings.Contains(out, "said to standing session triage") {
		t.Fatalf("standing say: %d\n%s%s", code, out, stderr)
	}
	if ev := next(); ev.GetType() != string(catalog.WorkItemReply) || ev.GetSubject() != "github:octo/repo#7" || ev.GetSource() != catalog.SourceCLI ||
		ev.GetActor().GetGithub() != "alice" || ev.GetReply().GetText() != "what is stuck?" {
		t.Errorf("say request = %v", ev)
	}

	// Off, nothing starts.
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(cfgText, "enabled: true", "enabled: false", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runVerb(t, env, "standing", "start", "triage", "--as", "alice"); code == 0 || !strings.Contains(stderr, "standingSessions.enabled is false") {
		t.Errorf("start while off: %d %s", code, stderr)
	}
	// A session started before they were switched off stays stoppable.
	if code, out, stderr := runVerb(t, env, "standing", "stop", "triage", "--as", "alice"); code != 0 || !strings.Contains(out, "requested stop of github:octo/repo#7") {
		t.Fatalf("stop while off: %d\n%s%s", code, out, stderr)
	}
	if ev := next(); ev.GetSubject() != "github:octo/repo#7" || ev.GetControlCommand().GetCommand() != "stop" {
		t.Errorf("stop request while off = %v", ev)
	}
}
