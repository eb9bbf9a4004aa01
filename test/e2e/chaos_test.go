//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
)

// Chaos schedule. Senders pace each work item's events so that the flow
// lasts about the plan's flow; every chaosKillMin..chaosKillMax while events
// flow a random service process is SIGKILLed (its supervisor starts it again
// at once) or — a replica of a consuming service, one time in two — stopped
// cleanly and kept down until the next step, as a scale-down and scale-up
// would; and NATS is killed and restarted: the single server once, half-way,
// or in cluster mode the server leading LOOP_INBOX, twice. Each consuming
// service runs chaosReplicas replicas, which share its partitions, so the
// partitions move at every step.
const (
	chaosReplicas  = 3
	chaosGitHubPct = 20 // share of GitHub comments; the rest are Slack replies
	chaosKillMin   = 3 * time.Second
	chaosKillMax   = 6 * time.Second
	chaosNATSDown  = 3 * time.Second
	chaosSettle    = 6 * time.Minute
)

// TestChaos sends 1,000 events across 50 work items — GitHub comments by
// Alice (each: one Slack message, one prompt) and Slack replies in the work
// items' threads (each: one GitHub mirror comment, one prompt) — while a
// random service process is SIGKILLed and restarted, or a replica stopped
// cleanly and started again, every few seconds, and nats-server is
// SIGKILLed and restarted once. At the end every event must
// be on GitHub exactly once, in Slack exactly once (GitHub comments only),
// and delivered to its session exactly once and in order per work item.
// The counts are printed whatever the outcome, and so is how the replicas
// share the partitions once they have settled (`the-loop partitions`):
// every partition worked by exactly one of the live replicas.
//
// E2E_CHAOS_SEED fixes the schedule (the seed is printed).
func TestChaos(t *testing.T) {
	runChaos(t, chaosPlan{workItems: 50, events: 1000, flow: 100 * time.Second, natsKills: 1})
}

// TestChaosCluster is the chaos run on a three-node JetStream cluster:
// three nats-server processes with routes on loopback and authorization on
// (the same auth.conf; the routes' credential from scripts/nats-routes.sh,
// and a stranger's route refused), every stream, consumer and bucket replicated on all
// three (LOOP_STREAM_REPLICAS=3), the services spread across the servers.
// Besides the service kills, the server leading LOOP_INBOX is SIGKILLed
// mid-run and restarted, twice. It reports lost, duplicated and reordered,
// and the longest stall: the longest time nothing new reached GitHub, Slack
// or a session while events were still owed.
func TestChaosCluster(t *testing.T) {
	runChaos(t, chaosPlan{workItems: 20, events: 400, flow: 80 * time.Second, natsKills: 2, natsNodes: 3})
}

// chaosPlan sizes one chaos run.
type chaosPlan struct {
	workItems, events int // events besides the start comments
	flow              time.Duration
	natsKills         int // NATS servers killed during the flow, evenly spaced
	natsNodes         int // 3: a JetStream cluster, whose stream leader is killed
}

func runChaos(t *testing.T, run chaosPlan) {
	if testing.Short() {
		t.Skip("chaos runs for minutes")
	}
	chaosWorkItems, chaosEvents, chaosFlow := run.workItems, run.events, run.flow
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("E2E_CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("E2E_CHAOS_SEED: %v", err)
		}
		seed = v
	}
	t.Logf("chaos seed %d (E2E_CHAOS_SEED=%d reproduces the schedule)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0x10095))

	c := startCluster(t, clusterOptions{replicas: chaosReplicas, natsNodes: run.natsNodes})
	c.addIssues(chaosWorkItems)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	began := time.Now()
	var setup []sentEvent
	threads := c.startWorkItems(ctx, &setup)
	t.Logf("setup: %d work items started (sessions booted, Slack threads bound) in %s", len(c.issues), time.Since(began).Round(time.Second))

	// The plan: events numbered 1..k per work item, in send order; which
	// channel each comes from is drawn from the seed.
	plan := map[int][]sentEvent{}
	for i := range chaosEvents {
		n := c.issues[i%len(c.issues)]
		k := tok{n, len(plan[n]) + 1}
		kd := viaSlack
		if rng.IntN(100) < chaosGitHubPct {
			kd = viaGitHub
		}
		plan[n] = append(plan[n], sentEvent{k, kd})
	}
	perItem := chaosEvents / len(c.issues)
	gap := chaosFlow / time.Duration(perItem)

	var (
		mu      sync.Mutex
		sent    []sentEvent
		sendErr error
		wg      sync.WaitGroup
	)
	flowStart := time.Now()
	for _, n := range c.issues {
		jitter := time.Duration(rng.Int64N(int64(gap)))
		evs := plan[n]
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(jitter)
			for _, e := range evs {
				var err error
				if e.kind == viaGitHub {
					err = c.githubComment(ctx, n, deliveryID(n, e.tok.n), fmt.Sprintf("Comment %d: %s", e.tok.n, tokenFor(n, e.tok.n)))
				} else {
					_, err = c.slackReply(ctx, threads[n], fmt.Sprintf("Reply %d: %s", e.tok.n, tokenFor(n, e.tok.n)))
				}
				mu.Lock()
				if err != nil {
					if sendErr == nil {
						sendErr = err
					}
					mu.Unlock()
					return
				}
				sent = append(sent, e)
				mu.Unlock()
				time.Sleep(gap)
			}
		}()
	}
	flowDone := make(chan struct{})
	go func() { wg.Wait(); close(flowDone) }()

	// The chaos: kill a random service process every few seconds while
	// events flow; kill NATS run.natsKills times, evenly spaced.
	var schedule []string
	natsDone := 0
	kills, pauses := 0, 0
	var round []*proc
	var paused *proc // stopped cleanly at the last step, started at this one
	resume := func() {
		if paused == nil {
			return
		}
		if err := paused.release(); err != nil {
			t.Fatal(err)
		}
		schedule = append(schedule, fmt.Sprintf("%s %s started again", time.Since(flowStart).Round(100*time.Millisecond), paused.name))
		paused = nil
	}
	stall := c.watchStall(time.Second)
chaos:
	for {
		wait := chaosKillMin + time.Duration(rng.Int64N(int64(chaosKillMax-chaosKillMin)))
		select {
		case <-flowDone:
			break chaos
		case <-time.After(wait):
		}
		resume()
		at := time.Since(flowStart).Round(100 * time.Millisecond)
		if natsDone < run.natsKills && time.Since(flowStart) >= chaosFlow*time.Duration(natsDone+1)/time.Duration(run.natsKills+1) {
			natsDone++
			victim, what := c.nats, "nats-server"
			if len(c.natsProcs) > 1 {
				victim = c.streamLeader(bus.StreamInbox)
				what = victim.name + ", leader of " + bus.StreamInbox
			}
			victim.kill(true)
			time.Sleep(chaosNATSDown)
			if err := victim.release(); err != nil {
				t.Fatal(err)
			}
			c.waitNATS(60 * time.Second)
			schedule = append(schedule, fmt.Sprintf("%s %s (down %s)", at, what, chaosNATSDown))
			continue
		}
		// Random order, every process once per round: each service,
		// every replica included, is killed a few times per run.
		if len(round) == 0 {
			round = append([]*proc(nil), c.procs...)
			rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		p := round[0]
		round = round[1:]
		if consuming(p.name) && rng.IntN(2) == 0 {
			// A scale-down: the replica leaves, the others take its
			// partitions at once; it joins again at the next step.
			p.pause(60 * time.Second)
			paused = p
			pauses++
			schedule = append(schedule, fmt.Sprintf("%s %s stopped cleanly", at, p.name))
			continue
		}
		p.kill(false)
		kills++
		schedule = append(schedule, fmt.Sprintf("%s %s SIGKILLed", at, p.name))
	}
	resume()
	flow := time.Since(flowStart)
	if sendErr != nil {
		t.Fatalf("sending: %v", sendErr)
	}
	if natsDone < run.natsKills {
		t.Errorf("the flow ended after %d of %d NATS kills", natsDone, run.natsKills)
	}
	t.Logf("flow: %d events sent in %s; %d service processes SIGKILLed, %d replicas stopped cleanly and started again, NATS killed and restarted %d times:\n  %s",
		len(sent), flow.Round(time.Second), kills, pauses, natsDone, strings.Join(schedule, "\n  "))

	all := append(append([]sentEvent(nil), setup...), sent...)
	settleStart := time.Now()
	stall.expect(all)
	o, gh, sl, pr := c.settle(all, chaosSettle)
	t.Logf("settled in %s", time.Since(settleStart).Round(time.Second))
	longest := stall.stop()

	var restarts []string
	for _, p := range append(append([]*proc(nil), c.natsProcs...), c.procs...) {
		p.mu.Lock()
		restarts = append(restarts, fmt.Sprintf("%s: %d starts, %d SIGKILLs, %d clean stops", p.name, p.starts, p.kills, p.pauses))
		p.mu.Unlock()
	}
	bad := outOfOrder(o.order)
	nGitHub := 0
	for _, e := range sent {
		if e.kind == viaGitHub {
			nGitHub++
		}
	}
	mode := "one NATS server"
	if len(c.natsProcs) > 1 {
		mode = fmt.Sprintf("a %d-node JetStream cluster, R%d", len(c.natsProcs), len(c.natsProcs))
	}
	shares, sharesErr := c.settledPartitions(chaosReplicas, 2*time.Minute)
	report := fmt.Sprintf("CHAOS RESULT (seed %d, %s): sent %d events (%d GitHub comments, %d Slack replies) + %d start comments over %d work items\n%s\n%s\n%s\nprompts out of order: %d work items\nlongest stall: %s (nothing new reached GitHub, Slack or a session while events were owed)\nprocesses: %s\npartitions at the end (the-loop partitions):\n%s",
		seed, mode, len(sent), nGitHub, len(sent)-nGitHub, len(setup), len(c.issues), gh, sl, pr, len(bad), longest.Round(100*time.Millisecond), strings.Join(restarts, "; "), shares)
	t.Log(report)
	fmt.Println(report)
	if dlq := c.dlqList(); dlq != "" {
		t.Logf("the-loop dlq list:\n%s", dlq)
	}

	checkExactlyOnce(t, bad, gh, sl, pr)
	if sharesErr != nil {
		t.Error(sharesErr)
	}
	c.stop()
}

// shareColumn is a replica's SHARE in `the-loop partitions`: "6/16".
var shareColumn = regexp.MustCompile(` (\d+)/(\d+) `)

// evenShares reports whether every replica listed in out, a `the-loop
// partitions` output, works ⌊n/replicas⌋ or ⌈n/replicas⌉ of n partitions.
func evenShares(out string, replicas int) bool {
	rows := 0
	for _, m := range shareColumn.FindAllStringSubmatch(out, -1) {
		w, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		if w < n/replicas || w > (n+replicas-1)/replicas {
			return false
		}
		rows++
	}
	return rows == 3*replicas
}

// consuming reports whether the process named name is a replica of a
// service that consumes partitions.
func consuming(name string) bool {
	for _, svc := range []string{"ledger-writer-", "slack-renderer-", "dispatcher-"} {
		if strings.HasPrefix(name, svc) {
			return true
		}
	}
	return false
}

// settledPartitions waits until `the-loop partitions` shows each consuming
// service with replicas live replicas, each partition worked by exactly one
// of them and each replica working its even share (the records of killed
// processes have expired, the handovers are done), and returns that output;
// an error, with the last output, if that does not happen within d.
func (c *cluster) settledPartitions(replicas int, d time.Duration) (string, error) {
	loop, _ := binaries(c.t)
	deadline := time.Now().Add(d)
	for {
		cmd := exec.Command(loop, "partitions")
		cmd.Env = c.cliEnv("observer")
		b, err := cmd.CombinedOutput()
		out := strings.TrimSpace(string(b))
		settled := err == nil && strings.Count(out, fmt.Sprintf(" %d replica(s)", replicas)) == 3 &&
			!strings.Contains(out, "worked by no replica") && !strings.Contains(out, "worked by two replicas") &&
			evenShares(out, replicas)
		if settled {
			return out, nil
		}
		if time.Now().After(deadline) {
			return out, fmt.Errorf("the partitions were not shared by %d live replicas of each consuming service after %s (exit %v):\n%s", replicas, d, err, out)
		}
		time.Sleep(time.Second)
	}
}

// streamLeader is the nats-server process leading stream, as the cluster's
// monitoring endpoint reports it.
func (c *cluster) streamLeader(stream string) *proc {
	c.t.Helper()
	var leader string
	if !testkit.Poll(30*time.Second, func() bool {
		for _, mon := range c.natsMon {
			if leader = monitoredLeader(c.client, fmt.Sprintf("127.0.0.1:%d", mon), stream); leader != "" {
				return true
			}
		}
		return false
	}) {
		c.t.Fatalf("no server reports a leader of %s", stream)
	}
	for _, p := range c.natsProcs {
		if p.name == leader {
			return p
		}
	}
	c.t.Fatalf("the leader of %s is %q, not one of this cluster's servers", stream, leader)
	return nil
}

// stallWatch measures the longest stall of a run: the longest time in which
// nothing new reached GitHub, Slack or a session while events were owed.
type stallWatch struct {
	c       *cluster
	mu      sync.Mutex
	want    []sentEvent // once known; until then every change counts
	longest time.Duration
	done    chan struct{}
	stopped chan struct{}
}

// watchStall starts polling what the outside world holds every period.
func (c *cluster) watchStall(period time.Duration) *stallWatch {
	w := &stallWatch{c: c, done: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(w.stopped)
		last, since := "", time.Now()
		for {
			select {
			case <-w.done:
				return
			case <-time.After(period):
			}
			o := c.observe()
			now := fmt.Sprint(len(o.github), len(o.slack), len(o.prompts), sum(o.github), sum(o.slack), sum(o.prompts))
			w.mu.Lock()
			owed := true
			if w.want != nil {
				gh, sl, pr := expectations(w.want)
				owed = count("", gh, o.github).lost+count("", sl, o.slack).lost+count("", pr, o.prompts).lost > 0
			}
			if now != last || !owed {
				last, since = now, time.Now()
			} else if d := time.Since(since); d > w.longest {
				w.longest = d
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// expect tells the watch every event sent: once all are delivered, waiting
// is no stall.
func (w *stallWatch) expect(sent []sentEvent) {
	w.mu.Lock()
	w.want = sent
	w.mu.Unlock()
}

func (w *stallWatch) stop() time.Duration {
	close(w.done)
	<-w.stopped
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.longest
}

func sum(m map[tok]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// cliEnv is the environment of an operator verb run against the cluster
// as identity ("observer" or "operator").
func (c *cluster) cliEnv(identity string) []string {
	env := append(baseEnv(), "LOOP_NATS_URL="+c.natsURLs(0))
	if c.auth != "" {
		env = append(env, "LOOP_NATS_NKEY_FILE="+c.seed(identity))
	}
	return env
}

// dlqList runs `the-loop dlq list` against the cluster: what, if anything,
// was dead-lettered (printed to explain a loss).
func (c *cluster) dlqList() string {
	loop, _ := binaries(c.t)
	cmd := exec.Command(loop, "dlq", "list")
	cmd.Env = c.cliEnv("observer")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(dlq list: %v) %s", err, out)
	}
	return strings.TrimSpace(string(out))
}
