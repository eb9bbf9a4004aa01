package dispatcher

import (
	"context"
	"fmt"
	"github.com/the-loop/bus/services/dispatcher/internal/workspace"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/httpserver"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/dispatcher/internal/tmux"
)

// fleet is dispatcher replicas on one JetStream server, each its own host:
// its own bus connection, tmux server, session endpoint and event log.
type fleet struct {
	tb    testing.TB
	srv   *bustest.Server
	pub   *bus.Conn
	cfg   atomic.Pointer[config.Config]
	dir   string // the stand-in's records, all hosts
	parts int
	store *sessions.Store
}

// replica is one running dispatcher.
type replica struct {
	host   string
	socket string
	svc    *Service
	recs   *eventlog.Recorder
	stop   func()
}

func newFleet(tb testing.TB, parts int, sopts bustest.Options) *fleet {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs JetStream and tmux")
	}
	tb.Setenv("HOME", tb.TempDir()) // the sessions' HOME, never the user's
	f := &fleet{tb: tb, srv: bustest.StartServer(tb, sopts), dir: tb.TempDir(), parts: parts}
	f.srv.Provision(tb, bustest.FastTopology(parts))
	f.pub = f.srv.Connect(tb, "dispatcher-fleet-publisher")
	cfg := config.Default()
	dir, problems := identity.New([]identity.Person{{GitHub: alice, Slack: "U0ALICE"}})
	if len(problems) > 0 {
		tb.Fatal(problems)
	}
	cfg.Routing.AuthorizedUsers = dir
	f.cfg.Store(cfg)
	store, err := sessions.Open(context.Background(), f.pub)
	if err != nil {
		tb.Fatal(err)
	}
	f.store = store
	return f
}

// start runs a dispatcher replica on host until the test ends (or stop).
func (f *fleet) start(host string, concurrency int, mod func(*Settings)) *replica {
	f.tb.Helper()
	socket := tmuxtest.Dir(f.tb)
	set := Settings{
		Harness: standIn(f.tb, f.dir), TmuxDir: socket, Host: host, Workdir: f.tb.TempDir(),
		Workspace:   workspace.Config{Strategy: workspace.Dir},
		ResumeProbe: -1, RecheckEvery: 50 * time.Millisecond,
	}
	if mod != nil {
		mod(&set)
	}
	conn := f.srv.Connect(f.tb, "dispatcher-"+host)
	recs := &eventlog.Recorder{}
	log := slog.New(slog.NewJSONHandler(&testkit.SyncBuffer{}, nil))
	deps := service.Deps{
		Conn: conn, Log: log, Events: eventlog.New(Name, log, recs), Registry: prometheus.NewRegistry(),
		Ready: httpserver.NewReadiness(), Partitions: f.parts, Concurrency: concurrency, Config: f.cfg.Load,
	}
	svc, err := New(deps, Config{}, WithSettings(set))
	if err != nil {
		f.tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	var once sync.Once
	r := &replica{host: host, socket: socket, svc: svc, recs: recs}
	r.stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					f.tb.Errorf("%s: Run: %v", host, err)
				}
			case <-time.After(60 * time.Second):
				f.tb.Errorf("%s: Run did not return", host)
			}
		})
	}
	f.tb.Cleanup(r.stop)
	return r
}

// settled waits until the live replicas named own every partition once and
// work exactly what they own.
func (f *fleet) settled(hosts ...string) map[int]string {
	f.tb.Helper()
	var owner map[int]string
	testkit.WaitFor(f.tb, fmt.Sprintf("the partitions shared by %v", hosts), func() bool {
		ms, err := f.pub.Members(context.Background(), Name)
		if err != nil || !bustest.Shared(ms, f.parts, len(hosts)) {
			return false
		}
		owner = map[int]string{}
		for _, m := range ms {
			if !slices.Contains(hosts, m.Name) {
				return false
			}
			for _, p := range m.Working {
				if _, dup := owner[p]; dup {
					return false
				}
				owner[p] = m.Name
			}
		}
		return len(owner) == f.parts
	})
	return owner
}

// publish puts ev on the event stream as the ledger-writer does.
func (f *fleet) publish(ev *loopv1.Event) error {
	m, err := envelope.ToMessage(ev, envelope.Events, "")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = f.pub.Publish(ctx, bus.FromEnvelope(m))
	return err
}

// startItems arms and starts each work item with alice's start comment and
// waits until every one has a live session whose harness booted.
func (f *fleet) startItems(refs []string) {
	f.tb.Helper()
	for i, ref := range refs {
		for _, ev := range []*loopv1.Event{labeled(ref, fmt.Sprintf("lab-%d", i)), comment(ref, int64(1000+i), alice, "the-loop start")} {
			if err := f.publish(ev); err != nil {
				f.tb.Fatal(err)
			}
		}
	}
	testkit.WaitFor(f.tb, fmt.Sprintf("%d sessions booted", len(refs)), func() bool {
		boots := map[string]bool{}
		for _, b := range tmuxtest.Boots(f.tb, f.dir) {
			boots[b.SessionID] = true
		}
		for _, ref := range refs {
			r, _, err := f.store.Get(context.Background(), ref)
			if err != nil || !r.Session.Live() || !boots[r.Session.HarnessSessionID] {
				return false
			}
		}
		return true
	})
}

func partitionOf(ref string, n int) int { return bus.PartitionOf(catalog.SubjectKey(ref), n) }

// TestTwoReplicasRunSessionsOnBoth: two dispatcher replicas share the
// partitions, and ten active work items (#1–#10, which land in all four
// partitions) have their sessions on both hosts — each on the host that
// owns its partition. When one replica stops, its
// partitions move to the other, which takes each session over on the work
// item's next event and runs it from then on.
func TestTwoReplicasRunSessionsOnBoth(t *testing.T) {
	const parts = 4
	f := newFleet(t, parts, bustest.Options{})
	a := f.start("host-a", 0, nil)
	b := f.start("host-b", 0, nil)
	owner := f.settled("host-a", "host-b")

	var refs []string
	for i := 1; i <= 10; i++ {
		refs = append(refs, fmt.Sprintf("github:octo/repo#%d", i))
	}
	covered := map[int]bool{}
	for _, ref := range refs {
		covered[partitionOf(ref, parts)] = true
	}
	if len(covered) != parts {
		t.Fatalf("the work items cover partitions %v, want all %d", covered, parts)
	}
	f.startItems(refs)

	onHost := map[string][]string{}
	for _, ref := range refs {
		r, _, err := f.store.Get(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		host := r.Session.Host
		if want := owner[partitionOf(ref, parts)]; host != want {
			t.Errorf("%s: session on %s, but its partition is owned by %s", ref, host, want)
		}
		sock := map[string]string{"host-a": a.socket, "host-b": b.socket}[host]
		if st := (&tmux.Server{Path: filepath.Join(sock, r.Session.TmuxTarget)}).Probe(context.Background(), r.Session.TmuxTarget); st != tmux.Live {
			t.Errorf("%s: tmux session on %s is %v, want live", ref, host, st)
		}
		onHost[host] = append(onHost[host], ref)
	}
	// Each host owns two of the four partitions, and the ten work items
	// are in all four: both hosts run sessions.
	if len(onHost["host-a"]) == 0 || len(onHost["host-b"]) == 0 {
		t.Fatalf("sessions per host: %v; want sessions on both", onHost)
	}
	t.Logf("sessions per host: host-a %d, host-b %d", len(onHost["host-a"]), len(onHost["host-b"]))

	// host-b stops: host-a owns every partition at once and takes b's
	// sessions over as their events arrive.
	b.stop()
	f.settled("host-a")
	moved := onHost["host-b"]
	for i, ref := range moved {
		if err := f.publish(comment(ref, int64(2000+i), alice, "after the move")); err != nil {
			t.Fatal(err)
		}
	}
	testkit.WaitFor(t, "host-b's sessions taken over by host-a", func() bool {
		for _, ref := range moved {
			r, _, err := f.store.Get(context.Background(), ref)
			if err != nil || r.Session.Host != "host-a" || !slices.Contains(r.Session.Delivered, fmt.Sprintf("gh:issue-comment:%d", 2000+slices.Index(moved, ref))) {
				return false
			}
		}
		return true
	})
	for _, ref := range moved {
		if got := a.recs.Find("session.taken_over", map[string]any{"work_item": ref, "from_host": "host-b"}); len(got) != 1 {
			t.Errorf("%s: %d session.taken_over records on host-a, want 1", ref, len(got))
		}
		if st := (&tmux.Server{Path: filepath.Join(a.socket, tmux.Target(ref))}).Probe(context.Background(), tmux.Target(ref)); st != tmux.Live {
			t.Errorf("%s: not live on host-a after the takeover (%v)", ref, st)
		}
	}
}

// Replica scaling against a slow terminal: the same shape as the
// ledger-writer's BenchmarkLedgerReplicas (see there for why these numbers).
const (
	scalePartitions  = 12 // divides evenly among 1–4 replicas
	scaleConcurrency = 1
	scalePasteDelay  = 2 * time.Second // every tmux client that pastes
)

// BenchmarkDispatcherReplicas measures dispatcher throughput as replicas
// grow from 1 to 4, each its own host (tmux server), against slow
// terminals: every paste into a session (the tmux command sequence that
// pastes a prompt and submits it) takes 2 s more, as on a loaded host.
// Twelve work items, one in each of 12 partitions, have live sessions
// (started off the clock); then b.N comments from an authorized person are
// published, and the clock stops when every one has been typed into its
// session. Each replica types one prompt at a time (LOOP_CONCURRENCY 1)
// over the partitions it owns, so replicas add throughput up to twelve. It reports events/s, x-1-replica
// and max-share, and every round fails unless each session received its
// work item's comments once each, in publish order.
//
// Run it with -benchtime=24x (make bench does): two comments per work
// item. The delay is long and the concurrency low because what a prompt
// costs besides the wait — tmux commands, the stand-in harness, the
// registry — is CPU, and on a shared 2-core machine the CPU, not the
// terminals, would otherwise bound every replica count alike.
func BenchmarkDispatcherReplicas(b *testing.B) {
	bustest.ReplicaScaling(b, func(b *testing.B) int { return b.N }, dispatcherRound)
}

func dispatcherRound(b *testing.B, n int) (rate, share float64) {
	b.StopTimer()
	// The server syncs on its interval, as in BenchmarkLedgerReplicas.
	f := newFleet(b, scalePartitions, bustest.Options{InProcessOnly: true, SyncInterval: 2 * time.Minute})
	slow := filepath.Join(b.TempDir(), "tmux")
	script := fmt.Sprintf("#!/bin/sh\ncase \" $* \" in *\" paste-buffer \"*) sleep %.3f ;; esac\nexec tmux \"$@\"\n", scalePasteDelay.Seconds())
	if err := os.WriteFile(slow, []byte(script), 0o700); err != nil {
		b.Fatal(err)
	}
	var hosts []string
	var reps []*replica
	for r := range n {
		host := fmt.Sprintf("host-%d", r)
		hosts = append(hosts, host)
		reps = append(reps, f.start(host, scaleConcurrency, func(s *Settings) { s.TmuxBinary = slow }))
	}
	f.settled(hosts...)
	ref := func(i int) string { return fmt.Sprintf("github:octo/repo#%d", i) }
	var refs []string
	for _, i := range bustest.Spread(scalePartitions, 1, ref) {
		refs = append(refs, ref(i))
	}
	f.startItems(refs)
	const base = 100000
	// handled counts, per replica, the measured comments it typed.
	handled := func() []int {
		out := make([]int, n)
		for r, rep := range reps {
			for _, rec := range rep.recs.Find("dispatch.succeeded", nil) {
				id, _ := rec.Fields["event_id"].(string)
				if n, err := strconv.Atoi(strings.TrimPrefix(id, "gh:issue-comment:")); err == nil && n >= base {
					out[r]++
				}
			}
		}
		return out
	}

	b.StartTimer()
	start := time.Now()
	if err := bustest.PublishEach(b.N, len(refs), func(i, k int) error {
		return f.publish(comment(refs[k], int64(base+i), alice, "Comment "+strconv.Itoa(i)))
	}); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for sum(handled()) < b.N {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d events typed after 10m", sum(handled()), b.N)
		}
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start)
	b.StopTimer()

	// Every session received its work item's comments once each, in order.
	comment := regexp.MustCompile(`Comment (\d+)`)
	sessionOf := map[string]string{}
	for _, r := range refs {
		rec, _, err := f.store.Get(context.Background(), r)
		if err != nil {
			b.Fatal(err)
		}
		sessionOf[rec.Session.HarnessSessionID] = r
	}
	last := map[string]int{}
	got := 0
	for _, in := range tmuxtest.Inputs(b, f.dir) {
		m := comment.FindStringSubmatch(in.Text)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		r := sessionOf[in.SessionID]
		if want := refs[i%len(refs)]; r != want {
			b.Fatalf("comment %d of %s typed into the session of %s", i, want, r)
		}
		if prev, ok := last[r]; ok && i <= prev {
			b.Fatalf("%s: comment %d typed after %d (out of order or twice)", r, i, prev)
		}
		last[r] = i
		got++
	}
	if got != b.N {
		b.Fatalf("%d comments typed, want %d", got, b.N)
	}
	return float64(b.N) / elapsed.Seconds(), float64(slices.Max(handled())) / float64(b.N)
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}
