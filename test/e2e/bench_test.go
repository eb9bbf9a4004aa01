//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/internal/testsupport/rawbench"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
)

// BenchmarkEndToEnd measures "webhook sent → Slack message posted" through
// the whole system — ingress-github, the inbox, ledger-writer, the event
// stream, slack-renderer, as separate processes on a nats-server process,
// against zero-latency fakes — and, in the same run against the same
// nats-server, through a raw JetStream path of the same hops: an HTTP
// handler verifying an HMAC and publishing to a WorkQueue stream (PubAck),
// a pull consumer (one in flight) republishing to a Limits stream (PubAck,
// double ack), and a pull consumer posting to the same Slack fake (double
// ack).
//
//   - latency/{system,raw}: one event at a time; ns/op is the mean, p50-ms
//     and p99-ms the percentiles. The system's slack-renderer paces posts
//     to a channel at one a second (LOOP_SLACK_POST_INTERVAL; Slack's own
//     limit), so the system run waits that interval out between events,
//     off the clock: what is measured is the pipeline, not the pacer.
//   - throughput/{system,raw}: b.N events sent by 8 concurrent senders
//     over 8 work items; ns/op is wall time per event, events/s the rate
//     at which they reach Slack, ledger-events/s the rate at which they
//     reach the event stream (system: ingress-github and ledger-writer;
//     raw: the first two hops), read off the same run by a plain NATS
//     subscription. The system's events/s is bounded by the pacer: one
//     post a second per channel and slack-renderer process holding the
//     channel's partitions (the pins usually all go to one process, so one
//     a second), against one message in flight per stage on the raw path.
//     ledger-events/s is the pipeline's own rate.
//
// `make bench` runs it (scripts/bench.sh, BENCHTAGS=e2e) and prints each
// <name>/system as a ratio to <name>/raw, metric by metric. Alone:
//
//	go test -tags e2e -run '^$' -bench EndToEnd -benchtime 50x -timeout 30m ./test/e2e/
func BenchmarkEndToEnd(b *testing.B) {
	c := startCluster(b, clusterOptions{logLevel: "warn"})
	c.addIssues(8)
	raw := startRaw(b, c)

	posted := watchPosts(c.slack)
	ledgered := watchStreams(b, c, "loop.ev.>", "raw.ev.>")
	seq := 0
	next := func() (number, n int) {
		seq++
		return c.issues[seq%len(c.issues)], 1000 + seq
	}
	system := func(ctx context.Context, number, n int) error {
		return c.githubComment(ctx, number, deliveryID(number, n), "bench "+tokenFor(number, n))
	}
	rawSend := func(ctx context.Context, number, n int) error { return raw.send(ctx, tokenFor(number, n)) }

	latency := func(send func(context.Context, int, int) error, gap time.Duration) func(*testing.B) {
		return func(b *testing.B) {
			ctx := context.Background()
			var lat []time.Duration
			b.ResetTimer()
			for range b.N {
				number, n := next()
				k := tokenFor(number, n)
				start := time.Now()
				if err := send(ctx, number, n); err != nil {
					b.Fatal(err)
				}
				at, err := posted.wait(k, 2*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				lat = append(lat, at.Sub(start))
				if gap > 0 {
					b.StopTimer()
					time.Sleep(gap)
					b.StartTimer()
				}
			}
			b.StopTimer()
			reportPercentiles(b, lat)
		}
	}
	throughput := func(send func(context.Context, int, int) error) func(*testing.B) {
		return func(b *testing.B) {
			var jobs []job
			var keys []string
			for range b.N {
				number, n := next()
				jobs = append(jobs, job{number, n})
				keys = append(keys, tokenFor(number, n))
			}
			b.ResetTimer()
			start := time.Now()
			if err := sendAll(context.Background(), jobs, send); err != nil {
				b.Fatal(err)
			}
			var toLedger, toSlack time.Duration
			for _, k := range keys {
				at, err := ledgered.wait(k, 10*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				toLedger = max(toLedger, at.Sub(start))
				if at, err = posted.wait(k, 10*time.Minute); err != nil {
					b.Fatal(err)
				}
				toSlack = max(toSlack, at.Sub(start))
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/toSlack.Seconds(), "events/s")
			b.ReportMetric(float64(b.N)/toLedger.Seconds(), "ledger-events/s")
		}
	}

	b.Run("latency", func(b *testing.B) {
		b.Run("system", latency(system, 1100*time.Millisecond))
		b.Run("raw", latency(rawSend, 0))
	})
	b.Run("throughput", func(b *testing.B) {
		b.Run("system", throughput(system))
		b.Run("raw", throughput(rawSend))
	})

	// hops: one event at a time into a started work item, each hop timed
	// on its own (run last: the sessions it starts would otherwise be typed
	// into during the runs above).
	var threads map[int]string
	var inboxed *watch
	var once sync.Once
	started := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			var sent []sentEvent
			threads = c.startWorkItems(ctx, &sent)
			inboxed = watchStreams(b, c, "loop.in.>")
		})
	}
	b.Run("hops", func(b *testing.B) {
		b.Run("github", func(b *testing.B) {
			started()
			var h hops
			for range b.N {
				seq++
				number, n := c.issues[0], 1000+seq
				k := tokenFor(number, n)
				start := time.Now()
				if err := c.githubComment(context.Background(), number, deliveryID(number, n), "hop "+k); err != nil {
					b.Fatal(err)
				}
				h.Add("webhook-202", time.Since(start))
				in := h.wait(b, "webhook-to-inbox", start, inboxed, k)
				ev := h.wait(b, "inbox-to-events", in, ledgered, k)
				h.wait(b, "events-to-slack", ev, posted, k)
				h.session(b, c, "events-to-session", ev, k)
				time.Sleep(1100 * time.Millisecond) // the renderer's pacer, off the figures
			}
			h.Report(b)
		})
		b.Run("slack", func(b *testing.B) {
			started()
			var h hops
			for range b.N {
				seq++
				number, n := c.issues[0], 1000+seq
				k := tokenFor(number, n)
				start := time.Now()
				if _, err := c.slackReply(context.Background(), threads[number], "hop "+k); err != nil {
					b.Fatal(err)
				}
				h.Add("events-api-200", time.Since(start))
				in := h.wait(b, "events-api-to-inbox", start, inboxed, k)
				ev := h.wait(b, "inbox-to-events-recorded", in, ledgered, k)
				h.session(b, c, "events-to-session", ev, k)
			}
			h.Report(b)
		})
	})
}

// hops collects the duration of each hop of a path, by name, in the order
// first seen.
type hops struct{ rawbench.Took }

// wait adds hop name, from since until w first saw token k, and returns
// when that was.
func (h *hops) wait(b *testing.B, name string, since time.Time, w *watch, k string) time.Time {
	b.Helper()
	at, err := w.wait(k, 2*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	h.Add(name, at.Sub(since))
	return at
}

// session adds hop name: from since until the stand-in agent read the
// prompt carrying token k (its own record of when).
func (h *hops) session(b *testing.B, c *cluster, name string, since time.Time, k string) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		for _, in := range tmuxtest.Inputs(b, c.standIn) {
			if strings.Contains(in.Text, k) && !in.At.IsZero() {
				h.Add(name, in.At.Sub(since))
				return
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s was not typed into its session", k)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// natsOptions are the options of a plain NATS client of the test: named, and
// with authorization on, the operator's identity.
func (c *cluster) natsOptions(b testing.TB, name string) []nats.Option {
	b.Helper()
	opts := []nats.Option{nats.Name(name)}
	if c.auth != "" {
		o, err := nats.NkeyOptionFromSeed(c.seed("operator"))
		if err != nil {
			b.Fatal(err)
		}
		opts = append(opts, o)
	}
	return opts
}

// BenchmarkEndToEndAuth is what authorization costs: the pipeline's own
// throughput — signed webhooks from 8 concurrent senders until every event
// is on loop.ev (ingress-github, the inbox, the ledger-writer recording on
// the GitHub fake, the fan-out) — on two systems started side by side, one
// with NATS authorization off and one with every service its own NKey
// identity. Rounds alternate between the two so that both see the same
// machine; each sub-benchmark reports the events/s of its rounds, and `make
// bench` prints auth=on against auth=off.
func BenchmarkEndToEndAuth(b *testing.B) {
	systems := map[string]*cluster{
		"auth=off": startCluster(b, clusterOptions{logLevel: "warn", noAuth: true, replicas: 1}),
		"auth=on":  startCluster(b, clusterOptions{logLevel: "warn", replicas: 1}),
	}
	compareSystems(b, systems, []string{"auth=off", "auth=on"})
}

// BenchmarkEndToEndSigning is what signed events cost
// (docs/decisions/099-signed-events.md): the pipeline's throughput, as
// BenchmarkEndToEndAuth measures it, on two systems with authorization on
// started side by side — one built with the tag loop_unsigned_bench, which
// neither signs nor verifies (a baseline only, never a build to deploy), and
// one as shipped, where ingress-github signs each event, the ledger-writer
// verifies it and signs its fan-out. `make bench` prints signing=on against
// signing=off; the target is a cost under 5 %.
func BenchmarkEndToEndSigning(b *testing.B) {
	systems := map[string]*cluster{
		"signing=off": startCluster(b, clusterOptions{logLevel: "warn", replicas: 1, unsigned: true}),
		"signing=on":  startCluster(b, clusterOptions{logLevel: "warn", replicas: 1}),
	}
	compareSystems(b, systems, []string{"signing=off", "signing=on"})
}

// compareSystems sends the same load to each of systems in rounds that
// alternate between them, and reports each one's events/s as a
// sub-benchmark named as in order.
func compareSystems(b *testing.B, systems map[string]*cluster, order []string) {
	watches := map[string]*watch{}
	for _, name := range order {
		c := systems[name]
		c.addIssues(8)
		watches[name] = watchStreams(b, c, "loop.ev.>")
	}
	// A fixed load: a parent benchmark that runs sub-benchmarks runs once,
	// with b.N 1. Many short rounds rather than a few long ones: each
	// round's ratio is paired (same minute, same machine), and their median
	// shrugs off a round another process disturbed.
	const rounds, perRound = 10, 100
	elapsed := map[string]time.Duration{}
	sent := map[string]int{}
	rates := map[string][]float64{}
	cpuBefore := map[string]map[string]time.Duration{}
	for _, name := range order {
		cpuBefore[name] = systems[name].cpu(b)
	}
	seq := 0
	for r := range rounds {
		for i := range order {
			// Alternate which system goes first in a round.
			name := order[(i+r)%len(order)]
			c := systems[name]
			var jobs []job
			var keys []string
			for range perRound {
				seq++
				number, n := c.issues[seq%len(c.issues)], 5000+seq
				jobs = append(jobs, job{number, n})
				keys = append(keys, tokenFor(number, n))
			}
			start := time.Now()
			err := sendAll(context.Background(), jobs, func(ctx context.Context, number, n int) error {
				return c.githubComment(ctx, number, deliveryID(number, n), "auth bench "+tokenFor(number, n))
			})
			if err != nil {
				b.Fatal(err)
			}
			var last time.Time
			for _, k := range keys {
				at, err := watches[name].wait(k, 10*time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				if at.After(last) {
					last = at
				}
			}
			elapsed[name] += last.Sub(start)
			sent[name] += perRound
			rates[name] = append(rates[name], float64(perRound)/last.Sub(start).Seconds())
		}
	}
	// What the renderer and the dispatcher still had to do of the last
	// round's fan-out.
	time.Sleep(2 * time.Second)
	cpuPerEvent := map[string]map[string]float64{}
	for _, name := range order {
		cpuPerEvent[name] = map[string]float64{}
		for proc, after := range systems[name].cpu(b) {
			cpuPerEvent[name][proc] = float64((after - cpuBefore[name][proc]).Microseconds()) / float64(sent[name])
		}
	}
	for _, name := range order {
		b.Run(name, func(b *testing.B) {
			// CPU per event of each process of the system (and all),
			// µs: where the difference between the systems goes.
			total := 0.0
			for proc, us := range cpuPerEvent[name] {
				total += us
				b.ReportMetric(us, "cpu-us/event-"+proc)
			}
			b.ReportMetric(total, "cpu-us/event")
			b.ReportMetric(float64(sent[name])/elapsed[name].Seconds(), "events/s")
			// ns/op is the time per event of the rounds, not of this
			// function, which only reports them.
			b.ReportMetric(float64(elapsed[name].Nanoseconds())/float64(sent[name]), "ns/op")
			if name != order[0] {
				b.ReportMetric(medianRatio(rates[name], rates[order[0]]), "x-baseline-median")
			}
		})
	}
}

// cpu is the CPU time (user and system) each of c's processes has used so
// far, by process name (the nats-servers and the services; a restarted
// process starts again from zero).
func (c *cluster) cpu(b testing.TB) map[string]time.Duration {
	b.Helper()
	out := map[string]time.Duration{}
	for _, p := range append(slices.Clone(c.natsProcs), c.procs...) {
		p.mu.Lock()
		cmd := p.cmd
		p.mu.Unlock()
		if cmd == nil || cmd.Process == nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil {
			continue
		}
		// Fields after the command name, which ends at the last ')':
		// state is the first; utime and stime the 12th and 13th, in
		// clock ticks (USER_HZ, 100 on Linux).
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(f) < 13 {
			continue
		}
		var ticks int64
		for _, v := range f[11:13] {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatalf("%s: /proc stat: %v", p.name, err)
			}
			ticks += n
		}
		out[p.name] += time.Duration(ticks) * 10 * time.Millisecond
	}
	return out
}

// medianRatio is the median over rounds of a[i] ÷ base[i].
func medianRatio(a, base []float64) float64 {
	var r []float64
	for i := range min(len(a), len(base)) {
		if base[i] > 0 {
			r = append(r, a[i]/base[i])
		}
	}
	if len(r) == 0 {
		return 0
	}
	slices.Sort(r)
	if len(r)%2 == 1 {
		return r[len(r)/2]
	}
	return (r[len(r)/2-1] + r[len(r)/2]) / 2
}

// job is one event to send: the work item's number and the event's.
type job struct{ number, n int }

// sendAll sends every job from 8 concurrent senders and returns the first
// error.
func sendAll(ctx context.Context, jobs []job, send func(ctx context.Context, number, n int) error) error {
	queue := make(chan job, len(jobs))
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				if err := send(ctx, j.number, j.n); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(p*float64(len(lat))+0.5) - 1
		i = max(0, min(i, len(lat)-1))
		return float64(lat[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
}

// watch timestamps the first sighting of every token.
type watch struct {
	where string
	mu    sync.Mutex
	at    map[string]time.Time
	wake  chan struct{}
}

func newWatch(where string) *watch {
	return &watch{where: where, at: map[string]time.Time{}, wake: make(chan struct{})}
}

// watchPosts watches the messages the Slack fake stores.
func watchPosts(s *slackfake.Server) *watch {
	w := newWatch("posted to Slack")
	s.AfterPost(func(m slackfake.Message) { w.see(m.Text) })
	return w
}

// watchStreams watches the messages published on subjects, through a
// plain NATS subscription (no consumer: it takes nothing from the streams).
func watchStreams(b *testing.B, c *cluster, subjects ...string) *watch {
	b.Helper()
	w := newWatch(fmt.Sprintf("published on %v", subjects))
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", c.natsPort), c.natsOptions(b, "bench-watch")...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	for _, subj := range subjects {
		if _, err := nc.Subscribe(subj, func(m *nats.Msg) { w.see(string(m.Data)) }); err != nil {
			b.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		b.Fatal(err)
	}
	return w
}

func (w *watch) see(text string) {
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, k := range tokenRE.FindAllString(text, -1) {
		if _, ok := w.at[k]; !ok {
			w.at[k] = now
		}
	}
	close(w.wake)
	w.wake = make(chan struct{})
}

func (w *watch) wait(k string, d time.Duration) (time.Time, error) {
	deadline := time.After(d)
	for {
		w.mu.Lock()
		at, ok := w.at[k]
		wake := w.wake
		w.mu.Unlock()
		if ok {
			return at, nil
		}
		select {
		case <-wake:
		case <-deadline:
			return time.Time{}, fmt.Errorf("%s was not %s within %s", k, w.where, d)
		}
	}
}

// rawPath is the baseline: the same hops as the system, nothing else.
type rawPath struct {
	url    string
	client *http.Client
}

const rawSecret = "raw-webhook-secret"

// githubSignature is the X-Hub-Signature-256 value GitHub sends with body
// when the webhook's secret is secret.
func githubSignature(secret string, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write(body)
	return "sha256=" + hex.EncodeToString(mac.Sum(nil))
}

// serveRawIngress serves the ingress hop of the raw JetStream baselines:
// verify the signature, publish the body to subject(r) with the delivery id
// as its message id, wait for the PubAck, answer 202. It returns the server
// (the caller closes it) and its URL.
func serveRawIngress(b *testing.B, js jetstream.JetStream, secret string, subject func(*http.Request) string) (*http.Server, string) {
	b.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /raw", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "unreadable", http.StatusBadRequest)
			return
		}
		if !hmac.Equal([]byte(r.Header.Get("X-Hub-Signature-256")), []byte(githubSignature(secret, body))) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		id := r.Header.Get("X-GitHub-Delivery")
		if _, err := js.Publish(r.Context(), subject(r), body, jetstream.WithMsgID(id)); err != nil {
			http.Error(w, "bus unavailable", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	return srv, "http://" + ln.Addr().String() + "/raw"
}

func startRaw(b *testing.B, c *cluster) *rawPath {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", c.natsPort), c.natsOptions(b, "bench-raw")...)
	if err != nil {
		b.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	for _, sc := range []jetstream.StreamConfig{
		{Name: "RAW_IN", Subjects: []string{"raw.in.>"}, Retention: jetstream.WorkQueuePolicy,
			Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew, Duplicates: 2 * time.Hour},
		{Name: "RAW_EV", Subjects: []string{"raw.ev.>"}, Retention: jetstream.LimitsPolicy,
			Storage: jetstream.FileStorage, Duplicates: 2 * time.Hour},
	} {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			b.Fatal(err)
		}
	}
	consumer := func(stream string) jetstream.Consumer {
		cons, err := js.CreateOrUpdateConsumer(ctx, stream, jetstream.ConsumerConfig{
			Durable: "raw", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 1, AckWait: time.Minute,
		})
		if err != nil {
			b.Fatal(err)
		}
		return cons
	}
	in, ev := consumer("RAW_IN"), consumer("RAW_EV")

	// Hop 1: the ingress.
	srv, rawURL := serveRawIngress(b, js, rawSecret, func(*http.Request) string { return "raw.in.key" })

	var wg sync.WaitGroup
	stage := func(cons jetstream.Consumer, handle func(jetstream.Msg) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					if err := handle(m); err != nil {
						_ = m.Nak()
						continue
					}
					_ = m.DoubleAck(ctx)
				}
			}
		}()
	}
	// Hop 2: the ledger — republish on the event stream (PubAck), ack.
	stage(in, func(m jetstream.Msg) error {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		_, err := js.Publish(ctx, "raw.ev.key", m.Data(), jetstream.WithMsgID(id))
		return err
	})
	// Hop 3: the renderer — post to Slack, ack.
	slackClient := &http.Client{Timeout: 30 * time.Second}
	stage(ev, func(m jetstream.Msg) error {
		form := url.Values{"channel": {"C0RAWBENCH"}, "text": {string(m.Data())}}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.slack.URL()+"chat.postMessage", bytes.NewBufferString(form.Encode()))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Authorization", "Bearer "+slackfake.Token)
		resp, err := slackClient.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("chat.postMessage: %d", resp.StatusCode)
		}
		return nil
	})
	b.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
		nc.Close()
	})
	return &rawPath{url: rawURL, client: &http.Client{Timeout: 30 * time.Second}}
}

func (r *rawPath) send(ctx context.Context, token string) error {
	body := []byte(token)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("X-Hub-Signature-256", githubSignature(rawSecret, body))
	req.Header.Set("X-GitHub-Delivery", token)
	resp, err := r.client.Do(req)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("raw ingress answered %d", resp.StatusCode)
	}
	return nil
}
