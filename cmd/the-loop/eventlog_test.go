package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
)

// follower is `the-loop events --follow --json` from the first record of
// loop.log, as an operator runs it, collecting what it prints.
type follower struct {
	out, errb syncBuffer
	cancel    context.CancelFunc
	done      chan int
}

func follow(t *testing.T, env config.Env) *follower {
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cancel: cancel, done: make(chan int, 1)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("events --follow printed:\n%s\n%s", f.out.String(), f.errb.String())
		}
	})
	go func() {
		f.done <- run(ctx, []string{"events", "--follow", "--last", "1000000", "--json"}, env, &f.out, &f.errb)
	}()
	return f
}

// records are the records printed so far.
func (f *follower) records(t *testing.T) []eventlog.Record {
	t.Helper()
	var out []eventlog.Record
	for _, line := range strings.Split(f.out.String(), "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		var r eventlog.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			continue // a line still being written
		}
		out = append(out, r)
	}
	return out
}

// wait waits for a record called name from source ("" any) whose fields
// hold match, and returns it.
func (f *follower) wait(t *testing.T, name, source string, match map[string]string) eventlog.Record {
	t.Helper()
	var found eventlog.Record
	testkit.WaitWithin(t, 60*time.Second, name+" on loop.log", func() bool {
	next:
		for _, r := range f.records(t) {
			if r.Event != name || source != "" && r.Source != source {
				continue
			}
			for k, v := range match {
				if s, _ := r.Fields[k].(string); s != v {
					continue next
				}
			}
			found = r
			return true
		}
		return false
	})
	return found
}

func (f *follower) stop(t *testing.T) {
	t.Helper()
	f.cancel()
	if code := <-f.done; code != 0 {
		t.Errorf("events --follow exited %d: %s", code, f.errb.String())
	}
}

// TestHostRecordsReadBack drives the event-log types a host writes rather
// than a service — a process's services starting and stopping, its config
// watcher's reloads, and the operator's replay of a dead letter — through
// `the-loop up` and the operator verbs, and reads each back from loop.log
// with `the-loop events --follow` (test/inproc TestEveryLogTypeIsReadBack
// reads back the services' own).
func TestHostRecordsReadBack(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the-loop up")
	}
	dir := t.TempDir()
	store, cfgPath := filepath.Join(dir, "store"), filepath.Join(dir, "the-loop.yaml")
	if err := os.WriteFile(cfgPath, []byte("version: \"0.7.0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	upEnv := config.Env{"LOOP_NATS_LISTEN": "127.0.0.1:0", "LOOP_ADMIN_ADDR": "127.0.0.1:0", "LOOP_SESSION_ADDR": "127.0.0.1:0",
		"LOOP_STORE_DIR": store, "LOOP_DISPATCHER_WORKDIR": t.TempDir(), "LOOP_CONFIG": cfgPath, "LOOP_DISPATCHER_RUNNER": "process"}
	up := func() (url string, stop func()) {
		ctx, cancel := context.WithCancel(context.Background())
		var out, errb syncBuffer
		done := make(chan int, 1)
		go func() { done <- run(ctx, []string{"up"}, upEnv, &out, &errb) }()
		var m []string
		testkit.WaitWithin(t, 60*time.Second, "up running its services", func() bool {
			m = regexp.MustCompile(`NATS on (nats://\S+)`).FindStringSubmatch(out.String())
			return m != nil && strings.Contains(out.String(), "the-loop up: running")
		})
		return m[1], func() {
			cancel()
			if code := <-done; code != 0 {
				t.Fatalf("up exited %d\n%s", code, errb.String())
			}
		}
	}
	as := func(url, identity string) config.Env {
		return config.Env{"LOOP_NATS_URL": url, "LOOP_NATS_NKEY_FILE": filepath.Join(store, "nats", identity+".nk")}
	}

	url, stop := up()
	f := follow(t, as(url, bus.IdentityObserver))
	for _, svc := range serviceNames() {
		f.wait(t, "service.started", svc, nil)
	}

	// A message on the inbox that is no event goes to the DLQ (the
	// ledger-writer's bus.dead_lettered); the operator replays it.
	conn, err := bus.Connect(context.Background(), bus.Options{URL: url, Name: "host-records-test", Identity: bus.IdentityOperator,
		Credentials: bus.Credentials{SeedFile: filepath.Join(store, "nats", bus.IdentityOperator+".nk")}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	_, err = conn.Publish(ctx, bus.Message{Subject: catalog.InboxSubject("github:octo/repo#7", catalog.WorkItemReply),
		Data: []byte("not an event"), MsgID: "slack:EvNotAnEvent"})
	cancel()
	conn.Close()
	if err != nil {
		t.Fatal(err)
	}
	dl := f.wait(t, "bus.dead_lettered", "ledger-writer", map[string]string{"event_id": "slack:EvNotAnEvent", "reason": "permanent"})
	seq, _ := dl.Fields["stream_seq"].(float64)
	code, list, stderr := runVerb(t, as(url, bus.IdentityObserver), "dlq", "list")
	m := regexp.MustCompile(`(?m)^(\d+)\s`).FindStringSubmatch(list)
	if code != 0 || m == nil {
		t.Fatalf("dlq list: %d %s %s", code, list, stderr)
	}
	if code, out, stderr := runVerb(t, as(url, bus.IdentityOperator), "dlq", "replay", m[1]); code != 0 {
		t.Fatalf("dlq replay: %d %s %s", code, out, stderr)
	}
	f.wait(t, "bus.replayed", cliSource, map[string]string{"replay_of": "slack:EvNotAnEvent", "event_id": "slack:EvNotAnEvent:replay:" + m[1]})
	if seq == 0 {
		t.Errorf("bus.dead_lettered names no stream sequence: %v", dl.Fields)
	}

	// An edit of the operator file, then a broken one.
	if err := os.WriteFile(cfgPath, []byte("version: \"0.7.0\"\n# edited\nrouting:\n  authorizedUsers: [alice]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.wait(t, "config.reloaded", "", nil)
	if err := os.WriteFile(cfgPath, []byte("version: [broken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.wait(t, "config.reload_failed", "", nil)
	f.stop(t)
	stop()
	if err := os.WriteFile(cfgPath, []byte("version: \"0.7.0\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The stops of the first run are in the log the second run reads.
	url, stop = up()
	f = follow(t, as(url, bus.IdentityObserver))
	for _, svc := range serviceNames() {
		f.wait(t, "service.stopped", svc, nil)
	}
	f.stop(t)
	stop()
}
