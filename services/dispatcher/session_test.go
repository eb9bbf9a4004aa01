package dispatcher

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/agent"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// The session endpoint against a real JetStream, real tmux and the stand-in
// harness: a session's environment is built, not inherited; its token is
// good for its own work item and nothing else; every refusal is counted and
// recorded without the token.

// bootEnv is the environment the n-th boot of harness session id started
// with, as the stand-in recorded it.
func (e *env) bootEnv(id string, n int) map[string]string {
	e.t.Helper()
	var boots []tmuxtest.Boot
	testkit.WaitFor(e.t, fmt.Sprintf("boot %d of %s", n, id), func() bool { boots = e.bootsOf(id); return len(boots) > n })
	return boots[n].Env
}

// agent is the session endpoint's client as the session's harness holds it
// after its n-th boot.
func (e *env) agent(id string, n int) sessionapi.Client {
	env := e.bootEnv(id, n)
	return sessionapi.Client{URL: env[EnvSessionURL], Token: env[EnvSessionToken]}
}

// call sends one request to the session endpoint at url with the
// Authorization header auth ("" for none) and returns the status and the
// answer's body.
func (e *env) call(url, method, path, auth string, body []byte) (int, []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLong)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, b
}

func bearer(token string) string { return "Bearer " + token }

func askBody(ref, question string) []byte {
	b, _ := json.Marshal(sessionapi.AskRequest{Ref: ref, Question: question, Wait: sessionapi.Duration(time.Nanosecond)})
	return b
}

// refusedCount is the metric of reason and the session.refused records of
// it so far.
func (e *env) refusedCount(reason string) (float64, int) {
	return testutil.ToFloat64(e.svc.m.sessionRefused.WithLabelValues(reason)),
		len(e.recs.Find("session.refused", map[string]any{"reason": reason}))
}

// wantRefused runs send, which must be answered status, and checks that
// exactly one refusal of reason was counted and recorded, naming ref and
// path.
func (e *env) wantRefused(what string, status int, reason, ref, path string, send func() (int, []byte)) {
	e.t.Helper()
	metric, records := e.refusedCount(reason)
	got, body := send()
	if got != status {
		e.t.Errorf("%s: %d %s, want %d", what, got, body, status)
	}
	var answer struct{ Error string }
	if err := json.Unmarshal(body, &answer); err != nil || answer.Error == "" {
		e.t.Errorf("%s: the answer %q says nothing", what, body)
	}
	m, _ := e.refusedCount(reason)
	if m != metric+1 {
		e.t.Errorf("%s: loop_dispatcher_session_refused_total{reason=%q} went from %v to %v", what, reason, metric, m)
	}
	recs := e.recs.Find("session.refused", map[string]any{"reason": reason})
	if len(recs) != records+1 {
		e.t.Errorf("%s: %d session.refused records of %s, want %d", what, len(recs), reason, records+1)
		return
	}
	if f := recs[len(recs)-1].Fields; f["work_item"] != ref || f["path"] != path {
		e.t.Errorf("%s: session.refused = %v, want work_item %q and path %q", what, f, ref, path)
	}
}

// noSecretIn fails the test if any of secrets stands in a record of the
// event log or in the service's log.
func (e *env) noSecretIn(secrets ...string) {
	e.t.Helper()
	recs, err := json.Marshal(e.recs.Since(0))
	if err != nil {
		e.t.Fatal(err)
	}
	logs := e.logs.String()
	for _, s := range secrets {
		if strings.Contains(string(recs), s) {
			e.t.Errorf("the event log carries a secret (%d characters)", len(s))
		}
		if strings.Contains(logs, s) {
			e.t.Errorf("the service's log carries a secret (%d characters)", len(s))
		}
	}
}

// secretOf is the secret part of a session token.
func secretOf(t *testing.T, token string) string {
	t.Helper()
	i := strings.LastIndexByte(token, '.')
	if i < 0 || len(token)-i-1 != 43 {
		t.Fatalf("not a session token: %d characters", len(token))
	}
	return token[i+1:]
}

// forged is a well-formed token naming ref with secret.
func forged(ref, secret string) string {
	return "lst1." + base64.RawURLEncoding.EncodeToString([]byte(ref)) + "." + secret
}

// dirtyTmuxServer starts the tmux server on socket as an operator's shell
// would have: its global environment holds the secrets of the environment
// that started it, and one set later. A session the dispatcher starts on
// that server must see none of them.
func dirtyTmuxServer(t *testing.T, socket string) {
	t.Helper()
	cmd := exec.Command("tmux", "-S", socket, "new-session", "-d", "-s", "operator-shell", "--", "sleep", "600")
	cmd.Env = append(os.Environ(), "OPERATOR_SECRET=operator-shell-secret-7f3a9c")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("tmux new-session: %v: %s", err, out)
	}
	if out, err := exec.Command("tmux", "-S", socket, "set-environment", "-g", "DIRTY_GLOBAL", "dirty-global-secret-51d2").CombinedOutput(); err != nil {
		t.Fatalf("tmux set-environment: %v: %s", err, out)
	}
	out, err := exec.Command("tmux", "-S", socket, "show-environment", "-g").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"OPERATOR_SECRET=", "DIRTY_GLOBAL=", "GITHUB_TOKEN="} {
		if !strings.Contains(string(out), v) {
			t.Fatalf("the tmux server's global environment lacks %s: the test would prove nothing", v)
		}
	}
}

// TestSessionEnvironmentIsBuilt: a session starts with the allow-list of
// the dispatcher's environment, the harness's own variables and its
// endpoint and token — nothing of the dispatcher's other variables (its
// tokens, its bus seed) and nothing of a tmux server an operator started
// with a shell full of secrets.
func TestSessionEnvironmentIsBuilt(t *testing.T) {
	t.Setenv("GITHUB_TOKEN", "ghp_dispatcherEnvSecret0123456789abcd")
	t.Setenv("LOOP_NATS_NKEY_SEED", "SUAdispatcherSeedNotForSessions0123456789")
	t.Setenv("LOOP_ENVELOPE_KEY", strings.Repeat("e", 32))
	t.Setenv("TZ", "UTC")
	t.Setenv("LC_PAPER", "C")
	e := newEnv(t, func(set *Settings) {
		dirtyTmuxServer(t, filepath.Join(set.TmuxDir, tmux.Target("github:octo/repo#51")))
		set.Harness.(*agent.Command).Environment["HARNESS_API_KEY"] = "harness-key-0042"
	})
	const ref = "github:octo/repo#51"
	sess := e.start(ref, 9100)
	got := e.bootEnv(sess.HarnessSessionID, 0)

	// The allow-list, written out here so that widening it is a decision
	// this test makes visible.
	want := map[string]string{}
	for _, n := range []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "COLORTERM", "LANG", "LANGUAGE", "TZ", "TMPDIR"} {
		if v, ok := os.LookupEnv(n); ok {
			want[n] = v
		}
	}
	for _, kv := range os.Environ() {
		if k, v, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "LC_") {
			want[k] = v
		}
	}
	if want["PATH"] == "" {
		want["PATH"] = defaultPath
	}
	want[tmuxtest.EnvDir] = e.dir
	want["HARNESS_API_KEY"] = "harness-key-0042"
	want[EnvSessionURL] = got[EnvSessionURL]
	want[EnvSessionToken] = got[EnvSessionToken]
	want[EnvStopMaxAttempts] = "3"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("the session's environment (-want +got):\n%s", diff)
	}
	if u := got[EnvSessionURL]; !strings.HasPrefix(u, "http://127.0.0.1:") {
		t.Errorf("%s = %q, want the loopback endpoint", EnvSessionURL, u)
	}
	tok := got[EnvSessionToken]
	if r, ok := sessionapi.TokenRef(tok); !ok || r != ref {
		t.Errorf("the session's token names %q (%v), want %s", r, ok, ref)
	}
	rec := e.record(ref).Session
	if !sessionapi.Matches(tok, rec.TokenHash) || rec.NextTokenHash != "" {
		t.Errorf("registry: the token does not match the stored hash (next %q)", rec.NextTokenHash)
	}
	if strings.Contains(rec.TokenHash, secretOf(t, tok)) {
		t.Error("the registry keeps the token's secret")
	}
}

// inboxFind waits for the first inbox event that match accepts.
func (e *env) inboxFind(box *inbox, what string, match func(*loopv1.Event) bool) *loopv1.Event {
	e.t.Helper()
	var found *loopv1.Event
	testkit.WaitFor(e.t, what, func() bool {
		box.mu.Lock()
		defer box.mu.Unlock()
		for _, ev := range box.evs {
			if match(ev) {
				found = ev
				return true
			}
		}
		return false
	})
	return found
}

// TestSessionAsk: a session asks with its own token; the question goes on
// the inbox as session.awaiting_input from source "session" with the
// session, never a person, as its actor, scrubbed of session tokens (its
// own, whole or its secret alone, and another session's) and of other
// secrets; the answer is the record's URL once the ledger has it. A wait
// too short for the record still puts the question on the bus.
func TestSessionAsk(t *testing.T) {
	const envSecret = "dispatcher-env-secret-value-0af1"
	t.Setenv("SLACK_BOT_TOKEN", envSecret)
	e := newEnv(t, nil)
	box := e.inbox()
	const ref = "github:octo/repo#52"
	sess := e.start(ref, 9200)
	agent := e.agent(sess.HarnessSessionID, 0)
	secret := secretOf(t, agent.Token)
	// Another session's token whose secret holds no digit: the general
	// scrubber's token rule needs one.
	other := forged("github:octo/repo#77", strings.Repeat("Qx", 21)+"Q")
	question := "Which parser should I use?\n" +
		"my environment: LOOP_SESSION_TOKEN=" + agent.Token + "\n" +
		"its secret: " + secret + "\n" +
		"a neighbour's: " + other + "\n" +
		"SLACK_BOT_TOKEN=" + envSecret + "\n" +
		"and ghp_0123456789abcdefghijKLMNOPqrst"

	type result struct {
		ans sessionapi.AskAnswer
		err error
	}
	done := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		defer cancel()
		ans, err := agent.Ask(ctx, "", question, waitLong)
		done <- result{ans, err}
	}()
	ev := e.inboxFind(box, "the question on the inbox", func(ev *loopv1.Event) bool {
		return ev.GetType() == string(catalog.SessionAwaitingInput) && ev.GetSubject() == ref
	})
	if ev.GetSource() != catalog.SourceSession {
		t.Errorf("source %q, want %q", ev.GetSource(), catalog.SourceSession)
	}
	if a := ev.GetActor(); a.GetGithub() != "" || a.GetSlack() != "" || !strings.Contains(a.GetName(), sess.TmuxTarget) {
		t.Errorf("actor %v: want the session by its terminal's name, with no person's id", a)
	}
	q := ev.GetQuestion()
	if q.GetSessionId() != sess.HarnessSessionID {
		t.Errorf("question session id %q, want %q", q.GetSessionId(), sess.HarnessSessionID)
	}
	text := q.GetText()
	for name, s := range map[string]string{"its token": agent.Token, "its secret": secret, "the neighbour's secret": strings.Repeat("Qx", 10),
		"an environment secret": envSecret, "a GitHub token": "ghp_0123456789"} {
		if strings.Contains(text, s) {
			t.Errorf("the question carries %s:\n%s", name, text)
		}
	}
	if !strings.Contains(text, "Which parser should I use?") || strings.Count(text, sessionapi.TokenPlaceholder) != 3 {
		t.Errorf("the question, scrubbed:\n%s", text)
	}

	// The ledger records it: the answer is the record's URL.
	kv, err := e.pub.KV(context.Background(), bus.BucketLedger)
	if err != nil {
		t.Fatal(err)
	}
	const url = "https://github.com/octo/repo/issues/52#issuecomment-5200"
	if _, err := kv.Put(context.Background(), ev.GetId(), []byte(`{"state":"recorded","record":{"url":"`+url+`"}}`)); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-done:
	case <-time.After(waitLong):
		t.Fatal("the ask did not return once recorded")
	}
	if r.err != nil || r.ans.ID != ev.GetId() || r.ans.URL != url || r.ans.Pending {
		t.Errorf("ask = %+v, %v; want id %s and url %s", r.ans, r.err, ev.GetId(), url)
	}

	// A wait shorter than any publish: pending, and on the bus all the same.
	status, body := e.call(agent.URL, http.MethodPost, sessionapi.PathAsk, bearer(agent.Token), askBody("", "still there?"))
	var pending sessionapi.AskAnswer
	if err := json.Unmarshal(body, &pending); err != nil || status != http.StatusAccepted || !pending.Pending || pending.ID == "" {
		t.Fatalf("ask with a 1ns wait: %d %s", status, body)
	}
	testkit.WaitFor(t, "the pending question on the inbox", func() bool { return box.get(pending.ID) != nil })

	if n := len(e.recs.Find("session.refused", nil)); n != 0 {
		t.Errorf("%d requests of the session refused", n)
	}
	e.noSecretIn(agent.Token, secret)
}

// TestSessionEndpointRefusals: every request that is not a live session of
// this host acting on its own work item is refused, counted by reason and
// recorded as session.refused — never with the token.
func TestSessionEndpointRefusals(t *testing.T) {
	e := newEnv(t, nil)
	const (
		refA, refB, refC, refD = "github:octo/repo#61", "github:octo/repo#62", "github:octo/repo#63", "github:octo/repo#64"
	)
	a := e.agent(e.start(refA, 9300).HarnessSessionID, 0)
	b := e.agent(e.start(refB, 9310).HarnessSessionID, 0)
	c := e.agent(e.start(refC, 9320).HarnessSessionID, 0)
	d := e.agent(e.start(refD, 9330).HarnessSessionID, 0)
	url := a.URL
	post := func(path, auth string, body []byte) func() (int, []byte) {
		return func() (int, []byte) { return e.call(url, http.MethodPost, path, auth, body) }
	}
	get := func(path, auth string) func() (int, []byte) {
		return func() (int, []byte) { return e.call(url, http.MethodGet, path, auth, nil) }
	}
	ok := func(what string, send func() (int, []byte)) {
		t.Helper()
		before := len(e.recs.Find("session.refused", nil))
		if status, body := send(); status != http.StatusOK {
			t.Errorf("%s: %d %s, want 200", what, status, body)
		}
		if n := len(e.recs.Find("session.refused", nil)); n != before {
			t.Errorf("%s: recorded a refusal", what)
		}
	}
	ok("A's status with A's token", get(sessionapi.PathStatus, bearer(a.Token)))

	const unauthorized, forbidden = http.StatusUnauthorized, http.StatusForbidden
	e.wantRefused("no token", unauthorized, refusedNoToken, "", sessionapi.PathAsk, post(sessionapi.PathAsk, "", askBody("", "hi")))
	e.wantRefused("another scheme", unauthorized, refusedNoToken, "", sessionapi.PathStatus, get(sessionapi.PathStatus, "Basic "+a.Token))
	e.wantRefused("an empty bearer", unauthorized, refusedNoToken, "", sessionapi.PathComplete, post(sessionapi.PathComplete, "Bearer ", []byte(`{}`)))
	e.wantRefused("not a token", unauthorized, refusedBadToken, "", sessionapi.PathAsk, post(sessionapi.PathAsk, bearer("the-loop-please"), askBody("", "hi")))
	e.wantRefused("a token cut short", unauthorized, refusedBadToken, "", sessionapi.PathAsk, post(sessionapi.PathAsk, bearer(a.Token[:len(a.Token)-1]), askBody("", "hi")))
	e.wantRefused("a token naming nothing", unauthorized, refusedBadToken, "", sessionapi.PathStatus, get(sessionapi.PathStatus, bearer("lst1.."+secretOf(t, a.Token))))
	// A's secret presented as B's token: the hash decides, not the ref.
	e.wantRefused("A's secret under B's ref", unauthorized, refusedBadToken, refB, sessionapi.PathComplete,
		post(sessionapi.PathComplete, bearer(forged(refB, secretOf(t, a.Token))), []byte(`{}`)))
	e.wantRefused("B's secret under A's ref", unauthorized, refusedBadToken, refA, sessionapi.PathAsk,
		post(sessionapi.PathAsk, bearer(forged(refA, secretOf(t, b.Token))), askBody("", "hi")))
	e.wantRefused("a token of a work item without a session", unauthorized, refusedNoSession, "github:octo/repo#404", sessionapi.PathStatus,
		get(sessionapi.PathStatus, bearer(forged("github:octo/repo#404", secretOf(t, a.Token)))))

	// A's own token, on B's work item.
	e.wantRefused("A asks on B", forbidden, refusedOtherItem, refA, sessionapi.PathAsk, post(sessionapi.PathAsk, bearer(a.Token), askBody(refB, "hi")))
	e.wantRefused("A completes B", forbidden, refusedOtherItem, refA, sessionapi.PathComplete,
		post(sessionapi.PathComplete, bearer(a.Token), []byte(`{"ref":"`+refB+`"}`)))
	if st := e.graphState(refB); st.Current != "phase-selection" {
		t.Errorf("B's graph moved: %s", st.Current)
	}

	// What A sends must be a question.
	e.wantRefused("an empty question", http.StatusBadRequest, refusedEmptyAsk, refA, sessionapi.PathAsk,
		post(sessionapi.PathAsk, bearer(a.Token), askBody("", " \n\t ")))
	e.wantRefused("not JSON", http.StatusBadRequest, refusedBadRequest, refA, sessionapi.PathAsk,
		post(sessionapi.PathAsk, bearer(a.Token), []byte("which parser?")))
	huge := []byte(`{"question":"` + strings.Repeat("a", sessionapi.MaxRequestBytes) + `"}`)
	e.wantRefused("an oversized question", http.StatusRequestEntityTooLarge, refusedTooLarge, refA, sessionapi.PathAsk,
		post(sessionapi.PathAsk, bearer(a.Token), huge))
	e.wantRefused("an oversized complete", http.StatusRequestEntityTooLarge, refusedTooLarge, refA, sessionapi.PathComplete,
		post(sessionapi.PathComplete, bearer(a.Token), append([]byte(`{"ref":"`+strings.Repeat(" ", sessionapi.MaxRequestBytes)), `"}`...)))

	// C's session is closed: its token dies with it.
	ok("C's status before its stop", get(sessionapi.PathStatus, bearer(c.Token)))
	e.publish(comment(refC, 9321, alice, "the-loop stop"))
	e.waitRecord("control.command", map[string]any{"work_item": refC, "command": "stop", "effect": "stopped"})
	e.wantRefused("a closed session's token", unauthorized, refusedNoSession, refC, sessionapi.PathAsk,
		post(sessionapi.PathAsk, bearer(c.Token), askBody("", "hi")))

	// D's session moved to another replica: this one no longer answers for it.
	ok("D's status before it moved", get(sessionapi.PathStatus, bearer(d.Token)))
	if _, err := e.store.Mutate(context.Background(), refD, func(r *sessions.Record) error {
		r.Session.Host = "host-b"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	e.wantRefused("a session hosted elsewhere", unauthorized, refusedElsewhere, refD, sessionapi.PathStatus,
		get(sessionapi.PathStatus, bearer(d.Token)))

	ok("A's status after all that", get(sessionapi.PathStatus, bearer(a.Token)))
	var secrets []string
	for _, x := range []sessionapi.Client{a, b, c, d} {
		secrets = append(secrets, x.Token, secretOf(t, x.Token))
	}
	e.noSecretIn(secrets...)
}

// TestSessionTokenRotatesOnRespawn: a respawned session gets a new token;
// the old one, which the dead process's environment held, is refused, and
// the registry keeps only the new one's hash.
func TestSessionTokenRotatesOnRespawn(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#65"
	sess := e.start(ref, 9400)
	old := e.agent(sess.HarnessSessionID, 0)
	if status, body := e.call(old.URL, http.MethodGet, sessionapi.PathStatus, bearer(old.Token), nil); status != http.StatusOK {
		t.Fatalf("status before the respawn: %d %s", status, body)
	}
	if err := e.server(ref).Kill(context.Background(), sess.TmuxTarget); err != nil {
		t.Fatal(err)
	}
	e.publish(comment(ref, 9401, alice, "are you still there?"))
	e.waitRecord("session.respawned", map[string]any{"work_item": ref})
	id := e.record(ref).Session.HarnessSessionID
	n := 0
	if id == sess.HarnessSessionID {
		n = 1 // resumed: the same conversation's second boot
	}
	cur := e.agent(id, n)
	if cur.Token == old.Token {
		t.Fatal("the respawned session got the old token")
	}
	rec := e.record(ref).Session
	if !sessionapi.Matches(cur.Token, rec.TokenHash) || rec.NextTokenHash != "" {
		t.Errorf("registry after the respawn: the new token is not the session's alone (next %q)", rec.NextTokenHash)
	}
	e.wantRefused("the token of the process before the respawn", http.StatusUnauthorized, refusedBadToken, ref, sessionapi.PathStatus,
		func() (int, []byte) {
			return e.call(old.URL, http.MethodGet, sessionapi.PathStatus, bearer(old.Token), nil)
		})
	if status, body := e.call(cur.URL, http.MethodGet, sessionapi.PathStatus, bearer(cur.Token), nil); status != http.StatusOK {
		t.Errorf("the new token: %d %s", status, body)
	}
}

// TestSessionTokenOfAnInterruptedSpawn: a spawn claimed in the registry
// before a crash is finished by the redelivery of its event. When no process
// came of the claim, the one started now holds a new token, and the
// registry must take its hash (else the session is locked out of its own
// endpoint); when the claim's process is running, it keeps its token.
func TestSessionTokenOfAnInterruptedSpawn(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	claim := func(ref string, commentID int64, staleHash string) *loopv1.Event {
		start := comment(ref, commentID, alice, "the-loop start")
		if _, err := e.store.Mutate(ctx, ref, func(r *sessions.Record) error {
			r.Labeled = true
			r.Control = &sessions.Control{Command: "start", Source: "comment", Actor: alice, RequestedAt: time.Now().UTC(), EventID: start.GetId()}
			r.Session = &sessions.Session{Harness: "claude", HarnessSessionID: fmt.Sprintf("aaaaaaaa-bbbb-4ccc-8ddd-%012d", commentID),
				Cwd: t.TempDir(), Host: hostA, TmuxTarget: tmux.Target(ref), Status: sessions.Spawning,
				CreatedAt: time.Now().UTC(), Pending: start.GetId(), TokenHash: staleHash}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return start
	}

	// The crash came before tmux was asked: no process holds the claim's token.
	const ref = "github:octo/repo#66"
	stale, staleHash, err := sessionapi.NewToken(ref)
	if err != nil {
		t.Fatal(err)
	}
	e.publish(claim(ref, 9500, staleHash))
	e.waitRecord("session.spawned", map[string]any{"work_item": ref})
	agent := e.agent(e.record(ref).Session.HarnessSessionID, 0)
	if status, body := e.call(agent.URL, http.MethodGet, sessionapi.PathStatus, bearer(agent.Token), nil); status != http.StatusOK {
		t.Errorf("the token of the session the redelivery started: %d %s", status, body)
	}
	if rec := e.record(ref).Session; rec.Status != sessions.Active || rec.NextTokenHash != "" || !sessionapi.Matches(agent.Token, rec.TokenHash) {
		t.Errorf("registry after the finished spawn: status %s, token not the running process's alone", rec.Status)
	}
	e.wantRefused("the claim's token, which no process holds", http.StatusUnauthorized, refusedBadToken, ref, sessionapi.PathStatus,
		func() (int, []byte) {
			return e.call(agent.URL, http.MethodGet, sessionapi.PathStatus, bearer(stale), nil)
		})

	// The crash came after tmux started the claim's process: it keeps its token.
	const ref2 = "github:octo/repo#67"
	running, runningHash, err := sessionapi.NewToken(ref2)
	if err != nil {
		t.Fatal(err)
	}
	tmuxNewSession(t, e.tmuxDir, tmux.Target(ref2))
	e.publish(claim(ref2, 9510, runningHash))
	e.waitRecord("session.spawned", map[string]any{"work_item": ref2})
	if rec := e.record(ref2).Session; rec.Status != sessions.Active || rec.TokenHash != runningHash || rec.NextTokenHash != "" {
		t.Errorf("registry after finding the claim's process: status %s, token hash replaced %v, next %q",
			rec.Status, rec.TokenHash != runningHash, rec.NextTokenHash)
	}
	if status, body := e.call(agent.URL, http.MethodGet, sessionapi.PathStatus, bearer(running), nil); status != http.StatusOK {
		t.Errorf("the running process's token: %d %s", status, body)
	}
}

// TestSessionCompletesOnlyItsAgentNode: a session completes its own agent
// node through the endpoint; at a human gate it is refused (409) and the
// graph does not move: only an authorized person decides a gate.
func TestSessionCompletesOnlyItsAgentNode(t *testing.T) {
	e := newEnv(t, nil)
	const ref = "github:octo/repo#68"
	sess := e.start(ref, 9600)
	e.waitNode(ref, "phase-selection")
	agent := e.agent(sess.HarnessSessionID, 0)
	ctx := context.Background()

	var moved GraphCompleted
	err := agent.Complete(ctx, "", &moved)
	var refused *sessionapi.Error
	if !errors.As(err, &refused) || refused.Status != http.StatusConflict || !strings.Contains(refused.Message, "human gate") {
		t.Errorf("complete at phase selection: %v, want a 409 naming the human gate", err)
	}
	if st := e.graphState(ref); st.Current != "phase-selection" || len(st.Decisions) != 0 {
		t.Errorf("a session moved a human gate: %+v", st)
	}

	e.publish(comment(ref, 9601, alice, "the-loop execute"))
	e.waitNode(ref, "requirements")
	if err := agent.Complete(ctx, ref, &moved); err != nil {
		t.Fatalf("complete at requirements: %v", err)
	}
	if moved.Ref != ref || moved.From != "requirements" || moved.To != "requirements-approval" {
		t.Errorf("complete = %+v", moved)
	}
	e.waitRecord("graph.advanced", map[string]any{"work_item": ref, "from": "requirements", "to": "requirements-approval"})
	if err := agent.Complete(ctx, "", &moved); !errors.As(err, &refused) || refused.Status != http.StatusConflict {
		t.Errorf("complete at the approval gate: %v, want 409", err)
	}
	if st := e.graphState(ref); st.Current != "requirements-approval" || len(st.ApprovedBy) != 0 {
		t.Errorf("a session moved the approval gate: %+v", st)
	}

	status, body := e.call(agent.URL, http.MethodGet, sessionapi.PathStatus, bearer(agent.Token), nil)
	var st GraphStatus
	if err := json.Unmarshal(body, &st); err != nil || status != http.StatusOK || st.Ref != ref || !st.AtHumanGate || st.State == nil || st.State.Current != "requirements-approval" {
		t.Errorf("status: %d %s", status, body)
	}
	// A session trying to pass a human gate is the attack the endpoint
	// stops: both tries are recorded as such.
	if n := len(e.recs.Find("session.refused", map[string]any{"reason": refusedHumanGate, "work_item": ref})); n != 2 {
		t.Errorf("%d session.refused human-gate records, want 2 (phase selection, the approval gate)", n)
	}
}

// TestSessionBaseEnv: the allow-list, the locale and the names the operator
// adds — never a LOOP_* variable, even named.
func TestSessionBaseEnv(t *testing.T) {
	env := map[string]string{
		"PATH": "/opt/bin", "HOME": "/home/op", "LANG": "C.UTF-8", "LC_TIME": "C", "TERM": "xterm",
		"GITHUB_TOKEN": "ghp_x", "SSH_AUTH_SOCK": "/tmp/agent.sock", "LOOP_NATS_NKEY_SEED": "SU…", "LOOP_SESSION_TOKEN": "lst1.x",
		"ANTHROPIC_API_KEY": "sk-ant", "AWS_SECRET_ACCESS_KEY": "aws",
	}
	got := SessionBaseEnv(env, []string{"ANTHROPIC_API_KEY", "LOOP_NATS_NKEY_SEED", "NOT_SET"})
	want := map[string]string{"PATH": "/opt/bin", "HOME": "/home/op", "LANG": "C.UTF-8", "LC_TIME": "C", "TERM": "xterm", "ANTHROPIC_API_KEY": "sk-ant"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("SessionBaseEnv (-want +got):\n%s", diff)
	}
	if got := SessionBaseEnv(map[string]string{"HOME": "/h"}, nil); got["PATH"] != defaultPath || len(got) != 2 {
		t.Errorf("without PATH: %v", got)
	}
}
