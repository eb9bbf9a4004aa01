//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/rawbench"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/sandbox"
)

// BenchmarkWebhookIntake measures GitHub webhook intake of `the-loop up` — the
// real binary, all five services on its embedded JetStream server (every
// write synced before its PubAck) — against a raw JetStream baseline on the
// same server in the same run (docs/decisions/054-webhook-intake-benchmark.md).
//
// The load is the shared GitHub examples of the five events ingress-github
// handles most (issue_comment, issues, pull_request, pull_request_review,
// pull_request_review_comment), each signed, under a fresh delivery id,
// Codertocat (their sender) authorized. Comment-derived events are keyed by
// the comment, so once a comment's file came round it is a duplicate event
// (200, nothing stored), as it would be from GitHub; the examples concern two
// work items, so the pipeline's work lands on two partitions.
//
//   - senders=N/up: deliveries from N concurrent senders, each waiting for
//     its answer (202 or 200) before the next; deliveries/s, and p50/p90/
//     p99-ms of one request.
//   - senders=N/raw: the same payloads published synchronously (PubAck) by
//     N concurrent publishers to a stream with LOOP_INBOX's configuration,
//     keyed by the same work items; the same metrics per publish.
//
// Rounds alternate between the two, each starting with the pipeline idle,
// so both see the same machine; a variant's figures are over all its rounds.
//
//   - sustained/up: signed deliveries at 80 % of the rate senders=8/up
//     reached, for 15 s, each sent on schedule; deliveries/s offered,
//     refused-pct (answered 503: intake fell behind), fanout-p50/p90/p99-ms
//     from sending a delivery to its event on loop.ev (ingress-github, the
//     inbox, the ledger-writer's fan-out), and the most messages each
//     service's consumers held at once (max-pending-<service>, summed over
//     its partitions, sampled every 100 ms; the log names the worst
//     partition).
//
//   - sustained/raw: the raw JetStream path of the same hops at the same
//     rate: an HTTP handler verifying the HMAC and publishing to a stream
//     configured as LOOP_INBOX (PubAck, then 202), and a consumer per
//     partition, one message in flight each, republishing to a stream
//     configured as LOOP_EVENTS (PubAck, then ack).
//
//   - items=200/senders=N/up and /raw: the same as senders=N, each example
//     made about one of 200 work items in turn (its issue or pull request
//     number rewritten, its comment or review a new one), as a team's
//     traffic spreads over its work items and every partition works.
//
//   - scale/up/busy=16 against scale/up/busy=1: the pipeline's events/s,
//     from sending to each event's arrival on loop.ev, 800 deliveries from
//     32 senders about 16 work items in 16 different partitions, against
//     the same about one work item; scale/raw/busy=N the same through the
//     raw hops, which shows what the store allows.
//
// The load is fixed (E2E_BENCHTIME does not size it). `make bench` prints
// each up variant as a ratio to its raw one. Alone:
//
//	go test -tags e2e -run '^$' -bench WebhookIntake -timeout 30m ./test/e2e/
func BenchmarkWebhookIntake(b *testing.B) {
	load := intakeLoad(b)
	up := startUp(b)
	nc := up.natsConn(b, "bench-intake")
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	rawIn := copyStream(b, js, "LOOP_INBOX", "BENCH_RAW_INBOX", "bench.in")
	rawEv := copyStream(b, js, "LOOP_EVENTS", "BENCH_RAW_EVENTS", "bench.ev")

	type result struct {
		n   int
		el  time.Duration
		lat []time.Duration
		acc int
	}
	results := map[string]*result{}
	seq := 0
	next := func() (intakeDelivery, string) {
		d := load[seq%len(load)]
		seq++
		return d, deliveryID(0x1a7a, seq)
	}
	upSend := func(ctx context.Context, d intakeDelivery, id string) (bool, error) {
		code, _, err := up.deliver(ctx, d, id)
		return code == http.StatusAccepted, err
	}
	rawSend := func(ctx context.Context, d intakeDelivery, id string) (bool, error) {
		_, err := js.Publish(ctx, rawSubject("bench.in", d), d.body, jetstream.WithMsgID(id))
		return err == nil, err
	}
	// A team's traffic: the same examples, each about one of 200 work
	// items in turn and a new comment or review each time.
	spreadSeq := 0
	nextSpread := func() (intakeDelivery, string) {
		d, id := next()
		spreadSeq++
		return spread(b, d, 1000+spreadSeq%spreadItems, spreadSeq), id
	}
	const rounds, perRound = 4, 500
	for r := range rounds {
		for _, cfg := range []struct {
			senders int
			items   string // "" for the examples' own two work items
		}{{1, ""}, {8, ""}, {1, "items=200/"}, {8, "items=200/"}} {
			senders := cfg.senders
			variants := []string{"up", "raw"}
			if r%2 == 1 {
				slices.Reverse(variants)
			}
			for _, v := range variants {
				up.waitIdle(b, js)
				send := upSend
				if v == "raw" {
					send = rawSend
				}
				gen := next
				if cfg.items != "" {
					gen = nextSpread
				}
				jobs := make([]intakeJob, perRound)
				for i := range jobs {
					jobs[i].d, jobs[i].id = gen()
				}
				el, lat, acc, err := runSenders(ctx, senders, jobs, send)
				if err != nil {
					b.Fatalf("%s%s, %d senders: %v", cfg.items, v, senders, err)
				}
				name := fmt.Sprintf("%ssenders=%d/%s", cfg.items, senders, v)
				res := results[name]
				if res == nil {
					res = &result{}
					results[name] = res
				}
				res.n += perRound
				res.el += el
				res.lat = append(res.lat, lat...)
				res.acc += acc
			}
		}
	}
	report := func(b *testing.B, prefix string, senders int) {
		b.Run(fmt.Sprintf("senders=%d", senders), func(b *testing.B) {
			for _, v := range []string{"up", "raw"} {
				res := results[fmt.Sprintf("%ssenders=%d/%s", prefix, senders, v)]
				b.Run(v, func(b *testing.B) {
					b.ReportMetric(float64(res.n)/res.el.Seconds(), "deliveries/s")
					b.ReportMetric(float64(res.el.Nanoseconds())/float64(res.n), "ns/op")
					reportLatency(b, "", res.lat)
					if v == "up" {
						b.ReportMetric(100*float64(res.acc)/float64(res.n), "accepted-pct")
					}
				})
			}
		})
	}
	for _, senders := range []int{1, 8} {
		report(b, "", senders)
	}
	b.Run(fmt.Sprintf("items=%d", spreadItems), func(b *testing.B) {
		for _, senders := range []int{1, 8} {
			report(b, fmt.Sprintf("items=%d/", spreadItems), senders)
		}
	})

	// Sustained: 80 % of what 8 senders reached.
	up8 := results["senders=8/up"]
	rate := 0.8 * float64(up8.n) / up8.el.Seconds()
	const sustainFor = 15 * time.Second
	watch := newIDWatch(b, nc, "loop.ev.>", "bench.ev.>")
	raw := startRawHops(b, js, rawIn, rawEv)
	type sustained struct {
		lat     []time.Duration
		offered float64
		refused float64 // answered 503: the intake did not keep up
		pending map[string]pendingMax
	}
	sus := map[string]sustained{}
	for _, v := range []string{"raw", "up"} {
		up.waitIdle(b, js)
		raw.waitIdle(b)
		var lats []time.Duration
		var mu sync.Mutex
		var sent, refused atomic.Int64
		sampler := startPendingSampler(js, v == "raw")
		offered, err := runPaced(ctx, rate, sustainFor, func(ctx context.Context) error {
			d, id := next()
			start := time.Now()
			sent.Add(1)
			var ids []string
			if v == "raw" {
				code, err := raw.deliver(ctx, d, id)
				if code == http.StatusServiceUnavailable {
					refused.Add(1)
					return nil
				}
				if err != nil {
					return err
				}
				ids = []string{id}
			} else {
				code, evs, err := up.deliver(ctx, d, id)
				if code == http.StatusServiceUnavailable {
					refused.Add(1)
					return nil
				}
				if err != nil {
					return err
				}
				if code != http.StatusAccepted {
					return nil // a duplicate event: nothing to fan out
				}
				ids = evs
			}
			for _, e := range ids {
				at, err := watch.wait(e, 2*time.Minute)
				if err != nil {
					return err
				}
				mu.Lock()
				lats = append(lats, at.Sub(start))
				mu.Unlock()
			}
			return nil
		})
		pend := sampler.stop()
		if err != nil {
			b.Fatalf("sustained %s: %v", v, err)
		}
		sus[v] = sustained{lat: lats, offered: offered, pending: pend, refused: 100 * float64(refused.Load()) / float64(max(sent.Load(), 1))}
	}
	b.Run("sustained", func(b *testing.B) {
		for _, v := range []string{"up", "raw"} {
			s := sus[v]
			b.Run(v, func(b *testing.B) {
				b.ReportMetric(s.offered, "deliveries/s")
				b.ReportMetric(1e9/s.offered, "ns/op")
				b.ReportMetric(s.refused, "refused-pct")
				reportLatency(b, "fanout-", s.lat)
				for _, svc := range slices.Sorted(maps.Keys(s.pending)) {
					p := s.pending[svc]
					b.ReportMetric(float64(p.total), "max-pending-"+svc)
					if b.N == 1 { // the testing package calls this more than once
						b.Logf("%s: at most %d messages pending over its partitions at once; worst partition %s with %d",
							svc, p.total, p.worst, p.worstN)
					}
				}
			})
		}
	})

	// Scale with work items: the pipeline's events/s, webhook to loop.ev,
	// with 16 work items busy in 16 partitions against one work item.
	scaled := map[string]float64{}
	for _, busy := range []int{1, catalog.DefaultPartitions} {
		items := busyItems(busy)
		for _, v := range []string{"up", "raw"} {
			up.waitIdle(b, js)
			raw.waitIdle(b)
			jobs := make([]intakeJob, scaleDeliveries)
			for i := range jobs {
				d, id := next()
				spreadSeq++
				jobs[i].d, jobs[i].id = spread(b, d, items[i%busy], spreadSeq), id
			}
			var mu sync.Mutex
			var events []string
			send := func(ctx context.Context, d intakeDelivery, id string) (bool, error) {
				if v == "raw" {
					code, err := raw.deliver(ctx, d, id)
					if err == nil && code == http.StatusAccepted {
						mu.Lock()
						events = append(events, id)
						mu.Unlock()
					}
					return code == http.StatusAccepted, err
				}
				code, evs, err := up.deliver(ctx, d, id)
				mu.Lock()
				events = append(events, evs...)
				mu.Unlock()
				return code == http.StatusAccepted, err
			}
			start := time.Now()
			if _, _, _, err := runSenders(ctx, scaleSenders, jobs, send); err != nil {
				b.Fatalf("busy=%d %s: %v", busy, v, err)
			}
			last := start
			for _, e := range events {
				at, err := watch.wait(e, 5*time.Minute)
				if err != nil {
					b.Fatalf("busy=%d %s: %v", busy, v, err)
				}
				if at.After(last) {
					last = at
				}
			}
			scaled[fmt.Sprintf("busy=%d/%s", busy, v)] = float64(len(events)) / last.Sub(start).Seconds()
		}
	}
	b.Run("scale", func(b *testing.B) {
		for _, v := range []string{"up", "raw"} {
			b.Run(v, func(b *testing.B) {
				for _, busy := range []int{1, catalog.DefaultPartitions} {
					b.Run(fmt.Sprintf("busy=%d", busy), func(b *testing.B) {
						eps := scaled[fmt.Sprintf("busy=%d/%s", busy, v)]
						b.ReportMetric(eps, "events/s")
						b.ReportMetric(1e9/eps, "ns/op")
					})
				}
			})
		}
	})
}

// spreadItems is how many work items the spread load concerns.
const spreadItems = 200

// The scaling run: deliveries per case, from this many concurrent senders
// (enough to keep every busy partition's one message in flight fed).
const scaleDeliveries, scaleSenders = 800, 32

// spread returns d about work item number n of the examples' repository,
// its comment's or review's id made unique by seq: a new event on that work
// item, as a team's traffic would bring (the examples alone concern two
// work items and repeat their comments). Its key is the work item's subject
// key, so the raw path lands it in the partition the system does.
func spread(b testing.TB, d intakeDelivery, n, seq int) intakeDelivery {
	b.Helper()
	var body map[string]any
	dec := json.NewDecoder(bytes.NewReader(d.body))
	dec.UseNumber() // the examples' other ids stay as they were
	if err := dec.Decode(&body); err != nil {
		b.Fatal(err)
	}
	for _, k := range []string{"issue", "pull_request"} {
		if o, ok := body[k].(map[string]any); ok {
			o["number"] = n
		}
	}
	for _, k := range []string{"comment", "review"} {
		if o, ok := body[k].(map[string]any); ok {
			o["id"] = 1_000_000_000 + seq
		}
	}
	out, err := json.Marshal(body)
	if err != nil {
		b.Fatal(err)
	}
	return intakeDelivery{event: d.event, body: out, key: catalog.SubjectKey(fmt.Sprintf("github:Codertocat/Hello-World#%d", n))}
}

// busyItems returns n work item numbers of the examples' repository that
// land in n different partitions (of catalog.DefaultPartitions).
func busyItems(n int) []int {
	var out []int
	taken := map[int]bool{}
	for num := 2000; len(out) < n; num++ {
		p := bus.PartitionOf(catalog.SubjectKey(fmt.Sprintf("github:Codertocat/Hello-World#%d", num)), catalog.DefaultPartitions)
		if !taken[p] {
			taken[p] = true
			out = append(out, num)
		}
	}
	return out
}

// intakeDelivery is one example delivery: its X-GitHub-Event, body, and
// the key of its work item (its issue or pull request number), which the
// raw path partitions by as the system does.
type intakeDelivery struct {
	event string
	body  []byte
	key   string
}

type intakeJob struct {
	d  intakeDelivery
	id string
}

// intakeLoad reads the shared examples of the five events, in a fixed order.
func intakeLoad(b testing.TB) []intakeDelivery {
	b.Helper()
	root := filepath.Join("..", "..", "..", "shared", "testdata", "github-webhooks")
	if _, err := os.Stat(root); err != nil {
		b.Skipf("shared GitHub webhook examples not found at %s: skipping", root)
	}
	var out []intakeDelivery
	for _, event := range []string{"issue_comment", "issues", "pull_request", "pull_request_review", "pull_request_review_comment"} {
		files, err := filepath.Glob(filepath.Join(root, event, "*.json"))
		if err != nil {
			b.Fatal(err)
		}
		slices.Sort(files)
		for _, f := range files {
			body, err := os.ReadFile(f)
			if err != nil {
				b.Fatal(err)
			}
			var item struct {
				Issue       struct{ Number int }
				PullRequest struct{ Number int } `json:"pull_request"`
			}
			if err := json.Unmarshal(body, &item); err != nil {
				b.Fatalf("%s: %v", f, err)
			}
			out = append(out, intakeDelivery{event: event, body: body, key: fmt.Sprintf("k%d", item.Issue.Number+item.PullRequest.Number)})
		}
	}
	if len(out) == 0 {
		b.Fatalf("no examples under %s", root)
	}
	// Interleave the events, as GitHub would send them.
	slices.SortStableFunc(out, func(a, c intakeDelivery) int { return len(a.body)%7 - len(c.body)%7 })
	return out
}

// rawSubject is where the raw path publishes d: keyed by its work item,
// so that it lands in the partition the system's event does.
func rawSubject(prefix string, d intakeDelivery) string {
	return prefix + "." + d.key + ".bench"
}

// copyStream creates a stream configured as the one called from, under
// name, on subjects prefix.*.> with the same partition transform.
func copyStream(b *testing.B, js jetstream.JetStream, from, name, prefix string) jetstream.StreamConfig {
	b.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, from)
	if err != nil {
		b.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	old := strings.TrimSuffix(cfg.Subjects[0], ".*.>")
	cfg.Name, cfg.Description = name, "bench baseline: "+from
	cfg.Subjects = []string{prefix + ".*.>"}
	if t := cfg.SubjectTransform; t != nil {
		t.Source = prefix + ".*.>"
		t.Destination = prefix + strings.TrimPrefix(t.Destination, old)
	}
	if _, err := js.CreateOrUpdateStream(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	return cfg
}

// runSenders sends jobs from senders concurrent senders, each waiting for
// its answer before the next, and returns the wall time, every send's
// latency and how many were accepted.
func runSenders(ctx context.Context, senders int, jobs []intakeJob, send func(context.Context, intakeDelivery, string) (bool, error)) (time.Duration, []time.Duration, int, error) {
	queue := make(chan intakeJob, len(jobs))
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	var (
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, len(jobs))
		accepted int
		firstErr error
		wg       sync.WaitGroup
	)
	start := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				t := time.Now()
				ok, err := send(ctx, j.d, j.id)
				d := time.Since(t)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				lat = append(lat, d)
				if ok {
					accepted++
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(start), lat, accepted, firstErr
}

// runPaced calls send at rate per second for d, each call in its own
// goroutine (an open load: a slow answer does not slow the sending), waits
// for them all and returns the rate it achieved.
func runPaced(ctx context.Context, rate float64, d time.Duration, send func(context.Context) error) (float64, error) {
	interval := time.Duration(float64(time.Second) / rate)
	var wg sync.WaitGroup
	var once sync.Once
	var firstErr error
	n := 0
	start := time.Now()
	for next := start; time.Since(start) < d; next = next.Add(interval) {
		if w := time.Until(next); w > 0 {
			time.Sleep(w)
		}
		n++
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := send(ctx); err != nil {
				once.Do(func() { firstErr = err })
			}
		}()
	}
	offered := float64(n) / time.Since(start).Seconds()
	wg.Wait()
	return offered, firstErr
}

func reportLatency(b *testing.B, prefix string, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(rawbench.Percentile(lat, 0.50), prefix+"p50-ms")
	b.ReportMetric(rawbench.Percentile(lat, 0.90), prefix+"p90-ms")
	b.ReportMetric(rawbench.Percentile(lat, 0.99), prefix+"p99-ms")
}

// upProcess is one `the-loop up` process of the benchmark.
type upProcess struct {
	store   string
	natsURL string
	admin   string
	webhook string
	client  *http.Client
	// gh is its GitHub (the fake), Codertocat/Hello-World on it.
	gh *ghfake.Server
	// run is the process once launched.
	run *upRun
}

const intakeSecret = "intake-bench-webhook-secret"

// startUp starts `the-loop up` on free ports with a store of its own, the
// GitHub fake as its GitHub, Codertocat authorized, and waits for /readyz.
func startUp(b testing.TB) *upProcess {
	b.Helper()
	u, loop, env, logPath := prepareUp(b)
	u.run = execUp(b, loop, env, logPath, "http://"+u.admin+"/readyz", u.client)
	return u
}

// prepareUp is startUp up to the exec: the ports, a fresh store, the
// GitHub fake, the config, and the binary and environment to start with.
func prepareUp(b testing.TB) (u *upProcess, loop string, env []string, logPath string) {
	b.Helper()
	loop, _ = binaries(b)
	dir := b.TempDir()
	gh := ghfake.New(b, ghfake.WithPrimaryLimit(0), ghfake.WithSecondaryLimits(0, 0))
	gh.AddRepo("Codertocat/Hello-World")
	gh.AddToken(ledgerToken, ledgerLogin)
	cfg := filepath.Join(dir, "the-loop.yaml")
	if err := os.WriteFile(cfg, []byte(`version: "0.7.0"
routing:
  authorizedUsers:
    - {github: Codertocat, name: Codertocat}
`), 0o600); err != nil {
		b.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		b.Fatal(err)
	}
	// The dispatcher needs a harness to start; the benchmark never
	// spawns a session (none of its work items carries the label).
	harness, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	natsPort, admin, hook := freePortTB(b), freePortTB(b), freePortTB(b)
	u = &upProcess{
		store:   filepath.Join(dir, "store"),
		natsURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		admin:   fmt.Sprintf("127.0.0.1:%d", admin),
		webhook: fmt.Sprintf("http://127.0.0.1:%d/gh-webhook", hook),
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute,
		}},
		gh: gh,
	}
	env = append(baseEnv(),
		"LOOP_STORE_DIR="+u.store,
		fmt.Sprintf("LOOP_NATS_LISTEN=127.0.0.1:%d", natsPort),
		"LOOP_ADMIN_ADDR="+u.admin,
		fmt.Sprintf("LOOP_GITHUB_WEBHOOK_ADDR=127.0.0.1:%d", hook),
		"LOOP_GITHUB_WEBHOOK_SECRET="+intakeSecret,
		"LOOP_GITHUB_TOKEN="+ledgerToken,
		"LOOP_GITHUB_API_URL="+gh.URL(),
		"LOOP_GITHUB_LOGIN="+ledgerLogin,
		"LOOP_CONFIG="+cfg,
		"LOOP_LOG_LEVEL=warn",
		fmt.Sprintf("LOOP_SLACK_EVENTS_ADDR=127.0.0.1:%d", freePortTB(b)),
		fmt.Sprintf("LOOP_SESSION_ADDR=127.0.0.1:%d", freePortTB(b)),
		"LOOP_TMUX_DIR="+newTmuxDir(b),
		"LOOP_DISPATCHER_WORKDIR="+work,
		"LOOP_HARNESS_BINARY="+harness,
	)
	return u, loop, env, filepath.Join(dir, "up.log")
}

// launchUp starts `the-loop up` with env, its output in logPath, stops it
// when the test ends, waits until it is ready and returns its pid (see
// execUp).
func launchUp(tb testing.TB, loop string, env []string, logPath, readyz string, client *http.Client) int {
	tb.Helper()
	return execUp(tb, loop, env, logPath, readyz, client).pid
}

// upRun is one run of `the-loop up`.
type upRun struct {
	pid int
	// ready is the time from exec until readyz first answered 200.
	ready time.Duration
	stop  func()
}

// execUp starts `the-loop up` with env, its output in logPath, and waits
// until readyz answers 200, polling every 10 ms (fine enough to time a
// start); it fails the test, with up's log, when up exits or is not ready
// within 2 minutes. stop (SIGTERM, then SIGKILL after 30 s; the log's end
// shown when the test failed) runs when the test ends, or earlier when
// called.
func execUp(tb testing.TB, loop string, env []string, logPath, readyz string, client *http.Client) *upRun {
	tb.Helper()
	f, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	if err := sandbox.Supported(); err != nil && !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "LOOP_SESSION_SANDBOX=") }) {
		// On a kernel without Landlock up starts no session unless told
		// to run them unconfined; the tests of the sandbox skip there.
		env = append(env, "LOOP_SESSION_SANDBOX=off")
	}
	cmd := exec.Command(loop, "up")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			if tb.Failed() {
				log, _ := os.ReadFile(logPath)
				tb.Logf("the-loop up's log:\n%s", tail(log, 6000))
			}
		})
	}
	tb.Cleanup(stop)
	deadline := began.Add(2 * time.Minute)
	for {
		resp, err := client.Get(readyz)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return &upRun{pid: cmd.Process.Pid, ready: time.Since(began), stop: stop}
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logPath)
			tb.Fatalf("the-loop up exited:\n%s", tail(log, 6000))
		default:
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logPath)
			tb.Fatalf("the-loop up not ready after 2m:\n%s", tail(log, 6000))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// natsConn connects to up's server as the operator, with the seed up keeps
// in its store.
func (u *upProcess) natsConn(b testing.TB, name string) *nats.Conn {
	b.Helper()
	opt, err := nats.NkeyOptionFromSeed(filepath.Join(u.store, "nats", "operator.nk"))
	if err != nil {
		b.Fatal(err)
	}
	nc, err := nats.Connect(u.natsURL, nats.Name(name), opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	return nc
}

// deliver posts one signed delivery and returns the status and, on 202, the
// event ids the answer names.
func (u *upProcess) deliver(ctx context.Context, d intakeDelivery, id string) (int, []string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.webhook, bytes.NewReader(d.body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", d.event)
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", githubSignature(intakeSecret, d.body))
	resp, err := u.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	var answer struct {
		Status string   `json:"status"`
		Reason string   `json:"reason"`
		Events []string `json:"events"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("delivery %s: answer: %w", id, err)
	}
	switch resp.StatusCode {
	case http.StatusAccepted:
		return resp.StatusCode, answer.Events, nil
	case http.StatusOK:
		return resp.StatusCode, nil, nil // dropped, with its reason: a duplicate event, an edit…
	}
	return resp.StatusCode, nil, fmt.Errorf("delivery %s answered %d %s", id, resp.StatusCode, answer.Status)
}

// pipelineConsumers are the streams whose consumers the benchmark watches.
var pipelineConsumers = []string{"LOOP_INBOX", "LOOP_EVENTS"}

// waitIdle waits until no consumer of the pipeline holds a message: the
// next round starts from the same state as the previous one.
func (u *upProcess) waitIdle(b *testing.B, js jetstream.JetStream) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		busy := 0
		for _, stream := range pipelineConsumers {
			for svc, p := range pendingOf(context.Background(), js, stream) {
				_ = svc
				busy += p.total
			}
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the pipeline still holds %d messages after 5m", busy)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pendingMax is what a service's consumers held at once.
type pendingMax struct {
	total  int // summed over the service's partitions
	worst  string
	worstN int
}

// pendingOf reads, per service, the messages its consumers of stream have
// not yet acknowledged (pending and in flight).
func pendingOf(ctx context.Context, js jetstream.JetStream, stream string) map[string]pendingMax {
	out := map[string]pendingMax{}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return out
	}
	infos := s.ListConsumers(ctx)
	for ci := range infos.Info() {
		svc := ci.Name
		if i := strings.LastIndex(svc, "-p"); i > 0 {
			svc = svc[:i]
		}
		n := int(ci.NumPending) + ci.NumAckPending
		p := out[svc]
		p.total += n
		if n > p.worstN || p.worst == "" {
			p.worst, p.worstN = ci.Name, n
		}
		out[svc] = p
	}
	return out
}

// pendingSampler keeps the most each service held at once.
type pendingSampler struct {
	stopc chan struct{}
	done  chan map[string]pendingMax
}

func startPendingSampler(js jetstream.JetStream, raw bool) *pendingSampler {
	p := &pendingSampler{stopc: make(chan struct{}), done: make(chan map[string]pendingMax, 1)}
	streams := pipelineConsumers
	if raw {
		streams = []string{"BENCH_RAW_INBOX"}
	}
	go func() {
		most := map[string]pendingMax{}
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			for _, stream := range streams {
				for svc, now := range pendingOf(context.Background(), js, stream) {
					m := most[svc]
					if now.total > m.total {
						m.total = now.total
					}
					if now.worstN > m.worstN || m.worst == "" {
						m.worst, m.worstN = now.worst, now.worstN
					}
					most[svc] = m
				}
			}
			select {
			case <-p.stopc:
				p.done <- most
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *pendingSampler) stop() map[string]pendingMax {
	close(p.stopc)
	return <-p.done
}

// idWatch timestamps the first sighting of every message id (Nats-Msg-Id)
// published on its subjects, through a plain subscription.
type idWatch struct {
	mu   sync.Mutex
	at   map[string]time.Time
	wake chan struct{}
}

func newIDWatch(b *testing.B, nc *nats.Conn, subjects ...string) *idWatch {
	b.Helper()
	w := &idWatch{at: map[string]time.Time{}, wake: make(chan struct{})}
	for _, subj := range subjects {
		sub, err := nc.Subscribe(subj, func(m *nats.Msg) {
			now := time.Now()
			id := m.Header.Get(jetstream.MsgIDHeader)
			w.mu.Lock()
			if _, ok := w.at[id]; !ok {
				w.at[id] = now
			}
			close(w.wake)
			w.wake = make(chan struct{})
			w.mu.Unlock()
		})
		if err != nil {
			b.Fatal(err)
		}
		_ = sub.SetPendingLimits(-1, -1)
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	return w
}

func (w *idWatch) wait(id string, d time.Duration) (time.Time, error) {
	deadline := time.After(d)
	for {
		w.mu.Lock()
		at, ok := w.at[id]
		wake := w.wake
		w.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-wake:
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s was not published within %s", id, d)
		}
	}
}

// rawHops is the baseline path of the sustained run.
type rawHops struct {
	url    string
	client *http.Client
	js     jetstream.JetStream
}

// startRawHops serves the raw ingress and runs the raw ledger hop: one
// consumer per partition of the raw inbox (as the ledger-writer's, one
// message in flight each) republishing on the raw events stream.
func startRawHops(b *testing.B, js jetstream.JetStream, in, ev jetstream.StreamConfig) *rawHops {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, rawURL := serveRawIngress(b, js, intakeSecret, func(r *http.Request) string {
		return "bench.in." + r.Header.Get("X-Bench-Key") + ".bench"
	})

	partitions := 16
	if t := in.SubjectTransform; t != nil {
		fmt.Sscanf(t.Destination[strings.Index(t.Destination, "partition(")+len("partition("):], "%d", &partitions)
	}
	var wg sync.WaitGroup
	for p := range partitions {
		cons, err := js.CreateOrUpdateConsumer(ctx, in.Name, jetstream.ConsumerConfig{
			Durable: fmt.Sprintf("ledger-writer-p%02d", p), AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1,
			AckWait: time.Minute, FilterSubject: fmt.Sprintf("bench.in.%d.>", p),
		})
		if err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					id := m.Headers().Get(jetstream.MsgIDHeader)
					key := strings.SplitN(m.Subject(), ".", 5)[3]
					if _, err := js.Publish(ctx, "bench.ev."+key+".bench", m.Data(), jetstream.WithMsgID(id)); err != nil {
						_ = m.Nak()
						continue
					}
					_ = m.DoubleAck(ctx)
				}
			}
		}()
	}
	b.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
	})
	return &rawHops{
		url: rawURL, js: js,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256}},
	}
}

func (r *rawHops) deliver(ctx context.Context, d intakeDelivery, id string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(d.body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("X-Hub-Signature-256", githubSignature(intakeSecret, d.body))
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Bench-Key", d.key)
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return resp.StatusCode, fmt.Errorf("raw ingress answered %d", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// waitIdle waits until the raw ledger hop holds nothing.
func (r *rawHops) waitIdle(b *testing.B) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		busy := 0
		for _, p := range pendingOf(context.Background(), r.js, "BENCH_RAW_INBOX") {
			busy += p.total
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal(errors.New("the raw path still holds messages after 5m"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
