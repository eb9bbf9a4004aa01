//go:build e2e

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/pkg/bus"
)

// The world every end-to-end test shares: one repository on the GitHub
// fake, one Slack channel on the Slack fake, one authorized person with an
// id on each, and the ledger's own login.
const (
	repoName      = "octo/e2e"
	ledgerLogin   = "the-loop-bot"
	ledgerToken   = "ghp_e2e_ledger_token_0000000000000000"
	alice         = "alice"
	aliceSlack    = "UALICE0001"
	slackChannel  = "C0E2ELOOP1"
	webhookSecret = "e2e-webhook-secret"
	signingSecret = "e2e-slack-signing-secret"
	envelopeKey   = "e2e-envelope-key-0123456789abcdef0123456789"
)

// binaries are built once per test binary run (TestMain removes them).
var (
	binOnce          sync.Once
	binDir           string
	loopBin, natsBin string
	binErr           error
)

// defaultProcessLogMax is how much of a process's log a failure shows.
const defaultProcessLogMax = 4000

func binaries(t testing.TB) (loop, nats string) {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "the-loop-e2e-bin-")
		if binErr != nil {
			return
		}
		for _, b := range []struct{ out, pkg string }{
			{"the-loop", "./cmd/the-loop"},
			{"nats-server", "github.com/nats-io/nats-server/v2"},
		} {
			cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, b.out), b.pkg)
			cmd.Dir = "../.."
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
		loopBin, natsBin = filepath.Join(binDir, "the-loop"), filepath.Join(binDir, "nats-server")
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return loopBin, natsBin
}

var (
	unsignedOnce sync.Once
	unsignedBin  string
	unsignedErr  error
)

// unsignedBinary is the-loop built with the tag loop_unsigned_bench: no
// event signed or verified, for the signing benchmark's baseline only.
func unsignedBinary(t testing.TB) string {
	t.Helper()
	binaries(t)
	unsignedOnce.Do(func() {
		unsignedBin = filepath.Join(binDir, "the-loop-unsigned")
		cmd := exec.Command("go", "build", "-tags", "loop_unsigned_bench", "-o", unsignedBin, "./cmd/the-loop")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			unsignedErr = fmt.Errorf("build the unsigned baseline: %v\n%s", err, out)
		}
	})
	if unsignedErr != nil {
		t.Fatal(unsignedErr)
	}
	return unsignedBin
}

// proc is one supervised OS process: restarted whenever it exits until the
// cluster stops, as a container runtime with restart: always would.
type proc struct {
	name    string
	bin     string
	args    []string
	env     []string
	logPath string
	admin   string // host:port of /readyz, "" for nats-server

	mu       sync.Mutex
	cmd      *exec.Cmd
	exited   chan struct{}
	stopping bool
	held     bool // not restarted until release
	starts   int
	kills    int
	// pauses counts clean stops held down until release (pause).
	pauses int
}

func (p *proc) startLocked() error {
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "\n===== start %d of %s at %s =====\n", p.starts+1, p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Env = p.env
	cmd.Stdout, cmd.Stderr = f, f
	// The children die with the test process, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return err
	}
	p.starts++
	p.cmd = cmd
	exited := make(chan struct{})
	p.exited = exited
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
		p.mu.Lock()
		restart := !p.stopping && !p.held && p.cmd == cmd
		p.mu.Unlock()
		if restart {
			time.Sleep(200 * time.Millisecond)
			p.mu.Lock()
			if !p.stopping && !p.held && p.cmd == cmd {
				_ = p.startLocked()
			}
			p.mu.Unlock()
		}
	}()
	return nil
}

// kill SIGKILLs the process; the supervisor starts it again unless held.
// It returns once the killed process has exited.
func (p *proc) kill(hold bool) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.held = hold
	p.kills++
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-exited
}

// pause stops the process cleanly, as a scale-down does (SIGTERM, SIGKILL
// after grace), and keeps it down until release.
func (p *proc) pause(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.held = true
	p.pauses++
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
}

// release starts a held process again.
func (p *proc) release() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.held = false
	select {
	case <-p.exited:
		return p.startLocked()
	default:
		return nil
	}
}

// stop ends the process with SIGTERM (SIGKILL after grace) and keeps it
// down; it returns the exit error of the last run.
func (p *proc) stop(grace time.Duration) error {
	p.mu.Lock()
	p.stopping = true
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	select {
	case <-exited:
		return nil // already down (killed, not restarted)
	default:
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(grace):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-exited
		return fmt.Errorf("%s did not stop within %s after SIGTERM", p.name, grace)
	}
	if st := cmd.ProcessState; st != nil && !st.Success() {
		return fmt.Errorf("%s exited %v after SIGTERM", p.name, st)
	}
	return nil
}

func (p *proc) tail(n int) string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// cluster is NATS, the five services as processes and the two fakes.
type cluster struct {
	t        testing.TB
	dir      string
	natsPort int   // the first server's client port
	nats     *proc // the first server
	// natsProcs are every nats-server (one, or the cluster's nodes), with
	// their client and monitoring ports.
	natsProcs  []*proc
	natsPorts  []int
	natsMon    []int
	natsRoutes []int   // the cluster's route ports
	procs      []*proc // services, in start order
	gh         *ghfake.Server
	slack      *slackfake.Server
	standIn    string   // the stand-in harness's record directory
	sockets    []string // each dispatcher's LOOP_TMUX_DIR
	webhook    string   // ingress-github's POST /gh-webhook URL
	events     string   // ingress-slack's POST /slack/events URL
	client     *http.Client
	issues     []int // work-item issue numbers on the fake
	stopOnce   sync.Once
	// auth is the directory `the-loop auth init` wrote the bus identities
	// to ("" with authorization off): auth/nats/<identity>.nk.
	auth string
	// workdir is the agent sessions' working directory.
	workdir string
	// env is the environment every service process starts with.
	env []string
	// config is the operator config file every service watches.
	config string
}

type clusterOptions struct {
	// replicas of ledger-writer, slack-renderer and dispatcher (default 2).
	replicas int
	// logLevel of the services (default info).
	logLevel string
	// natsNodes is the number of nats-server processes: 1 (default) or a
	// JetStream cluster with routes on loopback, streams, consumers and
	// buckets replicated on every node (LOOP_STREAM_REPLICAS).
	natsNodes int
	// noAuth runs NATS without authorization (the bench's baseline);
	// by default every service connects as its own identity.
	noAuth bool
	// unsigned runs a the-loop built with the tag loop_unsigned_bench,
	// which neither signs nor verifies events: the signing benchmark's
	// baseline.
	unsigned bool
	// obey makes the stand-in agent run the commands its prompts carry
	// (standin.RunMarker), as a prompt-injected agent would.
	obey bool
	// slackGates makes the Slack channel a place where gates are answered:
	// it is granted gate.feedback (a reply at a human gate answers it, and
	// approval notifications carry the Approve / Request changes buttons,
	// whose presses events mode receives) and shows the gates' notifications
	// and the sessions' questions.
	slackGates bool
	// echo makes the GitHub fake deliver the webhook of every comment
	// written through its API — the ledger's records, a comment posted with
	// the ledger's token — as GitHub does. Without it only the tests' own
	// comments are delivered, and a record never comes back to
	// ingress-github (so a gate answered in Slack does not move).
	echo bool
	// env is more environment for every service process, after the
	// cluster's own (a later variable wins: exec keeps the last).
	env []string
}

// seed is the file of identity's NKey seed ("" with authorization off).
func (c *cluster) seed(identity string) string {
	if c.auth == "" {
		return ""
	}
	return filepath.Join(c.auth, "nats", identity+".nk")
}

// handedOut are the ports freePortTB returned in this test binary: a port
// is free once its probe closes, so the kernel may offer it again to the
// next probe — and a cluster gave one port to both a dispatcher's admin
// server and its session endpoint.
var (
	handedOutMu sync.Mutex
	handedOut   = map[int]bool{}
)

func freePortTB(t testing.TB) int {
	t.Helper()
	handedOutMu.Lock()
	defer handedOutMu.Unlock()
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut[port] {
			handedOut[port] = true
			return port
		}
	}
}

// baseEnv is the test's environment without any LOOP_* variable (the
// services refuse unknown ones) and outside any tmux the test may run in.
func baseEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LOOP_") || strings.HasPrefix(kv, "TMUX=") || strings.HasPrefix(kv, "TMUX_PANE=") {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// newTmuxDir is a directory for a dispatcher's tmux sockets
// (LOOP_TMUX_DIR), its servers killed when t ends.
func newTmuxDir(t testing.TB) string { return tmuxtest.Dir(t) }

// startCluster starts everything and waits for every service's /readyz.
func startCluster(t testing.TB, o clusterOptions) *cluster {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (package tmux): the dispatcher runs sessions in it")
	}
	if o.replicas == 0 {
		o.replicas = 2
	}
	if o.logLevel == "" {
		o.logLevel = "info"
	}
	loop, natsB := binaries(t)
	if o.unsigned {
		loop = unsignedBinary(t)
	}
	dir, err := os.MkdirTemp("", "the-loop-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{t: t, dir: dir, client: &http.Client{Timeout: 30 * time.Second}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("process logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})

	// The fakes, in this process. No rate limits: the bench measures the
	// system, and the chaos test floods one token.
	c.gh = ghfake.New(t, ghfake.WithPrimaryLimit(0), ghfake.WithSecondaryLimits(0, 0))
	c.gh.AddRepo(repoName)
	c.gh.AddToken(ledgerToken, ledgerLogin)
	c.gh.SetAuthorAssociation(repoName, alice, "MEMBER")
	c.slack = slackfake.New(t)

	// NATS: file store, sync_interval always. The deployment's way of
	// authorization: `the-loop auth init` issues one NKey per identity and
	// the authorization block nats.conf includes.
	if !o.noAuth {
		c.auth = filepath.Join(dir, "auth")
		init := exec.Command(loop, "auth", "init", c.auth)
		init.Env = baseEnv()
		if out, err := init.CombinedOutput(); err != nil {
			t.Fatalf("the-loop auth init: %v\n%s", err, out)
		}
	}
	c.startNATS(natsB, o.natsNodes)
	t.Cleanup(func() {
		for _, p := range c.natsProcs {
			p.stop(10 * time.Second)
		}
	})
	c.waitNATS(60 * time.Second)
	if len(c.natsRoutes) > 0 && c.auth != "" {
		c.routeRefusesStrangers()
	}
	if c.auth != "" {
		// The operator's provisioning step: the identities' public keys
		// in the signers bucket, which every service waits for
		// (docs/decisions/099-signed-events.md).
		sig := exec.Command(loop, "auth", "signers", filepath.Join(c.auth, "signers.json"))
		sig.Env = append(c.cliEnv("operator"), fmt.Sprintf("LOOP_STREAM_REPLICAS=%d", len(c.natsProcs)))
		if out, err := sig.CombinedOutput(); err != nil {
			t.Fatalf("the-loop auth signers: %v\n%s", err, out)
		}
	}

	// The operator config: Slack on in events mode; Alice (GitHub and
	// Slack) authorized. Never the ledger's own login: agents post with
	// its token.
	cfgPath := filepath.Join(dir, "the-loop.yaml")
	subscribe, publish := "[comment.human]", "[work-item.reply]"
	if o.slackGates {
		subscribe = "[comment.human, session.awaiting_input, decision-pending, phase-approval-pending]"
		publish = "[work-item.reply, gate.feedback]"
	}
	opCfg := fmt.Sprintf(`version: "0.7.0"
routing:
  authorizedUsers:
    - {github: %s, slack: %s, name: Alice}
channels:
  ledger: github
  slack:
    enabled: true
    channel: %s
    subscribe: %s
    publish: %s
    read:
      mode: events
`, alice, aliceSlack, slackChannel, subscribe, publish)
	c.config = cfgPath
	if err := os.WriteFile(cfgPath, []byte(opCfg), 0o600); err != nil {
		t.Fatal(err)
	}

	// The stand-in harness: this test binary (TestMain), run through a
	// wrapper that tells it where to write. LOOP_TEST_STANDIN_DIR cannot
	// be handed to the services themselves: they refuse unknown LOOP_*.
	c.standIn = filepath.Join(dir, "standin")
	if err := os.MkdirAll(c.standIn, 0o700); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "harness.sh")
	obey := ""
	if o.obey {
		obey = standin.EnvObey + "=1 "
	}
	script := fmt.Sprintf("#!/bin/sh\n%s=%q %q \"$@\"\n%s%s=%q exec %q \"$@\"\n",
		envBootMark, c.standIn, exe, obey, tmuxtest.EnvDir, c.standIn, exe)
	if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	workdir := filepath.Join(dir, "work")
	if err := os.MkdirAll(workdir, 0o700); err != nil {
		t.Fatal(err)
	}
	c.workdir = workdir

	common := append(baseEnv(),
		"LOOP_NATS_URL="+c.natsURLs(0),
		"LOOP_CONFIG="+cfgPath,
		"LOOP_LOG_LEVEL="+o.logLevel,
		"LOOP_GITHUB_TOKEN="+ledgerToken,
		"LOOP_GITHUB_API_URL="+c.gh.URL(),
		"LOOP_GITHUB_LOGIN="+ledgerLogin,
		"LOOP_GITHUB_WEBHOOK_SECRET="+webhookSecret,
		// The fake enforces no limit here; the pacer must not be what
		// is measured.
		"LOOP_GITHUB_WRITES_PER_MINUTE=1000000",
		"LOOP_GITHUB_WRITES_PER_HOUR=10000000",
		"LOOP_ENVELOPE_KEY="+envelopeKey,
		"LOOP_SLACK_BOT_TOKEN="+slackfake.Token,
		"LOOP_SLACK_SIGNING_SECRET="+signingSecret,
		"LOOP_SLACK_API_URL="+c.slack.URL(),
		"LOOP_HARNESS_BINARY="+wrapper,
		"LOOP_DISPATCHER_WORKDIR="+workdir,
		// The GitHub fake serves no repositories: each work item gets a
		// directory of its own, without git.
		"LOOP_WORKSPACE_STRATEGY=dir",
		// The sessions' HOME (Claude Code's settings): the test's own.
		"HOME="+filepath.Join(dir, "home"),
		"LOOP_DISPATCHER_SPAWN=always",
	)
	common = append(common, o.env...)
	c.env = common
	if len(c.natsProcs) > 1 {
		common = append(common, fmt.Sprintf("LOOP_STREAM_REPLICAS=%d", len(c.natsProcs)))
	}
	add := func(svc string, replica int, extra ...string) *proc {
		admin := fmt.Sprintf("127.0.0.1:%d", freePortTB(t))
		// Spread over the servers: each process lists them starting from
		// another one (the later LOOP_NATS_URL wins: exec keeps the last).
		env := append(append([]string(nil), common...), "LOOP_ADMIN_ADDR="+admin, "LOOP_NATS_URL="+c.natsURLs(len(c.procs)))
		if c.auth != "" {
			env = append(env, "LOOP_NATS_NKEY_FILE="+c.seed(svc))
		}
		env = append(env, extra...)
		name := fmt.Sprintf("%s-%d", svc, replica)
		p := &proc{name: name, bin: loop, args: []string{"serve", svc}, env: env,
			logPath: filepath.Join(dir, name+".log"), admin: admin}
		c.procs = append(c.procs, p)
		return p
	}
	for i := range o.replicas {
		add("ledger-writer", i)
	}
	for i := range o.replicas {
		add("slack-renderer", i)
	}
	for i := range o.replicas {
		sock := newTmuxDir(t)
		c.sockets = append(c.sockets, sock)
		// A fixed session endpoint per replica: tmux sessions outlive a
		// restart of their dispatcher and keep its address.
		add("dispatcher", i, "LOOP_TMUX_DIR="+sock, fmt.Sprintf("LOOP_DISPATCHER_HOST=dispatcher-%d", i),
			fmt.Sprintf("LOOP_SESSION_ADDR=127.0.0.1:%d", freePortTB(t)))
	}
	ghAddr := fmt.Sprintf("127.0.0.1:%d", freePortTB(t))
	add("ingress-github", 0, "LOOP_GITHUB_WEBHOOK_ADDR="+ghAddr)
	c.webhook = "http://" + ghAddr + "/gh-webhook"
	slAddr := fmt.Sprintf("127.0.0.1:%d", freePortTB(t))
	add("ingress-slack", 0, "LOOP_SLACK_EVENTS_ADDR="+slAddr)
	c.events = "http://" + slAddr + "/slack/events"

	// Provisioning is the operator's act, before the services
	// (docs/decisions/098-provisioning-is-the-operators.md).
	c.provision(loop, common)

	t.Cleanup(c.stop)
	for _, p := range c.procs {
		p.mu.Lock()
		err := p.startLocked()
		p.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range c.procs {
		c.waitReady(p, 120*time.Second)
	}
	if o.echo {
		c.echoWebhooks()
	}
	return c
}

// provision runs `the-loop provision` with env, as the operator when
// authorization is on, as compose's provision step does.
func (c *cluster) provision(loop string, env []string) {
	c.t.Helper()
	cmd := exec.Command(loop, "provision")
	cmd.Env = env
	if c.auth != "" {
		cmd.Env = append(append([]string(nil), env...), "LOOP_NATS_NKEY_FILE="+c.seed(bus.IdentityOperator))
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		c.t.Fatalf("the-loop provision: %v\n%s", err, out)
	}
}

// echoDelivery is the X-Hub-Delivery of the echo of comment id.
func echoDelivery(id int64) string { return deliveryID(0xec40, int(id)) }

// echoWebhooks delivers, signed and in write order, the issue_comment
// webhook of every comment written through the GitHub fake's API, until the
// test ends.
func (c *cluster) echoWebhooks() {
	ctx, cancel := context.WithCancel(context.Background())
	queue := make(chan int64, 1024)
	done := make(chan struct{})
	remove := c.gh.AfterWrite(func(w ghfake.Write) {
		if w.Kind != ghfake.WriteComment {
			return
		}
		select {
		case queue <- w.ID:
		case <-ctx.Done():
		}
	})
	go func() {
		defer close(done)
		for {
			var id int64
			select {
			case <-ctx.Done():
				return
			case id = <-queue:
			}
			cm, ok := c.gh.Comment(id)
			if !ok {
				continue
			}
			payload := c.gh.CommentWebhook(cm)
			delivery := echoDelivery(id)
			// A refusal (4xx) is ingress-github's answer to GitHub, and
			// its records say why; nothing to do here.
			_ = c.deliver(ctx, "echo "+delivery, func() (*http.Request, error) {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.webhook, bytes.NewReader(payload))
				if err != nil {
					return nil, err
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-GitHub-Event", "issue_comment")
				req.Header.Set("X-GitHub-Delivery", delivery)
				req.Header.Set("X-Hub-Signature-256", ghfake.SignWebhook(webhookSecret, payload))
				return req, nil
			}, http.StatusAccepted)
		}
	}()
	c.t.Cleanup(func() { remove(); cancel(); <-done })
}

// proc is the service process called name ("ingress-github-0").
func (c *cluster) proc(name string) *proc {
	for _, p := range c.procs {
		if p.name == name {
			return p
		}
	}
	c.t.Fatalf("no process %s", name)
	return nil
}

// stop drains every service with SIGTERM; a service that does not exit 0
// fails the test (a drain is part of what is tested).
func (c *cluster) stop() {
	c.stopOnce.Do(func() {
		var wg sync.WaitGroup
		errs := make(chan error, len(c.procs))
		for _, p := range c.procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.stop(60 * time.Second); err != nil {
					errs <- fmt.Errorf("%v\n%s", err, p.tail(defaultProcessLogMax))
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			c.t.Error(err)
		}
	})
}

func (c *cluster) waitNATS(d time.Duration) {
	c.t.Helper()
	for i, port := range c.natsPorts {
		c.waitNATSNode(i, port, d)
	}
	// A cluster serves JetStream once it has a meta leader and every
	// server is current: each server's /healthz says so.
	if len(c.natsProcs) > 1 {
		for i, mon := range c.natsMon {
			url := fmt.Sprintf("http://127.0.0.1:%d/healthz", mon)
			if !testkit.Poll(d, func() bool {
				resp, err := c.client.Get(url)
				if err != nil {
					return false
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				return resp.StatusCode == http.StatusOK
			}) {
				c.t.Fatalf("%s not healthy on %s\n%s", c.natsProcs[i].name, url, c.natsProcs[i].tail(defaultProcessLogMax))
			}
		}
	}
}

func (c *cluster) waitNATSNode(i, port int, d time.Duration) {
	c.t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(d)
	for {
		conn, err := net.Dial("tcp", addr)
		if err == nil {
			conn.Close()
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("%s did not listen on %s\n%s", c.natsProcs[i].name, addr, c.natsProcs[i].tail(defaultProcessLogMax))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startNATS starts nodes nats-server processes (1 when nodes is 0): one
// server, or a JetStream cluster whose routes are on loopback. Each includes
// the authorization block `the-loop auth init` wrote, when there is one.
func (c *cluster) startNATS(bin string, nodes int) {
	c.t.Helper()
	nodes = max(nodes, 1)
	routes := make([]int, nodes)
	for i := range nodes {
		c.natsPorts = append(c.natsPorts, freePortTB(c.t))
		c.natsMon = append(c.natsMon, freePortTB(c.t))
		routes[i] = freePortTB(c.t)
	}
	c.natsPort = c.natsPorts[0]
	if nodes > 1 {
		c.natsRoutes = routes
	}
	if nodes > 1 && c.auth != "" {
		// The deployments' way: the routes and their credential come from
		// scripts/nats-routes.sh, included in the cluster block.
		var hosts []string
		for _, p := range routes {
			hosts = append(hosts, fmt.Sprintf("127.0.0.1:%d", p))
		}
		out, err := exec.Command(filepath.Join("..", "..", "scripts", "nats-routes.sh"), append([]string{c.auth}, hosts...)...).CombinedOutput()
		if err != nil {
			c.t.Fatalf("scripts/nats-routes.sh: %v\n%s", err, out)
		}
	}
	for i := range nodes {
		name := "nats-server"
		if nodes > 1 {
			name = fmt.Sprintf("nats-%d", i+1)
		}
		conf := fmt.Sprintf("server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\njetstream {\n  store_dir: %q\n  sync_interval: always\n}\n",
			name, c.natsPorts[i], c.natsMon[i], filepath.Join(c.dir, "jetstream-"+name))
		switch {
		case nodes > 1 && c.auth != "":
			conf += fmt.Sprintf("cluster {\n  name: e2e\n  listen: 127.0.0.1:%d\n  include \"auth/routes.conf\"\n}\n", routes[i])
		case nodes > 1:
			var rs []string
			for _, p := range routes {
				rs = append(rs, fmt.Sprintf("    nats-route://127.0.0.1:%d", p))
			}
			conf += fmt.Sprintf("cluster {\n  name: e2e\n  listen: 127.0.0.1:%d\n  routes: [\n%s\n  ]\n}\n", routes[i], strings.Join(rs, "\n"))
		}
		if c.auth != "" {
			conf += "include \"auth/auth.conf\"\n"
		}
		path := filepath.Join(c.dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
			c.t.Fatal(err)
		}
		p := &proc{name: name, bin: bin, args: []string{"-c", path}, env: baseEnv(), logPath: filepath.Join(c.dir, name+".log")}
		p.mu.Lock()
		err := p.startLocked()
		p.mu.Unlock()
		if err != nil {
			c.t.Fatal(err)
		}
		c.natsProcs = append(c.natsProcs, p)
	}
	c.nats = c.natsProcs[0]
}

// routeRefusesStrangers opens a route to the first node as a stranger
// would — anything that reaches the port, an agent session among them — and
// expects the server to refuse it: a route is a peer server, trusted with
// every subject around the authorization block, so it needs the cluster's
// route credential.
func (c *cluster) routeRefusesStrangers() {
	c.t.Helper()
	conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", c.natsRoutes[0]), 5*time.Second)
	if err != nil {
		c.t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(conn)
	info, err := r.ReadString('\n')
	if err != nil || !strings.HasPrefix(info, "INFO ") {
		c.t.Fatalf("route port: %q %v", info, err)
	}
	if !strings.Contains(info, `"auth_required":true`) {
		c.t.Fatalf("the route port requires no credential: %s", strings.TrimSpace(info))
	}
	if _, err := conn.Write([]byte("CONNECT {\"verbose\":false,\"pedantic\":false,\"name\":\"stranger\",\"cluster\":\"e2e\"}\r\nPING\r\n")); err != nil {
		c.t.Fatal(err)
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			c.t.Fatalf("a route without the credential was not refused (%v)", err)
		}
		if strings.HasPrefix(line, "-ERR") {
			if !strings.Contains(line, "Authorization Violation") {
				c.t.Fatalf("route refused for another reason: %s", strings.TrimSpace(line))
			}
			c.t.Logf("a route without the cluster's credential is refused: %s", strings.TrimSpace(line))
			return
		}
		if strings.HasPrefix(line, "PONG") {
			c.t.Fatal("a route without the credential was admitted (PONG)")
		}
	}
}

// natsURLs is LOOP_NATS_URL for the k-th process: every server, starting
// from the k-th, so that the processes spread over a cluster.
func (c *cluster) natsURLs(k int) string {
	var urls []string
	for i := range c.natsPorts {
		urls = append(urls, fmt.Sprintf("nats://127.0.0.1:%d", c.natsPorts[(i+k)%len(c.natsPorts)]))
	}
	return strings.Join(urls, ",")
}

func (c *cluster) ready(p *proc) bool {
	resp, err := c.client.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func (c *cluster) waitReady(p *proc, d time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(d)
	for !c.ready(p) {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s not ready on http://%s/readyz after %s\n%s", p.name, p.admin, d, p.tail(defaultProcessLogMax))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// addIssues opens n work items on the GitHub fake.
func (c *cluster) addIssues(n int) {
	for i := range n {
		is := c.gh.AddIssue(repoName, alice, fmt.Sprintf("e2e work item %d", i), "")
		c.issues = append(c.issues, is.Number)
	}
}

func ref(number int) string { return fmt.Sprintf("github:%s#%d", repoName, number) }

// deliveryID is a GUID-shaped X-GitHub-Delivery.
func deliveryID(a, b int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012x", a, b)
}

// githubComment stores a comment by Alice on the fake (it is on GitHub
// before GitHub tells anyone) and delivers its issue_comment webhook,
// signed, until ingress-github accepts it (as a sender retrying a 5xx or a
// refused connection). It returns when the delivery was accepted.
func (c *cluster) githubComment(ctx context.Context, number int, delivery, body string) error {
	return c.githubCommentAs(ctx, number, alice, "MEMBER", delivery, body)
}

// githubCommentAs is githubComment by login, whose author_association on
// the repository is assoc.
func (c *cluster) githubCommentAs(ctx context.Context, number int, login, assoc, delivery, body string) error {
	payload, err := c.commentDelivery(number, login, assoc, body)
	if err != nil {
		return err
	}
	sig := githubSignature(webhookSecret, payload)
	return c.deliver(ctx, "webhook "+delivery, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.webhook, bytes.NewReader(payload))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", "issue_comment")
		req.Header.Set("X-GitHub-Delivery", delivery)
		req.Header.Set("X-Hub-Signature-256", sig)
		return req, nil
	}, http.StatusAccepted)
}

// commentDelivery stores login's comment on work item number on the fake
// and returns its issue_comment delivery's payload, not yet sent.
func (c *cluster) commentDelivery(number int, login, assoc, body string) ([]byte, error) {
	cm := c.gh.AddComment(repoName, number, login, body)
	is, _ := c.gh.Issue(repoName, number)
	return json.Marshal(map[string]any{
		"action": "created",
		"issue": map[string]any{"number": number, "title": is.Title, "html_url": is.HTMLURL,
			"state": "open", "user": map[string]any{"login": alice}, "labels": []any{}},
		"comment": map[string]any{"id": cm.ID, "html_url": cm.HTMLURL, "body": cm.Body,
			"user": map[string]any{"login": login}, "author_association": assoc,
			"created_at": cm.CreatedAt.UTC().Format(time.RFC3339), "updated_at": cm.UpdatedAt.UTC().Format(time.RFC3339)},
		"repository": map[string]any{"id": 1, "full_name": repoName, "html_url": "https://github.com/" + repoName},
		"sender":     map[string]any{"login": login},
	})
}

// slackReply stores Alice's reply in a thread on the Slack fake and
// delivers its Events API callback, signed, until ingress-slack answers
// 200. It returns the reply's ts.
func (c *cluster) slackReply(ctx context.Context, threadTS, text string) (string, error) {
	ts, mk, err := c.slackReplyRequest(ctx, threadTS, text)
	if err != nil {
		return "", err
	}
	return ts, c.deliver(ctx, "slack event "+ts, mk, http.StatusOK)
}

// slackReplyRequest stores Alice's reply in a thread on the Slack fake and
// returns its ts and a maker of its Events API callback, signed when made.
func (c *cluster) slackReplyRequest(ctx context.Context, threadTS, text string) (string, func() (*http.Request, error), error) {
	ts := c.slack.AddMessage(slackChannel, threadTS, aliceSlack, text)
	body, err := json.Marshal(map[string]any{
		"token": "ignored", "team_id": slackfake.TeamID, "api_app_id": "A0E2ELOOP", "type": "event_callback",
		"event_id": "Ev" + strings.ReplaceAll(ts, ".", ""), "event_time": time.Now().Unix(),
		"event": map[string]any{"type": "message", "user": aliceSlack, "channel": slackChannel,
			"ts": ts, "thread_ts": threadTS, "text": text},
	})
	if err != nil {
		return "", nil, err
	}
	return ts, func() (*http.Request, error) {
		now := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, []byte(signingSecret))
		fmt.Fprintf(mac, "v0:%s:", now)
		mac.Write(body)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.events, bytes.NewReader(body))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Slack-Request-Timestamp", now)
		req.Header.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
		return req, nil
	}, nil
}

// deliver sends a request until it is answered with a 2xx (want, or 200
// for a duplicate); a refused connection or a 5xx is retried (the service
// is restarting, or NATS is away), any other answer is an error.
func (c *cluster) deliver(ctx context.Context, what string, mk func() (*http.Request, error), want int) error {
	for attempt := 0; ; attempt++ {
		req, err := mk()
		if err != nil {
			return err
		}
		resp, err := c.client.Do(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == want:
				return nil
			case resp.StatusCode >= 200 && resp.StatusCode < 300:
				// A retry of a delivery whose first attempt was
				// published before its answer was lost: dropped as
				// a duplicate, and a success for the sender.
				return nil
			case resp.StatusCode < 500:
				return fmt.Errorf("%s: answered %d: %s", what, resp.StatusCode, b)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: gave up after %d attempts: %w (last: %v)", what, attempt+1, ctx.Err(), err)
		case <-time.After(time.Duration(min(attempt+1, 10)) * 100 * time.Millisecond):
		}
	}
}

// threadOf is the Slack thread of a work item: the top-level message the
// slack-renderer posted for it (its metadata names the work item).
func (c *cluster) threadOf(number int) (string, bool) {
	for _, m := range c.slack.TopLevel(slackChannel) {
		if m.BotID != "" && m.Metadata != nil && fmt.Sprint(m.Metadata.EventPayload["work_item"]) == ref(number) {
			return m.TS, true
		}
	}
	return "", false
}

// tokens name each event the tests send, so every place it surfaces (a
// GitHub comment, a Slack message, a prompt) can be counted: work item w,
// event n (0 is the work item's start comment).
var tokenRE = regexp.MustCompile(`e2etok-w(\d+)-n(\d+)-x`)

func tokenFor(number, n int) string { return fmt.Sprintf("e2etok-w%d-n%d-x", number, n) }

type tok struct{ w, n int }

func tokensIn(s string) []tok {
	var out []tok
	seen := map[tok]bool{}
	for _, m := range tokenRE.FindAllStringSubmatch(s, -1) {
		w, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		k := tok{w, n}
		if !seen[k] { // a prompt may quote its event twice (excerpt and text)
			seen[k] = true
			out = append(out, k)
		}
	}
	return out
}

// observed is what the outside world holds once the run settles.
type observed struct {
	github  map[tok]int   // comments on the fake carrying the token
	slack   map[tok]int   // messages posted by the bot carrying it
	prompts map[tok]int   // prompts (boot or typed) carrying it
	order   map[int][]int // per work item: prompt tokens in arrival order
}

func (c *cluster) observe() observed {
	o := observed{github: map[tok]int{}, slack: map[tok]int{}, prompts: map[tok]int{}, order: map[int][]int{}}
	for _, n := range c.issues {
		for _, cm := range c.gh.Comments(repoName, n) {
			for _, k := range tokensIn(cm.Body) {
				o.github[k]++
			}
		}
	}
	for _, m := range c.slack.Messages(slackChannel) {
		if m.BotID == "" {
			continue // a person's message, put there by the test
		}
		for _, k := range tokensIn(m.Text + string(m.Blocks)) {
			o.slack[k]++
		}
	}
	// Counted from the stand-in's own records: its boots (a spawn carries
	// the start comment; a respawn after a takeover boots with the event
	// being delivered) and its submitted pastes.
	for _, b := range tmuxtest.Boots(c.t, c.standIn) {
		for _, k := range tokensIn(b.Prompt) {
			o.prompts[k]++
		}
	}
	// Ordered from the inputs file, where the wrapper marks each boot
	// before the stand-in starts: one file, one order.
	for _, in := range tmuxtest.Inputs(c.t, c.standIn) {
		for _, k := range tokensIn(in.Text) {
			if !strings.HasPrefix(in.SessionID, bootPrefix) {
				o.prompts[k]++
			}
			o.order[k.w] = append(o.order[k.w], k.n)
		}
	}
	return o
}

// checkExactlyOnce fails t unless every tally has nothing lost and nothing
// duplicated and no work item's prompts came out of order (bad, from
// outOfOrder).
func checkExactlyOnce(t testing.TB, bad []string, ts ...tally) {
	t.Helper()
	for _, x := range ts {
		if x.lost != 0 || x.duplicate != 0 {
			t.Errorf("%s: %d lost, %d duplicated", x.name, x.lost, x.duplicate)
		}
	}
	if len(bad) > 0 {
		t.Errorf("prompts out of order: %s", strings.Join(bad, "; "))
	}
}

// monitoredLeader is the leader of stream as the server monitored at mon
// (host:port) reports it, or "" when it cannot tell.
func monitoredLeader(client *http.Client, mon, stream string) string {
	resp, err := client.Get("http://" + mon + "/jsz?accounts=true&streams=true")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var jsz struct {
		Accounts []struct {
			Streams []struct {
				Name    string `json:"name"`
				Cluster struct {
					Leader string `json:"leader"`
				} `json:"cluster"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if json.NewDecoder(resp.Body).Decode(&jsz) != nil {
		return ""
	}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if s.Name == stream && s.Cluster.Leader != "" {
				return s.Cluster.Leader
			}
		}
	}
	return ""
}

// tally compares what was observed with what each sent event must produce.
type tally struct {
	name                            string
	sent, recorded, lost, duplicate int
	missing, dups                   []tok
}

func count(name string, want []tok, got map[tok]int) tally {
	t := tally{name: name, sent: len(want)}
	wanted := map[tok]bool{}
	for _, k := range want {
		wanted[k] = true
		switch n := got[k]; {
		case n == 0:
			t.lost++
			t.missing = append(t.missing, k)
		case n > 1:
			t.duplicate += n - 1
			t.dups = append(t.dups, k)
			t.recorded++
		default:
			t.recorded++
		}
	}
	// Anything carrying a token that must not surface here is a duplicate
	// too (e.g. a Slack reply echoed back to Slack).
	for k, n := range got {
		if !wanted[k] {
			t.duplicate += n
			t.dups = append(t.dups, k)
		}
	}
	sort.Slice(t.missing, func(i, j int) bool { return less(t.missing[i], t.missing[j]) })
	sort.Slice(t.dups, func(i, j int) bool { return less(t.dups[i], t.dups[j]) })
	return t
}

func less(a, b tok) bool { return a.w < b.w || a.w == b.w && a.n < b.n }

func (t tally) String() string {
	s := fmt.Sprintf("%-16s expected %5d  got %5d  lost %4d  duplicated %4d", t.name, t.sent, t.recorded, t.lost, t.duplicate)
	if len(t.missing) > 0 {
		s += fmt.Sprintf("\n    lost: %v", head(t.missing, 20))
	}
	if len(t.dups) > 0 {
		s += fmt.Sprintf("\n    duplicated: %v", head(t.dups, 20))
	}
	return s
}

func head(ks []tok, n int) string {
	var parts []string
	for i, k := range ks {
		if i == n {
			parts = append(parts, fmt.Sprintf("… %d more", len(ks)-n))
			break
		}
		parts = append(parts, fmt.Sprintf("w%d/n%d", k.w, k.n))
	}
	return strings.Join(parts, " ")
}

// outOfOrder lists the work items whose prompts did not arrive in the
// order their events were sent (n ascending). A repeat is the tally's
// business (a duplicate), not an order violation, so only first arrivals
// count here.
func outOfOrder(order map[int][]int) []string {
	var out []string
	for w, ns := range order {
		seen := map[int]bool{}
		last := -1
		for _, n := range ns {
			if seen[n] {
				continue
			}
			seen[n] = true
			if n < last {
				out = append(out, fmt.Sprintf("w%d: %v", w, ns))
				break
			}
			last = n
		}
	}
	sort.Strings(out)
	return out
}
