package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/graph"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// ask sends a graph request as `the-loop graph` does and decodes the answer
// into out; a refusal comes back as the *bus.ServiceError.
func (e *env) ask(subject, body string, out any) error {
	e.t.Helper()
	data, err := e.pub.Request(context.Background(), subject, []byte(body))
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, out); err != nil {
		e.t.Fatalf("answer on %s: %v: %s", subject, err, data)
	}
	return nil
}

func refBody(ref string) string { return `{"ref":"` + ref + `"}` }

// wantRefusal checks that err is a service answer with code whose text
// holds every one of parts.
func wantRefusal(t *testing.T, what string, err error, code string, parts ...string) {
	t.Helper()
	var se *bus.ServiceError
	if !errors.As(err, &se) || se.Code != code {
		t.Errorf("%s: %v, want a %s answer", what, err, code)
		return
	}
	for _, p := range parts {
		if !strings.Contains(se.Description, p) {
			t.Errorf("%s: %q does not say %q", what, se.Description, p)
		}
	}
}

// TestGraphEndpoint: graph.status answers the state as the dispatcher reads
// it; graph.complete refuses a human gate, moves an agent node on, publishes
// the entered node's notification and logs the move; unknown work items and
// malformed requests are refused with their own codes.
func TestGraphEndpoint(t *testing.T) {
	e := newEnv(t, nil)
	box := e.inbox()
	const ref = "github:octo/repo#31"
	e.start(ref, 8000)
	e.waitNode(ref, "phase-selection")

	var st GraphStatus
	if err := e.ask(SubjectGraphStatus, refBody(ref), &st); err != nil {
		t.Fatal(err)
	}
	if st.Ref != ref || st.URL != "https://github.com/octo/repo/issues/31" || !st.Known || !st.AtHumanGate ||
		st.Phase == "" || st.Revision == 0 || st.State == nil || st.State.Current != "phase-selection" || st.State.Graph != graph.WorkItemGraph {
		t.Errorf("status at phase selection = %+v", st)
	}

	var moved GraphCompleted
	wantRefusal(t, "complete at a human gate", e.ask(SubjectGraphComplete, refBody(ref), &moved), bus.CodeConflict,
		ref, "human gate phase-selection", "authorized person")

	e.publish(comment(ref, 8001, alice, "the-loop execute"))
	e.waitNode(ref, "requirements")
	if err := e.ask(SubjectGraphComplete, refBody(ref), &moved); err != nil {
		t.Fatal(err)
	}
	if moved.From != "requirements" || moved.To != "requirements-approval" || moved.State.Current != "requirements-approval" {
		t.Errorf("complete = %+v", moved)
	}
	e.waitNotification(box, ref, "requirements-approval", 1, catalog.PhaseApprovalPending)
	e.waitRecord("graph.advanced", map[string]any{"work_item": ref, "from": "requirements", "to": "requirements-approval", "source": "cli"})

	wantRefusal(t, "status of a work item without a graph", e.ask(SubjectGraphStatus, refBody("github:octo/repo#404"), &st),
		bus.CodeNotFound, "github:octo/repo#404", "no graph state")
	wantRefusal(t, "complete of a work item without a graph", e.ask(SubjectGraphComplete, refBody("github:octo/repo#404"), &moved),
		bus.CodeNotFound, "no graph state")
	wantRefusal(t, "not JSON", e.ask(SubjectGraphStatus, "status please", &st), bus.CodeBadRequest, "bad request")
	wantRefusal(t, "not a work-item ref", e.ask(SubjectGraphComplete, refBody("slack:C1/1.2"), &moved), bus.CodeBadRequest, `"slack:C1/1.2"`)
}

// releaseGraph is an operator's graph, loaded from a file the config names.
var releaseGraph = testkit.ReadRepoFile("docs/examples/release-graph.yaml")

// TestOperatorGraphFromConfig: a graph file named by graphs.files, chosen by
// graphs.workItem, is what a spawned session's work item follows; the
// endpoint and the gates judge it by the same graph.
func TestOperatorGraphFromConfig(t *testing.T) {
	e := newEnv(t, nil)
	box := e.inbox()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "release.yaml"), []byte(releaseGraph), 0o644); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "config.yaml")
	yaml := "version: 0.7.0\nrouting:\n  authorizedUsers:\n    - {github: alice, slack: U0ALICE}\ngraphs:\n  files: [release.yaml]\n  workItem: release\n"
	if err := os.WriteFile(path, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	e.cfg.Store(cfg)

	const ref = "github:octo/repo#32"
	e.start(ref, 8100)
	st := e.waitNode(ref, "build")
	if st.Graph != "release" {
		t.Fatalf("the work item follows %q, want release", st.Graph)
	}
	var status GraphStatus
	if err := e.ask(SubjectGraphStatus, refBody(ref), &status); err != nil {
		t.Fatal(err)
	}
	if !status.Known || status.Phase != "build" || status.AtHumanGate {
		t.Errorf("status at build = %+v", status)
	}
	var moved GraphCompleted
	if err := e.ask(SubjectGraphComplete, refBody(ref), &moved); err != nil {
		t.Fatal(err)
	}
	if moved.To != "sign-off" {
		t.Errorf("complete moved to %q, want sign-off", moved.To)
	}
	e.waitNotification(box, ref, "sign-off", 1, catalog.SecuritySignOffPending)
	e.publish(comment(ref, 8101, alice, "Approved."))
	if st := e.waitNode(ref, "complete"); st.Status != graph.StatusComplete || len(st.ApprovedBy) != 1 || st.ApprovedBy[0].Login != alice {
		t.Errorf("after the sign-off: %+v", st)
	}
	e.waitNotification(box, ref, "complete", 1, catalog.WorkItemComplete)
}

// TestGatePausedNotice (decision 023): a gate answer relayed from Slack that
// reaches a paused session is settled without moving the graph, and a
// gate.paused notice goes to the answer's conversation; an answer typed on
// GitHub names no conversation and gets none.
func TestGatePausedNotice(t *testing.T) {
	e := newEnv(t, nil)
	box := e.inbox()
	const ref = "github:octo/repo#33"
	e.start(ref, 8200)
	e.waitNode(ref, "phase-selection")
	e.waitNotification(box, ref, "phase-selection", 1, catalog.DecisionPending)
	e.publish(comment(ref, 8201, alice, "the-loop pause"))
	e.waitRecord("session.paused", map[string]any{"work_item": ref})

	typed := comment(ref, 8202, alice, "the-loop execute")
	e.publish(typed)
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": typed.GetId(), "reason": DropSessionPaused})

	rec := relayed(ref, 8203, &loopv1.Actor{Github: alice, Slack: "U0ALICE"}, "the-loop execute")
	rec.Conversation = &loopv1.Conversation{Channel: "C0LOOP", ThreadTs: "1700000000.000100"}
	e.publish(rec)
	e.waitRecord("dispatch.dropped", map[string]any{"event_id": rec.GetId(), "reason": DropSessionPaused})
	id := envelope.LoopID("gate-paused", rec.GetId())
	var ev *loopv1.Event
	testkit.WaitFor(t, "the gate.paused notice on the inbox", func() bool { ev = box.get(id); return ev != nil })
	n := ev.GetNotification()
	if ev.GetType() != string(catalog.GatePaused) || ev.GetSubject() != ref || ev.GetCausationId() != rec.GetId() ||
		ev.GetConversation().GetChannel() != "C0LOOP" || ev.GetConversation().GetThreadTs() != "1700000000.000100" {
		t.Errorf("notice = %v", ev)
	}
	if n.GetNode() != "phase-selection" || n.GetUrl() != "https://github.com/octo/repo/issues/33" ||
		!strings.Contains(n.GetText(), "did not move") || !strings.Contains(n.GetText(), "`the-loop resume`") {
		t.Errorf("notice body = %v", n)
	}
	if st := e.graphState(ref); st.Current != "phase-selection" || len(st.Decisions) != 0 {
		t.Errorf("a gate answer to a paused session moved the graph: %+v", st)
	}
	if typedNotice := box.get(envelope.LoopID("gate-paused", typed.GetId())); typedNotice != nil {
		t.Errorf("an answer typed on GitHub got a notice: %v", typedNotice)
	}
}
