//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
)

// The footprint's fixed load (E2E_BENCHTIME does not size it).
const (
	// footprintRate is the signed webhooks offered a second: about half
	// of a 2-core machine's pipeline for one event at a time, never its
	// limit (the soak measures what is held per event handled, not a
	// backlog), and still far above any team's traffic, so that 30
	// minutes stand for months of it.
	footprintRate = 25.0
	// footprintItems are the work items the comments spread over.
	footprintItems = 50
	// footprintSettle is how long a started system is left alone before
	// its idle memory is read: the services' start-up garbage collected,
	// their first timers run.
	footprintSettle = 15 * time.Second
	// footprintLoad is the load window whose second half gives the
	// memory under load; it is the soak's warm-up too.
	footprintLoad = 60 * time.Second
	// footprintSample is the soak's sampling interval.
	footprintSample = 10 * time.Second
	// footprintStarts are the starts timed of each kind; the median is
	// reported (the first pays for a cold page cache).
	footprintStarts = 5
	// growthLimit is the most a service may grow per 100k events handled,
	// as a share of its idle RSS. 100k events are months of a team's
	// traffic, longer than a process lives between two upgrades; what
	// grows slower than 5 % of the idle size over them is lost in the
	// garbage collector's own swing (GOGC=100 lets the heap double
	// before a collection), what grows faster is a leak that an operator
	// would see as a climbing memory graph.
	growthLimit = 0.05
	// judgedEvents are the fewest events a soak's fitted samples must
	// span for the check to judge: a slope per 100k events fitted over
	// fewer is an extrapolation of more than five times, which turns a
	// process's last settling after its start (pages touched once, a
	// first timer) into a leak.
	judgedEvents = 20_000
)

// BenchmarkFootprint measures what the-loop costs a machine to start and to
// keep running (issue 30's footprint):
//
//   - start/up: `the-loop up` (the real binary, all five services and the
//     embedded JetStream server, on a fresh store each time) from exec to
//     its /readyz answering 200, polled every 10 ms; the median of
//     footprintStarts starts, in ready-ms (and ns/op).
//   - start/raw: the baseline, the nats-server the e2e tests build with
//     JetStream on a fresh store (sync_interval always, as up's) from exec
//     to a client connected and answered its JetStream account info.
//   - rss/up: up's one process, resident memory (VmRSS, MiB) idle after
//     footprintSettle, and under footprintRate signed issue_comment
//     webhooks (fresh comments by an authorized person over
//     footprintItems work items, so every delivery is a new event): the
//     mean of the samples of the second half of footprintLoad; hwm-MiB is
//     its peak (VmHWM) by then, anon-*-MiB the part of the RSS that is
//     the process's own (RssAnon: not the binary's pages, which processes
//     running the same binary share), heap-*-MiB the Go heap in use
//     (go_memstats_heap_inuse_bytes on /metrics).
//   - rss/services: the same with the five services as separate processes
//     on a nats-server process (as BenchmarkEndToEnd runs them, one
//     replica each, authorization on), so that each service's memory is
//     its own: rss-idle-MiB-<process>, rss-load-MiB-<process>,
//     anon-{idle,load}-MiB-<process>, hwm-MiB-<process>, and rss-idle-MiB,
//     rss-load-MiB, anon-idle-MiB, anon-load-MiB summed over them and the
//     nats-server.
//   - rss/raw: the baseline of both, the nats-server of that run alone,
//     which carries the same traffic: what JetStream itself holds.
//   - soak: the same load on the separate processes for SOAK (default
//     30m) after the load window, every process's RSS and Go heap sampled
//     every footprintSample; the least-squares slope of each against the
//     hours (rss-slope-MiB-per-h-<process>) and against the events
//     handled (rss-slope-MiB-per-100k-<process>, anon-slope-…,
//     heap-slope-MiB-per-100k-<process>), the events handled (deliveries
//     answered 202) and the most messages the pipeline's consumers held
//     at once (max-pending). The slopes are fitted to the samples after
//     the soak's first fifth (a warm-up). The benchmark fails when a
//     service's RSS or heap grows faster than growthLimit of its idle RSS
//     per 100k events by more than twice the slope's standard error
//     (growsBeyond: the figure of a leak, not of the garbage collector's
//     sawtooth), provided the fitted samples span judgedEvents events (a
//     short SOAK reports its slopes without judging them).
//
// The dispatcher spawns no session (LOOP_DISPATCHER_SPAWN=labeled, the
// default; no work item carries the label): sessions are tmux and agent
// processes of their own, and 50 of them typing on a shared 2-core machine
// would measure the machine. The slack-renderer's pacer is shortened to
// 20 ms (Slack's one post a second per channel would make it the backlog).
//
// `make bench` runs it once (scripts/bench.sh; SOAK passed through) and
// prints start/up against start/raw and rss/{up,services} against
// rss/raw, and a footprint block. Alone:
//
//	SOAK=3m go test -tags e2e -run '^$' -bench Footprint -benchtime 1x -timeout 1h ./test/e2e/
func BenchmarkFootprint(b *testing.B) {
	soak := 30 * time.Minute
	if s := os.Getenv("SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			b.Fatalf("SOAK=%q: want a duration such as 30m (%v)", s, err)
		}
		soak = d
	}
	_, natsBin := binaries(b)

	// Start to ready, the two kinds alternating so that both see the
	// same machine.
	var upReady, rawReady []time.Duration
	for range footprintStarts {
		u, loop, env, logPath := prepareUp(b)
		r := execUp(b, loop, env, logPath, "http://"+u.admin+"/readyz", u.client)
		r.stop()
		upReady = append(upReady, r.ready)
		rawReady = append(rawReady, natsReady(b, natsBin))
	}
	b.Logf("start to ready: up %v, raw %v", upReady, rawReady)

	// up's one process; stopped before the separate processes start, so
	// that it takes no CPU from their run.
	up := startUp(b)
	upLoad := newCommentLoad(b, up.gh, "Codertocat/Hello-World", "Codertocat", up.webhook, intakeSecret)
	upJS, err := jetstream.New(up.natsConn(b, "bench-footprint"))
	if err != nil {
		b.Fatal(err)
	}
	upMeter := []meter{{name: "up", pid: func() int { return up.run.pid }, metrics: "http://" + up.admin + "/metrics"}}
	upFP := measureFootprint(b, upMeter, upLoad, upJS, 0)
	up.run.stop()

	c := startCluster(b, clusterOptions{logLevel: "warn", replicas: 1, env: []string{
		"LOOP_DISPATCHER_SPAWN=labeled", "LOOP_SLACK_POST_INTERVAL=20ms",
	}})
	c.addIssues(footprintItems)
	nc, err := nats.Connect(fmt.Sprintf("nats://127.0.0.1:%d", c.natsPort), c.natsOptions(b, "bench-footprint")...)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		b.Fatal(err)
	}
	var meters []meter
	for _, p := range append([]*proc{c.nats}, c.procs...) {
		m := meter{name: strings.TrimSuffix(p.name, "-0"), pid: p.pid}
		if p.admin != "" {
			m.metrics = "http://" + p.admin + "/metrics"
		}
		meters = append(meters, m)
	}
	all := append([]*proc{c.nats}, c.procs...)
	startsBefore := map[string]int{}
	for _, p := range all {
		startsBefore[p.name] = p.startCount()
	}
	fp := measureFootprint(b, meters, newCommentLoad(b, c.gh, repoName, alice, c.webhook, webhookSecret), js, soak)
	for _, p := range all {
		if n := p.startCount() - startsBefore[p.name]; n > 0 {
			b.Errorf("%s restarted %d times during the run: its figures are of several processes\n%s", p.name, n, p.tail(defaultProcessLogMax))
		}
	}

	b.Run("start", func(b *testing.B) {
		for _, v := range []struct {
			name string
			d    []time.Duration
		}{{"up", upReady}, {"raw", rawReady}} {
			b.Run(v.name, func(b *testing.B) {
				m := medianDuration(v.d)
				b.ReportMetric(float64(m)/float64(time.Millisecond), "ready-ms")
				b.ReportMetric(float64(m.Nanoseconds()), "ns/op")
			})
		}
	})
	b.Run("rss", func(b *testing.B) {
		// ns/op of these is the time of a function that only reports:
		// 0 keeps it out of the printed ratios.
		b.Run("up", func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			upFP.report(b, "up", "")
			b.ReportMetric(upFP.idle["up"].heap, "heap-idle-MiB")
			b.ReportMetric(upFP.load["up"].heap, "heap-load-MiB")
		})
		b.Run("services", func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			var idle, load, anonIdle, anonLoad float64
			for _, m := range meters {
				idle += fp.idle[m.name].rss
				load += fp.load[m.name].rss
				anonIdle += fp.idle[m.name].anon
				anonLoad += fp.load[m.name].anon
				fp.report(b, m.name, "-"+m.name)
			}
			// The sums count the pages of the-loop's binary once per
			// service process (RssFile: the kernel keeps one copy); the
			// anonymous memory is each process's own.
			b.ReportMetric(idle, "rss-idle-MiB")
			b.ReportMetric(load, "rss-load-MiB")
			b.ReportMetric(anonIdle, "anon-idle-MiB")
			b.ReportMetric(anonLoad, "anon-load-MiB")
		})
		b.Run("raw", func(b *testing.B) {
			b.ReportMetric(0, "ns/op")
			fp.report(b, "nats-server", "")
		})
	})
	b.Run("soak", func(b *testing.B) {
		b.ReportMetric(float64(fp.events), "events")
		b.ReportMetric(fp.offered, "events/s")
		b.ReportMetric(float64(fp.maxPending), "max-pending")
		b.ReportMetric(fp.refusedPct, "refused-pct")
		if fp.events > 0 {
			b.ReportMetric(float64(fp.elapsed.Nanoseconds())/float64(fp.events), "ns/op")
		}
		fitted := fp.fitted()
		if len(fitted) < 3 {
			if b.N == 1 {
				b.Logf("SOAK=%s: %d samples, too few for a slope", soak, len(fitted))
			}
			return
		}
		spanned := fitted[len(fitted)-1].events - fitted[0].events
		judged := spanned >= judgedEvents
		growths := map[string]growth{}
		for _, m := range meters {
			g := growthOf(fitted, m.name)
			b.ReportMetric(g.rssPerHour, "rss-slope-MiB-per-h-"+m.name)
			b.ReportMetric(g.rssPer100k, "rss-slope-MiB-per-100k-"+m.name)
			b.ReportMetric(g.anonPer100k, "anon-slope-MiB-per-100k-"+m.name)
			if m.metrics != "" {
				b.ReportMetric(g.heapPer100k, "heap-slope-MiB-per-100k-"+m.name)
			}
			if b.N != 1 { // the testing package calls this more than once
				continue
			}
			limit := growthLimit * fp.idle[m.name].rss
			growths[m.name] = g
			// The nats-server is not ours: its streams and buckets hold
			// what they are configured to keep (reported, not judged).
			if m.name == "nats-server" || !judged {
				continue
			}
			if growsBeyond(g.rssPer100k, g.rssSE, limit) {
				b.Errorf("%s's RSS grows %.3f ± %.3f MiB per 100k events handled, beyond %.0f %% of its idle %.1f MiB (%.3f MiB)",
					m.name, g.rssPer100k, g.rssSE, 100*growthLimit, fp.idle[m.name].rss, limit)
			}
			if m.metrics != "" && growsBeyond(g.heapPer100k, g.heapSE, limit) {
				b.Errorf("%s's Go heap grows %.3f ± %.3f MiB per 100k events handled, beyond %.0f %% of its idle RSS %.1f MiB (%.3f MiB)",
					m.name, g.heapPer100k, g.heapSE, 100*growthLimit, fp.idle[m.name].rss, limit)
			}
		}
		// After the errors: a benchmark's log is cut after 10 lines.
		if b.N == 1 {
			title := fmt.Sprintf("soak: slopes fitted over %d samples spanning %d events", len(fitted), spanned)
			if !judged {
				title += fmt.Sprintf(" (fewer than %d: not judged)", judgedEvents)
			}
			fp.logSeries(b, title, meters, growths)
		}
	})
}

// natsReady starts the nats-server at bin with JetStream on a fresh store
// and returns the time from exec until a client connected and JetStream
// answered its account info; the server is stopped before it returns.
func natsReady(b *testing.B, bin string) time.Duration {
	b.Helper()
	dir := b.TempDir()
	port := freePortTB(b)
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf("listen: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n",
		port, filepath.Join(dir, "jetstream"))), 0o600); err != nil {
		b.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-c", conf)
	cmd.Env = baseEnv()
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	for time.Since(began) < time.Minute {
		if ready(url) {
			return time.Since(began)
		}
		select {
		case <-exited:
			b.Fatalf("nats-server exited:\n%s", out.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	b.Fatalf("nats-server not ready after 1m:\n%s", out.String())
	return 0
}

// ready says whether the server at url takes a connection and serves
// JetStream.
func ready(url string) bool {
	nc, err := nats.Connect(url, nats.Timeout(time.Second), nats.NoReconnect())
	if err != nil {
		return false
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = js.AccountInfo(ctx)
	return err == nil
}

func medianDuration(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pid is the process's current pid (0 when it is not running).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// startCount is how many times the process was started.
func (p *proc) startCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.starts
}

// commentLoad sends signed issue_comment deliveries, each of a fresh
// comment by login, round robin over footprintItems work items it opens on
// gh: every delivery is a new event for the pipeline, as a person's comment
// is.
type commentLoad struct {
	gh          *ghfake.Server
	repo, login string
	issues      []int
	url, secret string
	client      *http.Client

	seq, accepted, refused atomic.Int64
}

func newCommentLoad(b *testing.B, gh *ghfake.Server, repo, login, url, secret string) *commentLoad {
	l := &commentLoad{gh: gh, repo: repo, login: login, url: url, secret: secret,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConns: 64, MaxIdleConnsPerHost: 64}}}
	for i := range footprintItems {
		l.issues = append(l.issues, gh.AddIssue(repo, login, fmt.Sprintf("footprint work item %d", i), "").Number)
	}
	b.Cleanup(l.client.CloseIdleConnections)
	return l
}

// send sends one delivery: 202 counts as an event handled, 503 (the intake
// fell behind) as refused; any other answer but a duplicate's 200 is an
// error.
func (l *commentLoad) send(ctx context.Context) error {
	n := int(l.seq.Add(1))
	cm := l.gh.AddComment(l.repo, l.issues[n%len(l.issues)], l.login, fmt.Sprintf("footprint comment %d", n))
	body := l.gh.CommentWebhook(cm)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, l.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	id := deliveryID(0xf007, n)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-GitHub-Event", "issue_comment")
	req.Header.Set("X-GitHub-Delivery", id)
	req.Header.Set("X-Hub-Signature-256", githubSignature(l.secret, body))
	resp, err := l.client.Do(req)
	if err != nil {
		return fmt.Errorf("delivery %s: %w", id, err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusAccepted:
		l.accepted.Add(1)
	case http.StatusServiceUnavailable:
		l.refused.Add(1)
	case http.StatusOK:
	default:
		return fmt.Errorf("delivery %s answered %d: %s", id, resp.StatusCode, answer)
	}
	return nil
}

// meter reads one process's memory.
type meter struct {
	name string
	pid  func() int
	// metrics is its Prometheus endpoint ("" for the nats-server).
	metrics string
}

// memSample is one process's memory, in MiB.
type memSample struct {
	rss, hwm, heap float64
	// anon is the part of rss that is the process's own (RssAnon), not
	// pages of a file it maps, such as the-loop's binary, which the
	// kernel keeps once for every process that runs it.
	anon float64
}

const mib = 1 << 20

// read reads the process's VmRSS and VmHWM (/proc/<pid>/status) and its Go
// heap in use (go_memstats_heap_inuse_bytes: the spans holding objects,
// whatever the runtime kept of freed ones or gave back to the kernel).
func (m meter) read(client *http.Client) (memSample, error) {
	var s memSample
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", m.pid()))
	if err != nil {
		return s, fmt.Errorf("%s: %w", m.name, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			s.rss = kb * 1024 / mib
		case "VmHWM:":
			s.hwm = kb * 1024 / mib
		case "RssAnon:":
			s.anon = kb * 1024 / mib
		}
	}
	if m.metrics == "" {
		return s, nil
	}
	resp, err := client.Get(m.metrics)
	if err != nil {
		return s, fmt.Errorf("%s: %w", m.name, err)
	}
	defer resp.Body.Close()
	sc = bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_memstats_heap_inuse_bytes "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				return s, fmt.Errorf("%s: go_memstats_heap_inuse_bytes %q: %w", m.name, v, err)
			}
			s.heap = n / mib
			return s, nil
		}
	}
	return s, fmt.Errorf("%s: no go_memstats_heap_inuse_bytes on %s", m.name, m.metrics)
}

// readAll reads every meter.
func readAll(b *testing.B, meters []meter, client *http.Client) map[string]memSample {
	b.Helper()
	out := map[string]memSample{}
	for _, m := range meters {
		s, err := m.read(client)
		if err != nil {
			b.Fatal(err)
		}
		out[m.name] = s
	}
	return out
}

// soakSample is every process's memory at one moment of the soak.
type soakSample struct {
	at     time.Duration // since the soak began
	events int64         // handled by then
	rss    map[string]float64
	anon   map[string]float64
	heap   map[string]float64
}

// footprint is what measureFootprint read.
type footprint struct {
	idle, load map[string]memSample // means of the samples
	hwm        map[string]float64   // VmHWM at the end of the load window
	soak       []soakSample
	events     int64
	offered    float64
	refusedPct float64
	elapsed    time.Duration
	maxPending int
}

// report reports process proc's memory in MiB, each metric's name ending
// in suffix: RSS and its anonymous part idle and under load, and its peak.
func (fp *footprint) report(b *testing.B, proc, suffix string) {
	b.ReportMetric(fp.idle[proc].rss, "rss-idle-MiB"+suffix)
	b.ReportMetric(fp.load[proc].rss, "rss-load-MiB"+suffix)
	b.ReportMetric(fp.idle[proc].anon, "anon-idle-MiB"+suffix)
	b.ReportMetric(fp.load[proc].anon, "anon-load-MiB"+suffix)
	b.ReportMetric(fp.hwm[proc], "hwm-MiB"+suffix)
}

// measureFootprint leaves the processes of meters idle for footprintSettle
// and reads their idle memory (the mean of five samples a second apart);
// then offers load at footprintRate for footprintLoad and soak, reading
// their memory under load (the mean of the samples every 2 s of the second
// half of footprintLoad) and then every footprintSample for the soak.
// Afterwards it waits for the pipeline's consumers to catch up.
func measureFootprint(b *testing.B, meters []meter, load *commentLoad, js jetstream.JetStream, soak time.Duration) *footprint {
	b.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	fp := &footprint{load: map[string]memSample{}, hwm: map[string]float64{}}
	mean := func(samples []map[string]memSample) map[string]memSample {
		out := map[string]memSample{}
		for _, s := range samples {
			for name, v := range s {
				o := out[name]
				o.rss += v.rss / float64(len(samples))
				o.anon += v.anon / float64(len(samples))
				o.heap += v.heap / float64(len(samples))
				o.hwm = max(o.hwm, v.hwm)
				out[name] = o
			}
		}
		return out
	}
	time.Sleep(footprintSettle)
	var idle []map[string]memSample
	for i := range 5 {
		if i > 0 {
			time.Sleep(time.Second)
		}
		idle = append(idle, readAll(b, meters, client))
	}
	fp.idle = mean(idle)

	ctx := context.Background()
	type paced struct {
		offered float64
		err     error
	}
	done := make(chan paced, 1)
	began := time.Now()
	go func() {
		offered, err := runPaced(ctx, footprintRate, footprintLoad+soak, load.send)
		done <- paced{offered, err}
	}()
	pending := func() int {
		n := 0
		for _, stream := range pipelineConsumers {
			for _, p := range pendingOf(ctx, js, stream) {
				n += p.total
			}
		}
		return n
	}
	var under []map[string]memSample
	for at := footprintLoad / 2; at < footprintLoad; at += 2 * time.Second {
		time.Sleep(time.Until(began.Add(at)))
		under = append(under, readAll(b, meters, client))
		fp.maxPending = max(fp.maxPending, pending())
	}
	time.Sleep(time.Until(began.Add(footprintLoad)))
	fp.load = mean(under)
	for name, s := range readAll(b, meters, client) {
		fp.hwm[name] = s.hwm
	}
	if soak > 0 {
		for at := time.Duration(0); at <= soak; at += footprintSample {
			time.Sleep(time.Until(began.Add(footprintLoad + at)))
			s := soakSample{at: time.Since(began) - footprintLoad, events: load.accepted.Load(),
				rss: map[string]float64{}, anon: map[string]float64{}, heap: map[string]float64{}}
			for name, v := range readAll(b, meters, client) {
				s.rss[name], s.anon[name], s.heap[name] = v.rss, v.anon, v.heap
			}
			fp.soak = append(fp.soak, s)
			fp.maxPending = max(fp.maxPending, pending())
		}
	}
	p := <-done
	fp.elapsed = time.Since(began)
	if p.err != nil {
		b.Fatalf("the load: %v", p.err)
	}
	fp.offered = p.offered
	fp.events = load.accepted.Load()
	fp.refusedPct = 100 * float64(load.refused.Load()) / float64(max(load.seq.Load(), 1))
	// Every event through every consumer: the figures are of a system
	// that kept up, not of a backlog.
	deadline := time.Now().Add(2 * time.Minute)
	for n := pending(); n > 0; n = pending() {
		if time.Now().After(deadline) {
			b.Errorf("the pipeline still holds %d messages 2m after the load: it did not keep up with %.0f events/s", n, footprintRate)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fp
}

// growth is one process's slopes over the soak.
type growth struct {
	rssPerHour          float64 // MiB per hour
	rssPer100k, rssSE   float64 // MiB per 100k events, and its standard error
	anonPer100k         float64
	heapPer100k, heapSE float64
}

// fitted are the soak's samples the slopes are fitted to: all but its
// first fifth, a warm-up after the load window's (the processes' caches
// and buffers fill up to the load's working set in the first minutes).
func (fp *footprint) fitted() []soakSample {
	return fp.soak[len(fp.soak)/5:]
}

// logSeries logs, under title, five of the soak's samples, evenly spaced,
// and its last: RSS, its anonymous part and the Go heap of every process,
// MiB, against the events handled; then each one's slopes with their
// standard errors and its limit (in ten lines: a benchmark's log is cut
// after 10).
func (fp *footprint) logSeries(b *testing.B, title string, meters []meter, growths map[string]growth) {
	step := max(1, (len(fp.soak)+4)/5)
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s; MiB: RSS/its anonymous part (Go heap in use)\n%8s %8s", title, "min", "events")
	for _, m := range meters {
		fmt.Fprintf(&sb, " %22s", m.name)
	}
	for i, s := range fp.soak {
		if i%step != 0 && i != len(fp.soak)-1 {
			continue
		}
		fmt.Fprintf(&sb, "\n%8.1f %8d", s.at.Minutes(), s.events)
		for _, m := range meters {
			if m.metrics == "" {
				fmt.Fprintf(&sb, " %13.1f/%5.1f   ", s.rss[m.name], s.anon[m.name])
			} else {
				fmt.Fprintf(&sb, " %6.1f/%5.1f (%6.1f)", s.rss[m.name], s.anon[m.name], s.heap[m.name])
			}
		}
	}
	fmt.Fprintf(&sb, "\n%17s", "slope/100k, RSS:")
	for _, m := range meters {
		fmt.Fprintf(&sb, " %22s", fmt.Sprintf("%.2f±%.2f", growths[m.name].rssPer100k, growths[m.name].rssSE))
	}
	fmt.Fprintf(&sb, "\n%17s", "heap; limit:")
	for _, m := range meters {
		g := fmt.Sprintf("%.2f±%.2f; %.2f", growths[m.name].heapPer100k, growths[m.name].heapSE, growthLimit*fp.idle[m.name].rss)
		if m.metrics == "" {
			g = "-"
		}
		fmt.Fprintf(&sb, " %22s", g)
	}
	b.Log(sb.String())
}

func growthOf(samples []soakSample, name string) growth {
	var hours, events, rss, anon, heap []float64
	for _, s := range samples {
		hours = append(hours, s.at.Hours())
		events = append(events, float64(s.events)/1e5)
		rss = append(rss, s.rss[name])
		anon = append(anon, s.anon[name])
		heap = append(heap, s.heap[name])
	}
	var g growth
	g.rssPerHour, _ = fitSlope(hours, rss)
	g.rssPer100k, g.rssSE = fitSlope(events, rss)
	g.anonPer100k, _ = fitSlope(events, anon)
	g.heapPer100k, g.heapSE = fitSlope(events, heap)
	return g
}

// fitSlope is the least-squares slope of y on x and its standard error
// (NaN with fewer than three points, or x constant).
func fitSlope(x, y []float64) (slope, se float64) {
	n := float64(len(x))
	if len(x) < 3 || len(x) != len(y) {
		return math.NaN(), math.NaN()
	}
	var mx, my float64
	for i := range x {
		mx += x[i] / n
		my += y[i] / n
	}
	var sxx, sxy float64
	for i := range x {
		sxx += (x[i] - mx) * (x[i] - mx)
		sxy += (x[i] - mx) * (y[i] - my)
	}
	if sxx == 0 {
		return math.NaN(), math.NaN()
	}
	slope = sxy / sxx
	var ssr float64
	for i := range x {
		r := y[i] - (my + slope*(x[i]-mx))
		ssr += r * r
	}
	return slope, math.Sqrt(ssr / (n - 2) / sxx)
}

// growsBeyond says whether a slope is above limit by more than twice its
// standard error: growth a short or noisy soak cannot explain by the
// garbage collector's sawtooth (the samples are not independent, so the
// error is if anything understated, and the check errs towards failing).
func growsBeyond(slope, se, limit float64) bool {
	return !math.IsNaN(slope) && slope-2*se > limit
}

// TestGrowthCheck shows that BenchmarkFootprint's growth check can fail: a
// 20 MiB process whose memory swings by a garbage collector's sawtooth
// passes, one that also keeps 2 MiB more per 100k events (10 % of its
// idle size) fails.
func TestGrowthCheck(t *testing.T) {
	const idle = 20.0
	limit := growthLimit * idle
	series := func(perEvent float64) (x, y []float64) {
		for i := range 180 { // 30 minutes, every 10 s, 25 events a second
			ev := float64(i) * 250 / 1e5
			saw := 3 * float64(i%7) / 7 // the heap's rise to the next collection
			x, y = append(x, ev), append(y, idle+saw+perEvent*ev)
		}
		return x, y
	}
	for _, c := range []struct {
		name     string
		perEvent float64
		want     bool
	}{{"flat", 0, false}, {"leaking", 2 * limit, true}} {
		slope, se := fitSlope(series(c.perEvent))
		t.Logf("%s: slope %.3f ± %.3f MiB per 100k events, limit %.3f", c.name, slope, se, limit)
		if got := growsBeyond(slope, se, limit); got != c.want {
			t.Errorf("%s: slope %.3f ± %.3f MiB per 100k events, limit %.3f: grows %v, want %v", c.name, slope, se, limit, got, c.want)
		}
	}
}
