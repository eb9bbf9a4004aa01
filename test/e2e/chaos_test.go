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
)

// Chaos schedule. Senders pace each work item's events so that the flow
// lasts about chaosFlow; every chaosKillMin..chaosKillMax while events flow
// a random service process is SIGKILLed (its supervisor starts it again at
// once) or — a replica of a consuming service, one time in two — stopped
// cleanly and kept down until the next step, as a scale-down and scale-up
// would; nats-server is killed and restarted once, half-way. Each consuming
// service runs chaosReplicas replicas, which share its partitions, so the
// partitions move at every step.
const (
	chaosReplicas  = 3
	chaosWorkItems = 50
	chaosEvents    = 1000 // besides the 50 start comments
	chaosGitHubPct = 20   // share of GitHub comments; the rest are Slack replies
	chaosFlow      = 100 * time.Second
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
	if testing.Short() {
		t.Skip("chaos runs for minutes")
	}
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

	c := startCluster(t, clusterOptions{replicas: chaosReplicas})
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
	// events flow; kill nats-server once, half-way.
	var schedule []string
	natsAt := chaosFlow / 2
	natsDone := false
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
		if !natsDone && time.Since(flowStart) >= natsAt {
			natsDone = true
			c.nats.kill(true)
			time.Sleep(chaosNATSDown)
			if err := c.nats.release(); err != nil {
				t.Fatal(err)
			}
			c.waitNATS(30 * time.Second)
			schedule = append(schedule, fmt.Sprintf("%s nats-server (down %s)", at, chaosNATSDown))
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
	if !natsDone {
		t.Errorf("the flow ended before nats-server was restarted")
	}
	t.Logf("flow: %d events sent in %s; %d service processes SIGKILLed, %d replicas stopped cleanly and started again, nats-server restarted once:\n  %s",
		len(sent), flow.Round(time.Second), kills, pauses, strings.Join(schedule, "\n  "))

	all := append(append([]sentEvent(nil), setup...), sent...)
	settleStart := time.Now()
	o, gh, sl, pr := c.settle(all, chaosSettle)
	t.Logf("settled in %s", time.Since(settleStart).Round(time.Second))

	var restarts []string
	for _, p := range append([]*proc{c.nats}, c.procs...) {
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
	shares, sharesErr := c.settledPartitions(chaosReplicas, 2*time.Minute)
	report := fmt.Sprintf("CHAOS RESULT (seed %d): sent %d events (%d GitHub comments, %d Slack replies) + %d start comments over %d work items\n%s\n%s\n%s\nprompts out of order: %d work items\nprocesses: %s\npartitions at the end (the-loop partitions):\n%s",
		seed, len(sent), nGitHub, len(sent)-nGitHub, len(setup), len(c.issues), gh, sl, pr, len(bad), strings.Join(restarts, "; "), shares)
	t.Log(report)
	fmt.Println(report)
	if dlq := c.dlqList(); dlq != "" {
		t.Logf("the-loop dlq list:\n%s", dlq)
	}

	for _, x := range []tally{gh, sl, pr} {
		if x.lost != 0 || x.duplicate != 0 {
			t.Errorf("%s: %d lost, %d duplicated", x.name, x.lost, x.duplicate)
		}
	}
	if len(bad) > 0 {
		t.Errorf("prompts out of order: %s", strings.Join(bad, "; "))
	}
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

// cliEnv is the environment of an operator verb run against the cluster
// as identity ("observer" or "operator").
func (c *cluster) cliEnv(identity string) []string {
	env := append(baseEnv(), fmt.Sprintf("LOOP_NATS_URL=nats://127.0.0.1:%d", c.natsPort))
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
