package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"

	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/redact"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// syncBuffer is a buffer a verb writes while the test reads it.
type syncBuffer = testkit.SyncBuffer

func runVerb(t *testing.T, env config.Env, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(context.Background(), args, env, &out, &errb)
	return code, out.String(), errb.String()
}

// TestCatalogPrintersAgree pins R1.5: `events --types`, `channels status` and
// docs/configuration.md all print the catalog from the one definition, and
// the committed doc is what the generator writes now.
func TestCatalogPrintersAgree(t *testing.T) {
	env := config.Env{}
	code, types, stderr := runVerb(t, env, "events", "--types")
	if code != 0 {
		t.Fatalf("events --types: %d %s", code, stderr)
	}
	code, status, stderr := runVerb(t, env, "channels", "status")
	if code != 0 {
		t.Fatalf("channels status: %d %s", code, stderr)
	}
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	var gen bytes.Buffer
	if err := writeConfigurationDoc(&gen); err != nil {
		t.Fatal(err)
	}
	if gen.String() != string(doc) {
		t.Error("docs/configuration.md drifted from its definitions: run 'make generate'")
	}
	space := regexp.MustCompile(`\s{2,}`)
	columns := func(out, typ string) []string {
		for _, line := range strings.Split(out, "\n") {
			cols := space.Split(strings.TrimSpace(line), -1)
			if len(cols) > 0 && cols[0] == typ {
				return cols
			}
		}
		return nil
	}
	for _, e := range catalog.All() {
		want := []string{string(e.Type), catalog.YesNo(e.Subscribable), catalog.YesNo(e.Publishable), e.Record.String(), e.RaisedBy}
		for name, out := range map[string]string{"events --types": types, "channels status": status} {
			got := columns(out, string(e.Type))
			if len(got) < len(want) || strings.Join(got[:len(want)], "|") != strings.Join(want, "|") {
				t.Errorf("%s row for %s = %q, want it to start %q", name, e.Type, got, want)
			}
		}
		mdRow := fmt.Sprintf("| `%s` | %s | %s | %s | %s |", want[0], want[1], want[2], want[3], want[4])
		if !strings.Contains(string(doc), mdRow) {
			t.Errorf("docs/configuration.md lacks %q", mdRow)
		}
	}
	// The default grants show in channels status (R2.2).
	if got := columns(status, string(catalog.SessionAwaitingInput)); len(got) != 7 || got[5] != "[x]" || got[6] != "[ ]" {
		t.Errorf("default grants for session.awaiting_input = %q", got)
	}
	if got := columns(status, string(catalog.WorkItemReply)); len(got) != 7 || got[6] != "[x]" {
		t.Errorf("default publish grant for work-item.reply = %q", got)
	}
}

const oldConfig = `# operator config of a 12.x install
version: "0.6.0"
routing:
  authorizedUsers:
    - octocat   # the operator
channels:
  slack:
    enabled: true
    channel: C0123
    events: [session.awaiting_input, pr-review-pending]
    authorizedUsers: [U111, U222]
`

func TestMigrateConfigVerb(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(path, []byte(oldConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	env := config.Env{"LOOP_CONFIG": path}

	// Loading the old file is refused with the message.
	code, _, stderr := runVerb(t, env, "channels", "status")
	if code == 0 {
		t.Fatal("channels status accepted a config with removed keys")
	}
	for _, want := range []string{"channels.slack.events", "channels.slack.subscribe", "channels.slack.authorizedUsers", "routing.authorizedUsers", "the-loop migrate-config"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("refusal does not name %q:\n%s", want, stderr)
		}
	}

	// Without --write: a report and the result, the file untouched.
	code, out, stderr := runVerb(t, env, "migrate-config")
	if code != 0 {
		t.Fatalf("migrate-config: %d %s", code, stderr)
	}
	if b, _ := os.ReadFile(path); string(b) != oldConfig {
		t.Error("migrate-config without --write changed the file")
	}
	if !strings.Contains(out, "U111") || !strings.Contains(out, "subscribe") {
		t.Errorf("report does not show the moves:\n%s", out)
	}

	code, out, stderr = runVerb(t, env, "migrate-config", "--write", path)
	if code != 0 || !strings.Contains(out, "wrote "+path) {
		t.Fatalf("migrate-config --write: %d %s %s", code, out, stderr)
	}
	migrated, _ := os.ReadFile(path)
	if bak, _ := os.ReadFile(path + ".bak"); string(bak) != oldConfig {
		t.Error("the original was not kept as .bak")
	}
	for _, want := range []string{`version: "0.7.0"`, "subscribe:", "slack: U111", "slack: U222", "# the operator"} {
		if !strings.Contains(string(migrated), want) {
			t.Errorf("migrated file lacks %q:\n%s", want, migrated)
		}
	}
	if strings.Contains(string(migrated), "events:") {
		t.Errorf("migrated file still has events:\n%s", migrated)
	}

	// A second run changes nothing.
	code, out, _ = runVerb(t, env, "migrate-config", "--write")
	if code != 0 || !strings.Contains(out, "nothing to migrate") {
		t.Errorf("second run: %d %s", code, out)
	}
	if again, _ := os.ReadFile(path); !bytes.Equal(again, migrated) {
		t.Error("second run changed the file")
	}

	// The migrated file loads, with the Slack ids now from routing.
	code, out, stderr = runVerb(t, env, "channels", "status")
	if code != 0 {
		t.Fatalf("channels status after migration: %d %s", code, stderr)
	}
	if !strings.Contains(out, "2 Slack member id(s)") {
		t.Errorf("status after migration:\n%s", out)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{nil, {"nope"}, {"serve"}, {"serve", "nope"}, {"events", "--since", "yesterday"}, {"events", "--limit", "0"}, {"dlq", "replay", "x"}} {
		if code, _, _ := runVerb(t, config.Env{}, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	code, _, stderr := runVerb(t, config.Env{"LOOP_NAT_URL": "nats://x"}, "channels", "status")
	if code != 1 || !strings.Contains(stderr, "LOOP_NAT_URL") {
		t.Errorf("unknown LOOP_ variable: %d %s", code, stderr)
	}
	code, out, _ := runVerb(t, config.Env{}, "serve", "ledger-writer", "--help")
	if code != 0 || !strings.Contains(out, "LOOP_NATS_URL") || !strings.Contains(out, "LOOP_ENVELOPE_KEY") {
		t.Errorf("serve --help: %d\n%s", code, out)
	}
}

func TestServeRefusesWithoutEnvelopeKey(t *testing.T) {
	srv := bustest.NewServer(t)
	for _, svc := range []string{"ledger-writer", "ingress-github"} {
		code, _, stderr := runVerb(t, config.Env{"LOOP_NATS_URL": srv.URL(), "LOOP_GITHUB_TOKEN": "t"}, "serve", svc)
		if code != 1 || !strings.Contains(stderr, "LOOP_ENVELOPE_KEY") {
			t.Errorf("serve %s without a key: %d %s", svc, code, stderr)
		}
	}
}

// TestServeConsumes runs one service as its container would, against a real
// JetStream server, and checks it consumes an event published to the inbox,
// answers /readyz, and drains on cancel.
func TestServeConsumes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	env := config.Env{
		"LOOP_NATS_URL":     srv.URL(),
		"LOOP_ADMIN_ADDR":   "127.0.0.1:0",
		"LOOP_ENVELOPE_KEY": strings.Repeat("k", 32),
		"LOOP_GITHUB_TOKEN": "ghp_not_a_real_token_0123456789",
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "ledger-writer"}, env, &out, &errb) }()
	// Nothing is provisioned yet: the service waits for the operator's
	// provisioning, says so, and serves nothing meanwhile.
	testkit.WaitWithin(t, 20*time.Second, "the service to say it waits for provisioning", func() bool {
		return strings.Contains(errb.String(), "waiting for the operator to provision")
	})
	if adminRE.MatchString(out.String()) {
		t.Fatalf("serving before the streams exist:\n%s", out.String())
	}
	if code, pout, perr := runVerb(t, config.Env{"LOOP_NATS_URL": srv.URL()}, "provision"); code != 0 || !strings.Contains(pout, "in place") {
		t.Fatalf("provision: exit %d\n%s\n%s", code, pout, perr)
	}
	admin := adminURL(t, &out)
	waitReady(t, admin)
	// Readiness is live: a pull that fails on a loaded machine makes the
	// service unready until its next one, so the verb is asked until it
	// sees the service ready (and must then exit 0).
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, _, stderr := runVerb(t, config.Env{}, "health", "--url", admin+"/readyz")
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health on a ready service: %d %s", code, stderr)
		}
	}
	if code, _, _ := runVerb(t, config.Env{}, "health", "--url", admin+"/nope"); code != 1 {
		t.Errorf("health on a 404: exit %d, want 1", code)
	}

	conn := srv.Connect(t, "test-publisher")
	publishReply(t, conn, "slack:EvServe1")
	testkit.WaitWithin(t, 10*time.Second, "the ledger-writer to consume the event", func() bool {
		return strings.Contains(errb.String(), `"event_id":"slack:EvServe1"`)
	})
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("serve exited %d: %s", code, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not drain and stop")
	}
	if strings.Contains(errb.String(), "ghp_not_a_real_token") || strings.Contains(out.String(), "ghp_not_a_real_token") {
		t.Error("the token reached the output")
	}
}

func publishReply(t *testing.T, conn *bus.Conn, id string) {
	t.Helper()
	ev := &loopv1.Event{
		Id: id, Source: "slack", Type: string(catalog.WorkItemReply), Subject: "github:octo/repo#15",
		Time: envelope.NewTime(time.Now()),
		Body: &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "hello"}},
	}
	m, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := conn.Publish(ctx, bus.FromEnvelope(m)); err != nil {
		t.Fatal(err)
	}
}

var adminRE = regexp.MustCompile(`admin on (http://\S+) `)

func adminURL(t *testing.T, out *syncBuffer) string {
	t.Helper()
	var url string
	testkit.WaitWithin(t, 20*time.Second, "the admin address", func() bool {
		m := adminRE.FindStringSubmatch(out.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}

func waitReady(t *testing.T, admin string) {
	t.Helper()
	testkit.WaitWithin(t, 20*time.Second, "/readyz to answer 200", func() bool {
		resp, err := http.Get(admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}

// TestUpRunsAndCtrlCExitsZero builds the binary, runs `the-loop up` as an
// operator would, checks every service is ready and the embedded server
// takes events, then sends SIGINT: it must drain and exit 0.
func TestUpRunsAndCtrlCExitsZero(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := theLoopBinary(t)
	store := filepath.Join(dir, "store")
	cmd := exec.Command(bin, "up")
	cmd.Dir = dir
	cmd.Env = append(filteredEnviron(), "LOOP_NATS_LISTEN=127.0.0.1:0", "LOOP_ADMIN_ADDR=127.0.0.1:0",
		"LOOP_SESSION_ADDR=127.0.0.1:0", "LOOP_STORE_DIR="+store, "LOOP_DISPATCHER_WORKDIR="+t.TempDir())
	var out, errb syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	admin := adminURL(t, &out)
	// Without credentials some services cannot work (no GitHub token, no
	// webhook secret, Slack off): /readyz must still cover all five, and the
	// bus itself must be up.
	var body []byte
	testkit.WaitWithin(t, 20*time.Second, "/readyz to cover every service with NATS connected", func() bool {
		resp, err := http.Get(admin + "/readyz")
		if err != nil {
			return false
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		var r struct {
			Checks []string          `json:"checks"`
			Failed map[string]string `json:"failed"`
		}
		if json.Unmarshal(body, &r) != nil {
			return false
		}
		for _, svc := range append(serviceNames(), "nats") {
			if !slices.Contains(r.Checks, svc) {
				return false
			}
		}
		_, natsDown := r.Failed["nats"]
		return !natsDown
	})
	natsURL := regexp.MustCompile(`NATS on (nats://\S+)`).FindStringSubmatch(out.String())
	if natsURL == nil {
		t.Fatalf("no NATS address printed:\n%s", out.String())
	}
	// Authorization is on: a client without a credential — an agent
	// session, say — is refused, naming what is missing.
	anon, err := bus.Connect(context.Background(), bus.Options{URL: natsURL[1], Name: "anonymous", ReconnectWait: 50 * time.Millisecond})
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = anon.WaitConnected(ctx)
		cancel()
		anon.Close()
	}
	var refused *bus.AuthError
	if !errors.As(err, &refused) || refused.Kind != "none" {
		t.Errorf("a client without a credential: %v, want it refused", err)
	}
	// The operator's identity, kept in the store, may publish.
	conn, err := bus.Connect(context.Background(), bus.Options{URL: natsURL[1], Name: "test", Identity: bus.IdentityOperator,
		Credentials: bus.Credentials{SeedFile: filepath.Join(store, "nats", "operator.nk")}})
	if err != nil {
		t.Fatal(err)
	}
	publishReply(t, conn, "slack:EvUp1")
	conn.Close()
	testkit.WaitWithin(t, 10*time.Second, "the ledger-writer under up to consume", func() bool {
		return strings.Contains(errb.String(), `"event_id":"slack:EvUp1"`)
	})
	for _, f := range []string{"envelope.key", "nats/operator.nk", "nats/observer.nk"} {
		if st, err := os.Stat(filepath.Join(store, f)); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("up did not keep %s in its store, readable by its owner only: %v", f, err)
		}
	}
	for _, f := range []string{"nats/ledger-writer.nk", "nats/dispatcher.nk"} {
		if _, err := os.Stat(filepath.Join(store, f)); err == nil {
			t.Errorf("up wrote the services' own identity %s to disk; they never leave the process", f)
		}
	}
	// A reading verb finds the observer identity; a verb that changes
	// something asks for the operator's, by name.
	cli := func(args ...string) (string, error) {
		c := exec.Command(bin, args...)
		c.Env = append(filteredEnviron(), "LOOP_NATS_URL="+natsURL[1], "LOOP_STORE_DIR="+store)
		b, err := c.CombinedOutput()
		return string(b), err
	}
	if out, err := cli("dlq", "list"); err == nil || !strings.Contains(out, "credential") {
		t.Errorf("dlq list with LOOP_NATS_URL and no credential: %v\n%s", err, out)
	}
	c := exec.Command(bin, "dlq", "list")
	c.Env = append(filteredEnviron(), "LOOP_NATS_URL="+natsURL[1], "LOOP_NATS_NKEY_FILE="+filepath.Join(store, "nats", "observer.nk"))
	if b, err := c.CombinedOutput(); err != nil {
		t.Errorf("dlq list as the observer: %v\n%s", err, b)
	}
	c = exec.Command(bin, "dlq", "replay", "1")
	c.Env = append(filteredEnviron(), "LOOP_STORE_DIR="+store)
	if b, err := c.CombinedOutput(); err == nil || !strings.Contains(string(b), "LOOP_NATS_NKEY_FILE="+filepath.Join(store, "nats", "operator.nk")) {
		t.Errorf("dlq replay against the local up without a credential: %v\n%s; want the operator credential named", err, b)
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		var exit *exec.ExitError
		if errors.As(err, &exit) || err != nil {
			t.Fatalf("up exited with %v after Ctrl-C\n%s", err, errb.String())
		}
	case <-time.After(40 * time.Second):
		t.Fatal("up did not stop after Ctrl-C")
	}
	if !strings.Contains(out.String(), "drained and stopped") {
		t.Errorf("up did not report its drain:\n%s", out.String())
	}
}

// filteredEnviron is the test's environment without LOOP_* variables, so a
// developer's shell cannot change what the binary under test reads.
func filteredEnviron() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LOOP_") {
			out = append(out, kv)
		}
	}
	return out
}

// TestREADMEListsEverySetting keeps the README's configuration table true.
func TestREADMEListsEverySetting(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range knownSettings() {
		if !strings.Contains(string(readme), "| `"+name+"` |") {
			t.Errorf("README.md's configuration table lacks %s", name)
		}
	}
}

// TestEventsFollow tails loop.log.> from a real server: records emitted by a
// service's event log show up, formatted, with ids and no content.
func TestEventsFollow(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bus.DefaultTopology())
	conn := srv.Connect(t, "test-log")
	log := eventlog.New("ledger-writer", slog.New(slog.DiscardHandler), logPublisher{conn})
	log.Emit(context.Background(), "bus.recorded", slog.String("event_id", "slack:EvFollow1"))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"events", "--follow", "--last", "10"}, config.Env{"LOOP_NATS_URL": srv.URL()}, &out, &errb)
	}()
	testkit.WaitWithin(t, 10*time.Second, "the earlier record", func() bool { return strings.Contains(out.String(), "event_id=slack:EvFollow1") })
	log.Emit(context.Background(), "channel.dropped", slog.String("reason", "unauthorized-actor"))
	testkit.WaitWithin(t, 10*time.Second, "a record published while following", func() bool {
		return strings.Contains(out.String(), "channel.dropped") && strings.Contains(out.String(), "reason=unauthorized-actor")
	})
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("events --follow exited %d: %s", code, errb.String())
	}
}

// TestEventsQuery: `the-loop events` with the query flags prints the stored
// records they select, the newest --limit, as text or JSON lines.
func TestEventsQuery(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bus.DefaultTopology())
	conn := srv.Connect(t, "test-log")
	ctx := context.Background()
	gh := eventlog.New("ingress-github", slog.New(slog.DiscardHandler), logPublisher{conn})
	disp := eventlog.New("dispatcher", slog.New(slog.DiscardHandler), logPublisher{conn})
	gh.Emit(ctx, "routing.routed", slog.String("delivery_id", "d-1"), slog.String("event_type", "comment.human"),
		slog.Any("work_items", []string{"github:octo/repo#1"}))
	disp.Emit(ctx, "graph.advanced", slog.String("work_item", "github:octo/repo#1"), slog.String("event_id", "gh:1"), slog.String("to", "requirements"))
	disp.Emit(ctx, "graph.advanced", slog.String("work_item", "github:octo/repo#2"), slog.String("event_id", "gh:2"), slog.String("to", "design"))
	disp.Emit(ctx, "graph.advanced", slog.String("work_item", "github:octo/repo#1"), slog.String("event_id", "gh:3"), slog.String("to", "design"))
	env := config.Env{"LOOP_NATS_URL": srv.URL()}
	testkit.WaitWithin(t, 10*time.Second, "the four records stored", func() bool {
		_, out, _ := runVerb(t, env, "events", "--json")
		return strings.Count(out, "\n") == 4
	})
	code, out, stderr := runVerb(t, env, "events", "--work-item", "github:octo/repo#1", "--type", "graph.advanced", "--json")
	if code != 0 || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"event_id":"gh:1"`) || !strings.Contains(out, `"event_id":"gh:3"`) {
		t.Fatalf("events --work-item #1 --type graph.advanced: %d\n%s%s", code, out, stderr)
	}
	if code, out, _ := runVerb(t, env, "events", "--work-item", "github:octo/repo#1", "--limit", "1"); code != 0 || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, "event_id=gh:3") {
		t.Errorf("events --limit 1 is not the newest:\n%s", out)
	}
	if code, out, _ := runVerb(t, env, "events", "--delivery-id", "d-1", "--type", "comment.human"); code != 0 || !strings.Contains(out, "routing.routed") ||
		strings.Count(out, "\n") != 1 {
		t.Errorf("events --delivery-id d-1:\n%s", out)
	}
	if code, out, _ := runVerb(t, env, "events", "--since", "1h", "--work-item", "github:octo/repo#2"); code != 0 || strings.Count(out, "\n") != 1 {
		t.Errorf("events --since 1h --work-item #2:\n%s", out)
	}
	if code, out, _ := runVerb(t, env, "events", "--since", time.Now().Add(time.Hour).Format(time.RFC3339)); code != 0 || out != "" {
		t.Errorf("events since an hour from now: %d\n%s", code, out)
	}
}

// TestReadingVerbsReadThroughTheAPI: with LOOP_API_URL, `events`,
// `sessions list` and `dlq list` read the control plane's API with the
// read token, and print what they print from NATS.
func TestReadingVerbsReadThroughTheAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	srv.Provision(t, bus.DefaultTopology())
	op := srv.Connect(t, "test-log")
	log := eventlog.New("dispatcher", slog.New(slog.DiscardHandler), logPublisher{op})
	log.Emit(context.Background(), "graph.advanced", slog.String("work_item", "github:octo/repo#1"), slog.String("event_id", "gh:api-1"))
	log.Emit(context.Background(), "graph.advanced", slog.String("work_item", "github:octo/repo#2"), slog.String("event_id", "gh:api-2"))
	mux := http.NewServeMux()
	statuspage.Register(mux, statuspage.Options{
		Conn: op, Observer: srv.ConnectAs(t, bus.IdentityObserver, "api-reads"), Config: func() *config.Config { return defaultConfig },
		Topology: bus.DefaultTopology(), Expose: true, Token: "cli-read-token-0123456789",
		Log: slog.New(slog.DiscardHandler), Scrub: redact.New(redact.Options{}),
	})
	api := httptest.NewServer(mux)
	defer api.Close()
	env := config.Env{"LOOP_API_URL": api.URL + "/api/v1", "LOOP_API_TOKEN": "cli-read-token-0123456789"}
	testkit.WaitWithin(t, 10*time.Second, "the records through the API", func() bool {
		_, out, _ := runVerb(t, env, "events", "--work-item", "github:octo/repo#2", "--json")
		return strings.Count(out, "\n") == 1 && strings.Contains(out, `"event_id":"gh:api-2"`)
	})
	if code, out, stderr := runVerb(t, env, "sessions", "list"); code != 0 || !strings.HasPrefix(out, "WORK ITEM") || !strings.Contains(out, "0 work item(s)") {
		t.Errorf("sessions list through the API: %d\n%s%s", code, out, stderr)
	}
	if code, out, stderr := runVerb(t, env, "dlq", "list"); code != 0 || !strings.Contains(out, "0 dead-lettered event(s)") {
		t.Errorf("dlq list through the API: %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := runVerb(t, env, "graph", "status", "github:octo/repo#3"); code != 1 || !strings.Contains(stderr, "has no graph state") {
		t.Errorf("graph status of a work item without a graph, through the API: %d %s", code, stderr)
	}
	// An API that is not there, or not an API, is said in words.
	env["LOOP_API_URL"] = api.URL + "/nothing-here"
	if code, _, stderr := runVerb(t, env, "events"); code != 1 || !strings.Contains(stderr, "answered 404") {
		t.Errorf("events from no API: %d %s", code, stderr)
	}
	env["LOOP_API_URL"] = "nats://127.0.0.1:4222"
	if code, _, stderr := runVerb(t, env, "dlq", "list"); code != 1 || !strings.Contains(stderr, "not an http(s) URL") {
		t.Errorf("dlq list from a NATS URL: %d %s", code, stderr)
	}
}

// TestMalformedEventIsDeadLetteredAndReplayable: a message on the inbox that
// is not a valid event (its type header says control.command, its body is a
// reply) is never handled as either; the ledger-writer sends it to LOOP_DLQ
// with the reason, `dlq list` shows it and `dlq replay` republishes it.
func TestMalformedEventIsDeadLetteredAndReplayable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bus.DefaultTopology())
	gh := ghfake.New(t)
	gh.AddToken("ghp_test_token_for_the_ledger_0123", "the-loop-bot")
	env := config.Env{"LOOP_NATS_URL": srv.URL(), "LOOP_ADMIN_ADDR": "127.0.0.1:0", "LOOP_ENVELOPE_KEY": strings.Repeat("k", 32),
		"LOOP_GITHUB_TOKEN": "ghp_test_token_for_the_ledger_0123", "LOOP_GITHUB_API_URL": gh.URL(), "LOOP_GITHUB_LOGIN": "the-loop-bot"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", "ledger-writer"}, env, &out, &errb) }()
	waitReady(t, adminURL(t, &out))

	ev := &loopv1.Event{
		Id: "slack:EvForged", Source: "slack", Type: string(catalog.WorkItemReply), Subject: "github:octo/repo#15",
		Time: envelope.NewTime(time.Now()), Body: &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "the-loop stop"}},
	}
	m, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		t.Fatal(err)
	}
	forged := bus.FromEnvelope(m)
	forged.Subject = catalog.InboxSubject(ev.Subject, catalog.ControlCommand)
	forged.Header[envelope.HeaderType] = []string{string(catalog.ControlCommand)}
	conn := srv.Connect(t, "forger")
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	defer pcancel()
	if _, err := conn.Publish(pctx, forged); err != nil {
		t.Fatal(err)
	}
	var list string
	testkit.WaitWithin(t, 15*time.Second, "the forged message in the DLQ", func() bool {
		var code int
		code, list, _ = runVerb(t, env, "dlq", "list")
		return code == 0 && strings.Contains(list, "slack:EvForged")
	})
	if !strings.Contains(list, "disagree") || !strings.Contains(list, "1 dead-lettered") {
		t.Errorf("dlq list does not give the reason:\n%s", list)
	}
	if strings.Contains(errb.String(), "would record") && strings.Contains(errb.String(), "slack:EvForged") {
		t.Error("the ledger-writer handled a forged message")
	}
	seq := regexp.MustCompile(`(?m)^(\d+)\s`).FindStringSubmatch(list)
	if seq == nil {
		t.Fatalf("no sequence in:\n%s", list)
	}
	code, replayed, stderr := runVerb(t, env, "dlq", "replay", seq[1])
	if code != 0 || !strings.Contains(replayed, "slack:EvForged:replay:"+seq[1]) {
		t.Fatalf("dlq replay: %d %s %s", code, replayed, stderr)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("serve exited %d", code)
	}
}

// TestExcerptVerb prints what the original printed for the shared delivery
// (testdata/excerpt/expected.json).
func TestExcerptVerb(t *testing.T) {
	path := "../../../shared/testdata/github-webhooks/issue_comment/created.json"
	expected, err := os.ReadFile("../../../shared/testdata/excerpt/expected.json")
	if err != nil {
		t.Skip("../shared/testdata is absent (a clone outside the workspace): skipping the shared-payload check")
	}
	var want map[string]string
	if err := json.Unmarshal(expected, &want); err != nil {
		t.Fatal(err)
	}
	w, ok := want["issue_comment/created.json"]
	if !ok {
		for k, v := range want {
			if strings.HasSuffix(k, "issue_comment/created.json") {
				w, ok = v, true
			}
		}
	}
	if !ok {
		t.Fatal("expected.json has no entry for issue_comment/created.json")
	}
	code, out, stderr := runVerb(t, config.Env{}, "excerpt", "--event", "issue_comment", path)
	if code != 0 || out != w+"\n" {
		t.Errorf("excerpt: %d %s\ngot:\n%s\nwant:\n%s", code, stderr, out, w)
	}
	if code, _, _ := runVerb(t, config.Env{}, "excerpt", "--event", "issue_comment", "/nonexistent"); code != 1 {
		t.Errorf("excerpt of a missing file: exit %d", code)
	}
}

// TestSessionsVerbs: list shows the registry; a pause request becomes a
// control.command from the cli channel on the inbox, with the person from
// config; an unknown login is refused before anything is published.
func TestSessionsVerbs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	conn := srv.Connect(t, "sessions-test")
	ctx := context.Background()
	store, err := sessions.Open(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Mutate(ctx, "github:octo/repo#15", func(r *sessions.Record) error {
		r.Session = &sessions.Session{Harness: "claude", HarnessSessionID: "s-1", Host: "box-1", TmuxTarget: "loop-github-octo-repo-15", Status: sessions.Active}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(t.TempDir(), "config.yaml")
	os.WriteFile(cfgPath, []byte("version: \"0.7.0\"\nrouting:\n  authorizedUsers:\n    - {github: alice, slack: U1, name: Alice}\n"), 0o600)
	env := config.Env{"LOOP_NATS_URL": srv.URL(), "LOOP_CONFIG": cfgPath}

	code, out, stderr := runVerb(t, env, "sessions", "list")
	if code != 0 || !strings.Contains(out, "github:octo/repo#15") || !strings.Contains(out, "box-1") || !strings.Contains(out, "1 work item(s)") {
		t.Fatalf("sessions list: %d %s %s", code, out, stderr)
	}
	if code, _, stderr := runVerb(t, env, "sessions", "pause", "--work-item", "github:octo/repo#15", "--as", "mallory"); code != 1 || !strings.Contains(stderr, "authorizedUsers") {
		t.Errorf("pause as an unknown login: %d %s", code, stderr)
	}
	before, err := conn.StreamStats(ctx, bus.StreamInbox)
	if err != nil {
		t.Fatal(err)
	}
	code, out, stderr = runVerb(t, env, "sessions", "pause", "--work-item", "github:octo/repo#15", "--as", "Alice")
	if code != 0 || !strings.Contains(out, "requested pause") {
		t.Fatalf("pause: %d %s %s", code, out, stderr)
	}
	after, err := conn.StreamStats(ctx, bus.StreamInbox)
	if err != nil {
		t.Fatal(err)
	}
	if after.Msgs != before.Msgs+1 {
		t.Fatalf("inbox holds %d messages, want %d", after.Msgs, before.Msgs+1)
	}
	// Read the request back as the ledger-writer would receive it.
	got := make(chan *loopv1.Event, 1)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go conn.Run(rctx, bus.ConsumerSpec{Service: bus.ServiceLedgerWriter, Stream: bus.StreamInbox, Partitions: 2}, bus.HandlerFunc(func(_ context.Context, d *bus.Delivery) error {
		ev, err := envelope.FromMessage(envelope.Message{Subject: d.Subject, Header: d.Header, Data: d.Data})
		if err == nil {
			got <- ev
		}
		return err
	}))
	select {
	case ev := <-got:
		if ev.GetType() != "control.command" || ev.GetSource() != "cli" || ev.GetActor().GetGithub() != "alice" || ev.GetActor().GetSlack() != "U1" ||
			ev.GetControlCommand().GetCommand() != "pause" || ev.GetControlCommand().GetText() != "the-loop pause" {
			t.Errorf("request = %v", ev)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the request never reached the inbox consumer")
	}
}

// TestUpRefusesStoreInsideSessionWorkdir: the store holds the envelope key
// and the operator's identity; agent sessions work in the dispatcher's
// working directory with a shell, so `up` will not put one inside the other.
func TestUpRefusesStoreInsideSessionWorkdir(t *testing.T) {
	wd := t.TempDir()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"up"}, config.Env{
		"LOOP_STORE_DIR": filepath.Join(wd, ".the-loop"), "LOOP_DISPATCHER_WORKDIR": wd,
		"LOOP_NATS_LISTEN": "127.0.0.1:0", "LOOP_ADMIN_ADDR": "127.0.0.1:0",
	}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "LOOP_STORE_DIR") || !strings.Contains(errb.String(), "LOOP_DISPATCHER_WORKDIR") {
		t.Errorf("up with its store inside the sessions' workdir: exit %d\n%s", code, errb.String())
	}
	if _, err := os.Stat(filepath.Join(wd, ".the-loop")); err == nil {
		t.Error("up created its store inside the sessions' workdir before refusing")
	}
	// The workspace root, and the other way round: workspaces inside the
	// store.
	for _, c := range []struct{ store, root string }{
		{filepath.Join(wd, "store"), wd},
		{wd, filepath.Join(wd, "workspaces")},
	} {
		errb.Reset()
		code = run(context.Background(), []string{"up"}, config.Env{
			"LOOP_STORE_DIR": c.store, "LOOP_WORKSPACE_ROOT": c.root,
			"LOOP_NATS_LISTEN": "127.0.0.1:0", "LOOP_ADMIN_ADDR": "127.0.0.1:0",
		}, &out, &errb)
		if code != 1 || !strings.Contains(errb.String(), "LOOP_STORE_DIR") || !strings.Contains(errb.String(), "LOOP_WORKSPACE_ROOT") {
			t.Errorf("up with store %s and workspace root %s: exit %d\n%s", c.store, c.root, code, errb.String())
		}
	}
}

// TestAgentsNeverGetTheLoopsSecrets: a session variable or an agents' git
// credential store holding the ledger's token or the envelope key is
// refused before anything starts, naming what holds it.
func TestAgentsNeverGetTheLoopsSecrets(t *testing.T) {
	const token = "ghp_ledgerToken0123456789abcdefABCDEF"
	creds := filepath.Join(t.TempDir(), "agent-git-credentials")
	if err := os.WriteFile(creds, []byte("https://x-access-token:"+token+"@github.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		env  config.Env
		says []string
	}{
		{"a session variable holding the ledger's token", config.Env{"LOOP_GITHUB_TOKEN": token, "GH_TOKEN": token, "LOOP_SESSION_ENV": "GH_TOKEN"},
			[]string{"LOOP_SESSION_ENV", "GH_TOKEN", "LOOP_GITHUB_TOKEN"}},
		{"a session variable holding the envelope key", config.Env{"LOOP_ENVELOPE_KEY": strings.Repeat("k", 40), "SIGNING": strings.Repeat("k", 40), "LOOP_SESSION_ENV": "SIGNING"},
			[]string{"SIGNING", "LOOP_ENVELOPE_KEY"}},
		{"the agents' git credentials holding the ledger's token", config.Env{"LOOP_GITHUB_TOKEN": token, "LOOP_AGENT_GIT_CREDENTIALS": creds},
			[]string{"LOOP_AGENT_GIT_CREDENTIALS", "LOOP_GITHUB_TOKEN"}},
	} {
		var out, errb bytes.Buffer
		c.env["LOOP_STORE_DIR"] = t.TempDir()
		c.env["LOOP_NATS_LISTEN"], c.env["LOOP_ADMIN_ADDR"] = "127.0.0.1:0", "127.0.0.1:0"
		code := run(context.Background(), []string{"up"}, c.env, &out, &errb)
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", c.name, code, errb.String())
		}
		for _, s := range c.says {
			if !strings.Contains(errb.String(), s) {
				t.Errorf("%s: the refusal does not name %s:\n%s", c.name, s, errb.String())
			}
		}
		if strings.Contains(errb.String(), token) || strings.Contains(errb.String(), strings.Repeat("k", 40)) {
			t.Errorf("%s: the refusal carries the secret", c.name)
		}
	}
}
