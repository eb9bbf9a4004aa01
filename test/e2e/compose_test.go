//go:build e2e && compose

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// The compose run (`make compose-e2e`): the repository's docker-compose.yml,
// unchanged, on this machine's Docker engine. An override file swaps the
// image sources — images built here from deploy/Dockerfile without pulling
// anything — gives the dispatcher the test's harness and plain workspace
// directories (the GitHub fake serves no repositories), and joins the
// project to a network the test made, where the GitHub and Slack fakes of
// this process are reached on the network's gateway. The per-service env
// files (THE_LOOP_SECRETS) carry the tokens and the fakes' URLs, as an
// operator's would carry GitHub Enterprise's.
//
// The session image carries this machine's Claude Code when it has one
// (HARNESS=prebuilt: scripts/harness.sh copies the `claude` on PATH, or
// LOOP_TEST_CLAUDE, into the build context), and the stand-in agent beside
// it as standin-agent, which the dispatcher runs as its claude harness;
// without Claude Code the stand-in is the image's claude
// (HARNESS=standin), and the checks of the real harness are skipped unless
// LOOP_TEST_REQUIRE_CLAUDE=1 makes that a failure.
const (
	composeProject = "the-loop-e2e"
	composeNetwork = "the-loop-e2e"
	composeSubnet  = "172.29.73.0/24"
	composeGateway = "172.29.73.1"
	// composeBase is the Debian base the images are built on, made with
	// mmdebstrap from Debian's packages and imported (no registry); its tag
	// names the recipe (composeBasePackages).
	composeBase         = "the-loop-e2e/debian:bookworm-1"
	composeBasePackages = "tmux,git,ca-certificates,wget"
	composeServiceImage = "the-loop-e2e/service:local"
	composeSessionImage = "the-loop-e2e/session:local"
	composeWait         = 3 * time.Minute
	// Events per work item in the kill phase, over composeItems work items.
	composeItems    = 4
	composeEvents   = 12
	composeKillGap  = 6 * time.Second
	composeLabel    = "the-loop: auto-execute"
	composeStandIn  = "/workspace/.standin"
	composeRepoRoot = "../.."
	// composePluginDir is where the session image installs the loop's
	// plugin, read-only (LOOP_HARNESS_PLUGIN_DIR in deploy/Dockerfile);
	// composeStandInAgent the stand-in beside a real claude (STANDIN=1).
	composePluginDir    = "/usr/local/share/the-loop/plugin"
	composeStandInAgent = "/usr/local/bin/standin-agent"
	// composeSessionUser is the sessions' user and group in the sessions
	// service (docker-compose.yml).
	composeSessionUser = "65533:65532"
	// composeDispatcherUID is the dispatcher's uid, the one the session
	// host serves.
	composeDispatcherUID = "65532"
	// composeHarness is where HARNESS=prebuilt takes Claude Code from,
	// under the repository root (the build context).
	composeHarness = "bin/harness/claude"
)

// composeRun is one compose project under test.
type composeRun struct {
	t       *testing.T
	dir     string
	env     []string // docker compose's environment
	files   []string // -f arguments
	c       *cluster // the fakes and the senders, shared with the process suite
	secrets string   // THE_LOOP_SECRETS: identities, env files, the route credential
	op      *bus.Conn
	graphs  *graphstate.Store
	// claude is the version the host's Claude Code reports, the one the
	// session image carries; "" when the image has the stand-in alone.
	claude string
	// story is the gate story's work item and its session's boot.
	story *storyBoot
}

// storyBoot is a work item and the boot record of its session.
type storyBoot struct {
	n    int
	boot standin.Boot
}

// TestCompose brings the real docker-compose.yml up on this machine's Docker
// engine and drives it from the outside: the full gate story of one work
// item through a real tmux session of the stand-in agent inside the
// dispatcher's container (start, ask, reply, approve, complete); then events
// on several work items while one container of each service, and NATS, is
// SIGKILLed in turn and brought back by its restart policy, with nothing
// lost or duplicated; then the ledger-writer scaled from 1 to 2 replicas,
// which share the partitions, one taking them all over when the other stops; then the
// project again as its three-node JetStream cluster profile, the stream
// leader's server SIGKILLed while a work item's events flow. It prints what
// it counted.
func TestCompose(t *testing.T) {
	if _, err := exec.LookPath("docker"); err != nil {
		t.Skip("docker is not installed: scripts/docker-env.sh installs and starts the engine and Compose")
	}
	if out, err := composeCmd(os.Environ(), "version").CombinedOutput(); err != nil {
		t.Fatalf("docker compose: %v\n%s(scripts/docker-env.sh builds one into bin/tools)", err, out)
	}
	began := time.Now()
	r := startCompose(t)
	t.Logf("compose project up in %s", time.Since(began).Round(time.Second))

	t.Run("GateStory", r.gateStory)
	t.Run("SessionImage", r.sessionImage)
	t.Run("SessionsContainer", r.sessionsContainer)
	if t.Failed() {
		return
	}
	t.Run("KillEachService", r.killEachService)
	t.Run("ScaleLedgerWriter", r.scaleLedgerWriter)
	t.Run("ClusterProfile", r.clusterProfile)
	t.Logf("compose run: %s in all", time.Since(began).Round(time.Second))
}

func startCompose(t *testing.T) *composeRun {
	t.Helper()
	dir := t.TempDir()
	r := &composeRun{t: t, dir: dir}
	loop, _ := binaries(t) // the host's the-loop: auth init and the operator's connection

	// The images: the-loop and nats-server built on the host, static, on
	// bases that need no registry.
	buildStatic(t, "./cmd/the-loop", filepath.Join(composeRepoRoot, "bin", "linux", "the-loop"))
	natsCtx := filepath.Join(dir, "nats-image")
	buildStatic(t, "github.com/nats-io/nats-server/v2", filepath.Join(natsCtx, "nats-server"))
	ensureBase(t)
	r.claude = hostClaude(t)
	natsImage := "the-loop-e2e/nats:" + natsVersion(t)
	dockerfile := "FROM " + composeBase + "\nCOPY nats-server /usr/local/bin/nats-server\nENTRYPOINT [\"/usr/local/bin/nats-server\"]\n"
	if err := os.WriteFile(filepath.Join(natsCtx, "Dockerfile"), []byte(dockerfile), 0o600); err != nil {
		t.Fatal(err)
	}
	mustRun(t, dockerCmd(append(os.Environ(), "DOCKER_BUILDKIT=0"), "build", "-q", "-t", natsImage, natsCtx))

	// The fakes, in this process, reached from the containers through the
	// network's gateway.
	// A previous run's leftovers: its containers and volumes (found by
	// the project's name), then its network.
	mustRun(t, composeCmd(os.Environ(), "-p", composeProject, "down", "--volumes", "--remove-orphans", "--timeout", "5"), "ignore")
	mustRun(t, dockerCmd(nil, "network", "rm", composeNetwork), "ignore")
	mustRun(t, dockerCmd(nil, "network", "create", "--subnet", composeSubnet, "--gateway", composeGateway, composeNetwork))
	t.Cleanup(func() { _ = dockerCmd(nil, "network", "rm", composeNetwork).Run() })
	c := &cluster{t: t, dir: dir, client: &http.Client{Timeout: 30 * time.Second}}
	c.gh = ghfake.New(t, ghfake.WithPrimaryLimit(0), ghfake.WithSecondaryLimits(0, 0))
	c.gh.AddRepo(repoName)
	c.gh.AddToken(ledgerToken, ledgerLogin)
	c.gh.SetAuthorAssociation(repoName, alice, "MEMBER")
	c.slack = slackfake.New(t)
	ghURL := forward(t, c.gh.URL())
	slackURL := forward(t, c.slack.URL())
	c.webhook = "http://127.0.0.1:8787/gh-webhook"
	c.events = "http://127.0.0.1:8788/slack/events"
	c.standIn = filepath.Join(dir, "standin")
	r.c = c

	// The operator's files: the bus identities, each service's env file,
	// the operator config.
	secrets := filepath.Join(dir, "secrets")
	// The containers run as uid 65532 and read their seed from a
	// read-only bind mount of the file: auth init lets that uid read it,
	// with no chown by hand (docs/deploy.md).
	mustRun(t, exec.Command(loop, "auth", "init", secrets))
	github := []string{"LOOP_GITHUB_TOKEN=" + ledgerToken, "LOOP_GITHUB_API_URL=" + ghURL, "LOOP_GITHUB_LOGIN=" + ledgerLogin}
	slack := []string{"LOOP_SLACK_BOT_TOKEN=" + slackfake.Token, "LOOP_SLACK_API_URL=" + slackURL}
	envFiles := map[string][]string{
		"ingress-github": append(github, "LOOP_GITHUB_WEBHOOK_SECRET="+webhookSecret, "LOOP_ENVELOPE_KEY="+envelopeKey),
		"ledger-writer": append(github, "LOOP_ENVELOPE_KEY="+envelopeKey,
			"LOOP_GITHUB_WRITES_PER_MINUTE=100000", "LOOP_GITHUB_WRITES_PER_HOUR=1000000"),
		"ingress-slack":  append(slack, "LOOP_SLACK_SIGNING_SECRET="+signingSecret),
		"slack-renderer": append(slack, "LOOP_SLACK_POST_INTERVAL=50ms"),
		"dispatcher":     nil,
	}
	for name, lines := range envFiles {
		if err := os.WriteFile(filepath.Join(secrets, name+".env"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfg := filepath.Join(dir, "the-loop.yaml")
	opCfg := fmt.Sprintf(`version: "0.7.0"
routing:
  authorizedUsers:
    - {github: %s, slack: %s, name: Alice}
channels:
  ledger: github
  slack:
    enabled: true
    channel: %s
    subscribe: [comment.human, session.awaiting_input, decision-pending, phase-approval-pending, work-item-complete]
    publish: [work-item.reply, gate.feedback]
    read:
      mode: events
`, alice, aliceSlack, slackChannel)
	if err := os.WriteFile(cfg, []byte(opCfg), 0o644); err != nil {
		t.Fatal(err)
	}

	override := filepath.Join(dir, "compose.override.yml")
	build := func(args string) string {
		return "    build:\n      network: none\n      args: {BINARY: prebuilt, " + args + "}\n"
	}
	ov := "# Image sources built here, no registry; the dispatcher's harness and workspaces.\nservices:\n"
	for _, name := range []string{"nats-volumes", "nats", "nats-2", "nats-3"} {
		ov += "  " + name + ":\n    image: " + natsImage + "\n"
	}
	for _, name := range []string{"provision", "ingress-github", "ingress-slack", "ledger-writer", "slack-renderer"} {
		ov += "  " + name + ":\n    image: " + composeServiceImage + "\n" + build("STATIC_BASE: scratch")
	}
	// The GitHub fake serves no repositories: each work item gets a plain
	// directory (operators keep the default, worktree).
	session, env := "HARNESS: standin", "      LOOP_WORKSPACE_STRATEGY: dir\n"
	if r.claude != "" {
		// The real Claude Code is the image's claude; the stand-in,
		// beside it, is the agent the dispatcher runs as its claude
		// harness (trust and plugin flag as for Claude Code).
		session = "HARNESS: prebuilt, STANDIN: \"1\""
		env += "      LOOP_HARNESS_BINARY: " + composeStandInAgent + "\n"
	}
	ov += "  dispatcher:\n    image: " + composeSessionImage + "\n" + build("SESSION_BASE: \""+composeBase+"\", "+session) +
		"    environment:\n" + env
	// The sessions' container runs the same image, built once for the
	// dispatcher.
	ov += "  sessions:\n    image: " + composeSessionImage + "\n" + build("SESSION_BASE: \""+composeBase+"\", "+session)
	ov += "networks:\n  default:\n    name: " + composeNetwork + "\n    external: true\n"
	if err := os.WriteFile(override, []byte(ov), 0o600); err != nil {
		t.Fatal(err)
	}
	compose, err := filepath.Abs(filepath.Join(composeRepoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	r.files = []string{"-f", compose, "-f", override}
	r.secrets = secrets
	r.env = append(os.Environ(), "THE_LOOP_SECRETS="+secrets, "THE_LOOP_CONFIG="+cfg, "DOCKER_BUILDKIT=1")

	t.Cleanup(func() {
		if t.Failed() {
			out, _ := r.composeOut("logs", "--no-color", "--tail", "60")
			t.Logf("compose logs (tail):\n%s", out)
		}
		if os.Getenv("COMPOSE_E2E_KEEP") == "" {
			r.compose("down", "--volumes", "--remove-orphans", "--timeout", "20")
		}
	})
	start := time.Now()
	r.mustCompose("build", "ingress-github", "dispatcher")
	t.Logf("images built in %s", time.Since(start).Round(time.Second))
	start = time.Now()
	natsAddr := r.startNATS(t, "nats")
	r.mustCompose("up", "--detach", "--no-build", "--wait", "--wait-timeout", "300")
	t.Logf("every container healthy (/readyz) in %s", time.Since(start).Round(time.Second))
	r.connect(t, natsAddr)
	return r
}

// startNATS starts the NATS nodes and returns the first node's
// published address. The compose file's own provision step writes the
// streams and the signers (docs/decisions/099-signed-events.md) when the
// services come up after it.
func (r *composeRun) startNATS(t *testing.T, nodes ...string) string {
	t.Helper()
	r.mustCompose(append([]string{"up", "--detach", "--no-build", "--wait", "--wait-timeout", "300"}, nodes...)...)
	port, err := r.composeOut("port", "nats", "4222")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(port)
}

// connect is the operator's connection to the project's NATS (the first
// server) at addr, for reading the graph state.
func (r *composeRun) connect(t *testing.T, addr string) {
	t.Helper()
	op, err := bus.Connect(context.Background(), bus.Options{URL: "nats://" + addr, Name: "compose-e2e",
		Credentials: bus.Credentials{SeedFile: filepath.Join(r.secrets, "nats", bus.IdentityOperator+".nk")}, Identity: bus.IdentityOperator})
	if err != nil {
		t.Fatal(err)
	}
	r.t.Cleanup(op.Close)
	r.op, r.graphs = op, nil
}

// ---- the story ----

// gateStory plays one work item from its label to work-item.complete: the
// agent (the stand-in, obedient) runs `the-loop ask` and `the-loop graph
// complete` inside its tmux session, in the dispatcher's container, through
// the session endpoint on the container's loopback.
func (r *composeRun) gateStory(t *testing.T) {
	c := r.clusterFor(t)
	c.echoWebhooks() // GitHub delivers the ledger's own records back, as it does
	g, ok := graph.Builtin(graph.WorkItemGraph)
	if !ok {
		t.Fatal("no built-in work-item graph")
	}
	n := r.openItem(t, c, "Rate-limit the public API")
	r.comment(t, c, n, fmt.Sprintf("the-loop start\n\nPlease work on this (%s).", tokenFor(n, 0)))
	boot := r.waitBoot(t, n)
	r.story = &storyBoot{n: n, boot: boot}
	t.Logf("session booted in the sessions' container: %s %s, working in %s", boot.Mode, boot.SessionID, boot.Dir)
	r.waitNode(t, n, "phase-selection")
	root := r.waitThread(t, c, n)
	r.comment(t, c, n, "the-loop execute")
	r.waitNode(t, n, "requirements")

	// ask: the agent's question reaches GitHub (the ledger) and Slack.
	question := "Per token or per IP? " + tokenFor(n, 1)
	ran := r.agentRuns(t, c, n, "the-loop ask --question '"+question+"'")
	if ran.Exit != 0 || !strings.Contains(ran.Output, "https://github.com/"+repoName+"/issues/") {
		t.Fatalf("the-loop ask in the session: exit %d\n%s", ran.Exit, ran.Output)
	}
	r.waitSlack(t, c, root, question)
	t.Logf("ask: the question is recorded (%s) and in the Slack thread", strings.TrimSpace(ran.Output))

	// reply: Alice answers in Slack; the session is told.
	reply := "Per token, 100 a minute. " + tokenFor(n, 2)
	ctx, cancel := context.WithTimeout(context.Background(), composeWait)
	defer cancel()
	if _, err := c.slackReply(ctx, root, reply); err != nil {
		t.Fatal(err)
	}
	r.waitInput(t, tokenFor(n, 2))

	// approve: the agent completes requirements; Alice presses Approve.
	ran = r.agentRuns(t, c, n, "echo 'Per token, 100 a minute.' > requirements.md && the-loop graph complete "+ref(n))
	if ran.Exit != 0 {
		t.Fatalf("graph complete: exit %d\n%s", ran.Exit, ran.Output)
	}
	st := r.waitNode(t, n, "requirements-approval")
	msg, value := r.gateMessage(t, c, root, st.GateVisit(g))
	r.press(t, c, root, msg, value)
	st = r.waitNode(t, n, "design")
	if len(st.ApprovedBy) != 1 || st.ApprovedBy[0].Login != alice || st.ApprovedBy[0].Provenance.Channel != "slack" {
		t.Fatalf("approvedBy = %+v, want alice via Slack", st.ApprovedBy)
	}

	// complete: design (approved by a typed reply), implementation, review.
	if ran = r.agentRuns(t, c, n, "echo 'A token bucket per token.' > design.md && the-loop graph complete "+ref(n)); ran.Exit != 0 {
		t.Fatalf("graph complete: exit %d\n%s", ran.Exit, ran.Output)
	}
	r.waitNode(t, n, "design-approval")
	if _, err := c.slackReply(ctx, root, "approved"); err != nil {
		t.Fatal(err)
	}
	r.waitNode(t, n, "implementation")
	if ran = r.agentRuns(t, c, n, "the-loop graph complete "+ref(n)); ran.Exit != 0 {
		t.Fatalf("graph complete: exit %d\n%s", ran.Exit, ran.Output)
	}
	r.waitNode(t, n, "review")
	r.comment(t, c, n, "Reviewed the pull request: ship it")
	st = r.waitNode(t, n, "complete")
	r.waitSlack(t, c, root, string(catalog.WorkItemComplete))
	var approvals []string
	for _, a := range st.ApprovedBy {
		approvals = append(approvals, fmt.Sprintf("%s at %s via %s", a.Login, a.Node, a.Provenance.Channel))
	}
	t.Logf("gate story: start, ask, reply, approve, complete — %s is complete; approvedBy %s", ref(n), strings.Join(approvals, "; "))
}

// ---- the session image ----

// sessionImage checks what the session image gives the gate story's session,
// inside the dispatcher's containers: the loop's plugin installed read-only
// where the dispatcher hands it to the harness, and left as it is by every
// replica at start; the session started with --plugin-dir there, its boot
// prompt's first command resolved to the plugin's file; its checkout
// trusted in the session user's Claude Code config by the replica that
// spawned it; and, when the image carries the real Claude Code, that it
// runs and accepts the plugin.
func (r *composeRun) sessionImage(t *testing.T) {
	if r.story == nil {
		t.Fatal("the gate story's session never booted: nothing to check")
	}
	n, boot := r.story.n, r.story.boot
	out, err := r.composeOut("ps", "--quiet", "dispatcher")
	ids := strings.Fields(out)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no running dispatcher container: %v", err)
	}

	// Every replica found the image's plugin and left it as it is (the
	// directory is root's: a replica that wrote there would fail).
	var spawner string
	for _, id := range ids {
		var installed, trusted bool
		for _, rec := range r.logRecords(t, id) {
			switch {
			case rec["msg"] == "dispatcher: the loop's plugin is installed for sessions" && rec["dir"] == composePluginDir:
				installed = true
			case strings.HasPrefix(fmt.Sprint(rec["msg"]), "dispatcher: the loop's plugin could not be installed"):
				t.Errorf("dispatcher %.12s: %v (%v)", id, rec["msg"], rec["err"])
			case rec["msg"] == "session.workspace_trusted" && rec["work_item"] == ref(n):
				trusted = true
			}
		}
		if !installed {
			t.Errorf("dispatcher %.12s never logged the plugin installed at %s", id, composePluginDir)
		}
		if trusted {
			spawner = id
		}
	}
	ro, err := dockerCmd(nil, "exec", ids[0], "sh", "-c",
		`d="$1"; for p in "$d" "$d/hooks" "$d/hooks/hooks.json" "$d/.the-loop-installed"; do [ -w "$p" ] && echo "$p is writable"; done; stat -c '%U %a' "$d/hooks/hooks.json"`,
		"sh", composePluginDir).CombinedOutput()
	if err != nil || strings.TrimSpace(string(ro)) != "root 644" {
		t.Errorf("the image's plugin is not root's and read-only to the session user: %v\n%s", err, ro)
	}
	t.Logf("plugin: every dispatcher replica (%d) logged it installed at %s; its files are %s, read-only to uid 65532",
		len(ids), composePluginDir, strings.TrimSpace(string(ro)))

	// The session loaded it: --plugin-dir on its argv, the boot prompt's
	// first command resolved to the image's file.
	if !slices.Equal(boot.PluginDirs, []string{composePluginDir}) {
		t.Errorf("the session's --plugin-dir: %q, want [%s] (args %q)", boot.PluginDirs, composePluginDir, boot.Args)
	}
	if len(boot.Plugins) != 1 || boot.Plugins[0].Name != "the-loop" || boot.Plugins[0].Error != "" {
		t.Errorf("the session loaded plugins %+v, want the-loop", boot.Plugins)
	}
	var workOn *standin.Command
	for i := range boot.Commands {
		if boot.Commands[i].Slash == "/the-loop:work-on" {
			workOn = &boot.Commands[i]
		}
	}
	if workOn == nil || !workOn.Found || workOn.File != composePluginDir+"/commands/work-on.md" {
		t.Errorf("/the-loop:work-on resolved to %+v (commands %+v)", workOn, boot.Commands)
	} else {
		t.Logf("session: started with --plugin-dir %s (plugin %s %s); /the-loop:work-on resolved to %s",
			boot.PluginDirs[0], boot.Plugins[0].Name, boot.Plugins[0].Version, workOn.File)
	}

	// The checkout is trusted in the Claude Code config of the session
	// user's home, which the replica that spawned the session wrote on the
	// volume the two containers share, and the session user reads.
	if spawner == "" {
		t.Errorf("no dispatcher replica logged session.workspace_trusted for %s", ref(n))
	} else {
		sess := r.containerOf(t, "sessions")
		home, err := dockerCmd(nil, "exec", sess, "sh", "-c", `getent passwd 65533 | cut -d: -f6; echo "$HOME"`).Output()
		dhome, derr := dockerCmd(nil, "exec", spawner, "sh", "-c", `echo "$HOME"`).Output()
		lines := strings.Fields(string(home))
		if err != nil || derr != nil || len(lines) != 2 || lines[0] != lines[1] || lines[0] != strings.TrimSpace(string(dhome)) {
			t.Fatalf("the session user's home: %q (the dispatcher's HOME %q) %v %v", home, dhome, err, derr)
		}
		cfg := lines[0] + "/.claude.json"
		raw, err := dockerCmd(nil, "exec", "-u", composeSessionUser, sess, "cat", cfg).Output()
		if err != nil {
			t.Fatalf("cat %s as the session user in the sessions' container %.12s: %v", cfg, sess, err)
		}
		var conf struct {
			Projects map[string]struct {
				Trusted   bool `json:"hasTrustDialogAccepted"`
				Onboarded bool `json:"hasCompletedProjectOnboarding"`
			} `json:"projects"`
		}
		if err := json.Unmarshal(raw, &conf); err != nil {
			t.Fatalf("%s: %v\n%s", cfg, err, raw)
		}
		p, ok := conf.Projects[boot.Dir]
		if !ok || !p.Trusted || !p.Onboarded {
			t.Errorf("%s: projects[%q] = %+v (present %v), want hasTrustDialogAccepted and hasCompletedProjectOnboarding\n%s", cfg, boot.Dir, p, ok, raw)
		} else {
			t.Logf("trust: %s, written by dispatcher %.12s and read by the session user, has projects[%q].hasTrustDialogAccepted = true (and hasCompletedProjectOnboarding)", cfg, spawner, boot.Dir)
		}
	}

	// The real harness: it runs, it is the host's version, and it accepts
	// the plugin (with a home of its own: the session user's config stays
	// the dispatcher's).
	if r.claude == "" {
		return // not in this image: hostClaude said so
	}
	version, err := dockerCmd(nil, "exec", ids[0], "claude", "--version").CombinedOutput()
	if err != nil || strings.TrimSpace(string(version)) != r.claude {
		t.Errorf("claude --version in the dispatcher's container: %q %v, want %q (the host's)", version, err, r.claude)
	}
	valid, err := dockerCmd(nil, "exec", ids[0], "sh", "-c", `HOME="$(mktemp -d)" exec claude plugin validate "$1"`, "sh", composePluginDir).CombinedOutput()
	if err != nil || !strings.Contains(string(valid), "Validation passed") {
		t.Errorf("claude plugin validate %s in the dispatcher's container: %v\n%s", composePluginDir, err, valid)
	}
	t.Logf("Claude Code: claude --version in the dispatcher's container prints %q (the host's: %q); claude plugin validate %s: %s",
		strings.TrimSpace(string(version)), r.claude, composePluginDir, lastLine(string(valid)))
}

// logRecords are the JSON log lines of container id.
func (r *composeRun) logRecords(t *testing.T, id string) []map[string]any {
	t.Helper()
	logs, err := dockerCmd(nil, "logs", id).CombinedOutput()
	if err != nil {
		t.Fatalf("docker logs %.12s: %v", id, err)
	}
	var recs []map[string]any
	for _, line := range strings.Split(string(logs), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			recs = append(recs, rec)
		}
	}
	return recs
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// hostClaude copies this machine's Claude Code (LOOP_TEST_CLAUDE, else the
// `claude` on PATH) into the build context for HARNESS=prebuilt and returns
// the version it reports; "" when there is none, which fails the test under
// LOOP_TEST_REQUIRE_CLAUDE=1 (CI).
func hostClaude(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("LOOP_TEST_CLAUDE")
	if bin == "" {
		bin, _ = exec.LookPath("claude")
	} else if abs, err := filepath.Abs(bin); err == nil {
		bin = abs
	}
	if bin == "" {
		if os.Getenv("LOOP_TEST_REQUIRE_CLAUDE") == "1" {
			t.Fatal("LOOP_TEST_REQUIRE_CLAUDE=1 but no Claude Code: put `claude` on PATH or name it in LOOP_TEST_CLAUDE")
		}
		t.Log("Claude Code is not installed (no `claude` on PATH, LOOP_TEST_CLAUDE unset): the session image carries the stand-in alone (HARNESS=standin), and claude --version, claude plugin validate and the host-version check are skipped; LOOP_TEST_REQUIRE_CLAUDE=1 makes this a failure")
		return ""
	}
	version, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	start := time.Now()
	cmd := exec.Command("./scripts/harness.sh", composeHarness)
	cmd.Dir = composeRepoRoot
	cmd.Env = append(os.Environ(), "CLAUDE="+bin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("scripts/harness.sh: %v\n%s", err, out)
	}
	t.Logf("Claude Code %s from %s, for the session image (HARNESS=prebuilt): %s in %s",
		strings.TrimSpace(string(version)), bin, strings.TrimSpace(string(out)), time.Since(start).Round(time.Second))
	return strings.TrimSpace(string(version))
}

// openItem opens an issue by Alice with the auto-execute label and delivers
// its labeled webhook.
func (r *composeRun) openItem(t *testing.T, c *cluster, title string) int {
	t.Helper()
	is := c.gh.AddIssue(repoName, alice, title, "", composeLabel)
	r.webhook(t, c, "issues", deliveryID(is.Number, 900000), c.gh.IssueWebhook("labeled", is, alice, composeLabel))
	return is.Number
}

// comment stores Alice's comment on the fake and delivers its webhook as
// GitHub would send it.
func (r *composeRun) comment(t *testing.T, c *cluster, n int, body string) {
	t.Helper()
	cm := c.gh.AddComment(repoName, n, alice, body)
	r.webhook(t, c, "issue_comment", deliveryID(n, int(cm.ID)), c.gh.CommentWebhook(cm))
}

func (r *composeRun) webhook(t *testing.T, c *cluster, event, delivery string, payload []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), composeWait)
	defer cancel()
	if err := c.deliver(ctx, "webhook "+delivery, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.webhook, bytes.NewReader(payload))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", delivery)
		req.Header.Set("X-Hub-Signature-256", ghfake.SignWebhook(webhookSecret, payload))
		return req, nil
	}, http.StatusAccepted); err != nil {
		t.Fatal(err)
	}
}

// agentRuns has work item n's session run cmd (Alice's comment carries it
// after the stand-in's marker; the rest of the excerpt's line is a shell
// comment) and returns the run's record.
func (r *composeRun) agentRuns(t *testing.T, c *cluster, n int, cmd string) standin.Ran {
	t.Helper()
	before := len(r.runs(t))
	r.comment(t, c, n, standin.RunMarker+cmd+" #")
	var ran *standin.Ran
	if !testkit.Poll(composeWait, func() bool {
		rs := r.runs(t)
		for i := before; i < len(rs); i++ {
			if strings.Contains(rs[i].Command, cmd) {
				ran = &rs[i]
				return true
			}
		}
		return false
	}) {
		t.Fatalf("%s's session never ran %q", ref(n), cmd)
	}
	return *ran
}

// ---- reading the stand-in's records out of the dispatcher's volume ----

// syncStandIn copies the stand-in's records from the workspace volume the
// dispatcher replicas share into r.c.standIn.
func (r *composeRun) syncStandIn(t testing.TB) {
	t.Helper()
	ids, err := r.composeOut("ps", "--quiet", "--all", "dispatcher")
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range strings.Fields(ids) {
		tmp := r.c.standIn + ".new"
		os.RemoveAll(tmp)
		if err := dockerCmd(nil, "cp", id+":"+composeStandIn, tmp).Run(); err != nil {
			continue // not written yet, or this container is being replaced
		}
		os.RemoveAll(r.c.standIn)
		if err := os.Rename(tmp, r.c.standIn); err != nil {
			t.Fatal(err)
		}
		return
	}
	if err := os.MkdirAll(r.c.standIn, 0o700); err != nil {
		t.Fatal(err)
	}
}

func (r *composeRun) runs(t *testing.T) []standin.Ran {
	t.Helper()
	r.syncStandIn(t)
	rs, err := standin.ReadRuns(r.c.standIn)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

func (r *composeRun) waitBoot(t *testing.T, n int) standin.Boot {
	t.Helper()
	var found *standin.Boot
	if !testkit.Poll(composeWait, func() bool {
		r.syncStandIn(t)
		bs, _ := standin.ReadBoots(r.c.standIn)
		for _, b := range bs {
			if strings.Contains(b.Prompt, tokenFor(n, 0)) {
				found = &b
			}
		}
		return found != nil
	}) {
		t.Fatalf("no session booted for %s", ref(n))
	}
	return *found
}

func (r *composeRun) waitInput(t *testing.T, text string) {
	t.Helper()
	if !testkit.Poll(composeWait, func() bool {
		r.syncStandIn(t)
		in, _ := standin.ReadInputs(r.c.standIn)
		for _, i := range in {
			if strings.Contains(i.Text, text) {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no session was told %q", text)
	}
}

// ---- graph, Slack ----

func (r *composeRun) waitNode(t *testing.T, n int, node string) *graph.State {
	t.Helper()
	ctx := context.Background()
	if r.graphs == nil {
		store, err := graphstate.Open(ctx, r.op)
		if err != nil {
			t.Fatal(err)
		}
		r.graphs = store
	}
	var st *graph.State
	if !testkit.Poll(composeWait, func() bool {
		var err error
		st, _, err = r.graphs.Get(ctx, ref(n))
		return err == nil && st != nil && st.Current == node
	}) {
		t.Fatalf("%s is at %+v, want %s", ref(n), st, node)
	}
	return st
}

func (r *composeRun) waitThread(t *testing.T, c *cluster, n int) string {
	t.Helper()
	var ts string
	if !testkit.Poll(composeWait, func() bool {
		var ok bool
		ts, ok = c.threadOf(n)
		return ok
	}) {
		t.Fatalf("no Slack thread for %s", ref(n))
	}
	return ts
}

func (r *composeRun) waitSlack(t *testing.T, c *cluster, root, text string) slackfake.Message {
	t.Helper()
	var found slackfake.Message
	if !testkit.Poll(composeWait, func() bool {
		for _, m := range c.slack.Thread(slackChannel, root) {
			if m.BotID != "" && strings.Contains(m.Text+string(m.Blocks), text) {
				found = m
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no Slack message with %q in thread %s", text, root)
	}
	return found
}

func (r *composeRun) gateMessage(t *testing.T, c *cluster, root, visit string) (slackfake.Message, string) {
	t.Helper()
	var msg slackfake.Message
	var value string
	if !testkit.Poll(composeWait, func() bool {
		for _, m := range c.slack.Thread(slackChannel, root) {
			v, ok := slackmsg.ButtonValue(m.Blocks, slackmsg.ApproveActionID)
			if m.BotID != "" && ok && strings.HasSuffix(v, " "+visit) {
				msg, value = m, v
				return true
			}
		}
		return false
	}) {
		t.Fatalf("no Approve button for visit %s in thread %s", visit, root)
	}
	return msg, value
}

// press is Alice pressing Approve on msg, posted to ingress-slack's
// interactions endpoint signed as Slack signs it.
func (r *composeRun) press(t *testing.T, c *cluster, root string, msg slackfake.Message, value string) {
	t.Helper()
	s := &attackSuite{c: c, ctx: context.Background(), threads: map[int]string{0: root}}
	s.press(t, 0, msg.TS, msg.User, msg.BotID, value)
}

// ---- kills ----

// killEachService sends events on composeItems work items while one
// container of each service, and NATS, is SIGKILLed in turn — as a crash or
// the kernel's OOM killer would end it; `docker kill` is an operator's stop,
// which Docker's restart policy honours by leaving the container down — and
// checks that each comes back by its restart policy and that every event
// reached GitHub, Slack and its session exactly once, in order.
func (r *composeRun) killEachService(t *testing.T) {
	c := r.clusterFor(t)
	var setup []sentEvent
	for i := range composeItems {
		n := r.openItem(t, c, fmt.Sprintf("compose work item %d", i))
		c.issues = append(c.issues, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	for _, n := range c.issues {
		r.comment(t, c, n, fmt.Sprintf("the-loop start\n\nPlease work on this (%s).", tokenFor(n, 0)))
		setup = append(setup, sentEvent{tok{n, 0}, viaGitHub})
	}
	threads := map[int]string{}
	for _, n := range c.issues {
		threads[n] = r.waitThread(t, c, n)
		r.waitBoot(t, n)
		r.waitNode(t, n, "phase-selection")
	}
	// Past the phase-selection gate, to an agent node: a Slack reply is
	// then the work item's reply, for its session (at a human gate it
	// would be the gate's answer).
	for _, n := range c.issues {
		r.comment(t, c, n, "the-loop execute")
	}
	for _, n := range c.issues {
		r.waitNode(t, n, "requirements")
	}

	var (
		mu      sync.Mutex
		sent    []sentEvent
		sendErr error
		wg      sync.WaitGroup
	)
	flowDone := make(chan struct{})
	for _, n := range c.issues {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 1; k <= composeEvents; k++ {
				e := sentEvent{tok{n, k}, viaSlack}
				var err error
				if k%3 == 1 {
					e.kind = viaGitHub
					cm := c.gh.AddComment(repoName, n, alice, fmt.Sprintf("Comment %d: %s", k, tokenFor(n, k)))
					payload := c.gh.CommentWebhook(cm)
					err = c.deliver(ctx, "webhook", func() (*http.Request, error) {
						req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.webhook, bytes.NewReader(payload))
						if err != nil {
							return nil, err
						}
						req.Header.Set("Content-Type", "application/json")
						req.Header.Set("X-GitHub-Event", "issue_comment")
						req.Header.Set("X-GitHub-Delivery", deliveryID(n, 1000+k))
						req.Header.Set("X-Hub-Signature-256", ghfake.SignWebhook(webhookSecret, payload))
						return req, nil
					}, http.StatusAccepted)
				} else {
					_, err = c.slackReply(ctx, threads[n], fmt.Sprintf("Reply %d: %s", k, tokenFor(n, k)))
				}
				mu.Lock()
				if err != nil {
					sendErr = err
					mu.Unlock()
					return
				}
				sent = append(sent, e)
				mu.Unlock()
				time.Sleep(composeKillGap * 6 / composeEvents)
			}
		}()
	}
	go func() { wg.Wait(); close(flowDone) }()

	// One container of each service, and NATS, in turn.
	var restarts []string
	seen := 0
	for _, svc := range []string{"ledger-writer", "ingress-github", "dispatcher", "nats", "slack-renderer", "ingress-slack"} {
		time.Sleep(composeKillGap)
		id, before := r.killOne(t, svc)
		after, ok := r.waitRestarted(id, before)
		if ok {
			seen++
		}
		restarts = append(restarts, fmt.Sprintf("%s %.12s: restart count %d → %d", svc, id, before, after))
	}
	<-flowDone
	if sendErr != nil {
		t.Fatalf("sending: %v", sendErr)
	}
	all := append(append([]sentEvent(nil), setup...), sent...)
	r.syncStandIn(t)
	o, gh, sl, pr := r.settle(c, all)
	bad := outOfOrder(o.order)
	report := fmt.Sprintf("COMPOSE RESULT: sent %d events + %d start comments over %d work items\n%s\n%s\n%s\nprompts out of order: %d work items\nrestarts seen: %d of 6 SIGKILLed containers\n  %s",
		len(sent), len(setup), len(c.issues), gh, sl, pr, len(bad), seen, strings.Join(restarts, "\n  "))
	t.Log(report)
	fmt.Println(report)
	checkExactlyOnce(t, bad, gh, sl, pr)
	if seen != 6 {
		t.Errorf("%d of 6 SIGKILLed containers came back by their restart policy", seen)
	}
}

// settle is cluster.settle with the stand-in's records copied out of the
// dispatcher's volume at every look.
func (r *composeRun) settle(c *cluster, sent []sentEvent) (o observed, gh, sl, pr tally) {
	wantGH, wantSlack, wantPrompts := expectations(sent)
	mine := map[int]bool{}
	for _, n := range c.issues {
		mine[n] = true
	}
	check := func() bool {
		r.syncStandIn(c.t)
		o = c.observe()
		// Only this phase's work items: the story's tokens are elsewhere
		// in the channel and the sessions.
		for _, m := range []map[tok]int{o.github, o.slack, o.prompts} {
			for k := range m {
				if !mine[k.w] {
					delete(m, k)
				}
			}
		}
		gh, sl, pr = count("github", wantGH, o.github), count("slack", wantSlack, o.slack), count("prompts", wantPrompts, o.prompts)
		return gh.lost == 0 && sl.lost == 0 && pr.lost == 0
	}
	if testkit.Poll(settleStall+time.Minute, check) {
		time.Sleep(5 * time.Second)
		check()
	}
	return
}

// killOne SIGKILLs the main process of one running container of svc from
// the host and returns the container and its restart count before.
func (r *composeRun) killOne(t *testing.T, svc string) (string, int) {
	t.Helper()
	ids, err := r.composeOut("ps", "--quiet", svc)
	if err != nil || strings.TrimSpace(ids) == "" {
		t.Fatalf("no running %s container: %v", svc, err)
	}
	id := strings.Fields(ids)[0]
	pid, count := r.inspect(id)
	if pid <= 1 {
		t.Fatalf("%s container %s has no process (pid %d)", svc, id, pid)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill %s (pid %d): %v", svc, pid, err)
	}
	return id, count
}

// waitRestarted waits until container id runs again after more restarts
// than before, and answers /readyz (its healthcheck) again.
func (r *composeRun) waitRestarted(id string, before int) (int, bool) {
	var after int
	ok := testkit.Poll(composeWait, func() bool {
		out, err := dockerCmd(nil, "inspect", "--format", "{{.RestartCount}} {{.State.Running}} {{if .State.Health}}{{.State.Health.Status}}{{end}}", id).Output()
		if err != nil {
			return false
		}
		f := strings.Fields(string(out))
		if len(f) < 2 {
			return false
		}
		after, _ = strconv.Atoi(f[0])
		healthy := len(f) < 3 || f[2] == "healthy"
		return after > before && f[1] == "true" && healthy
	})
	return after, ok
}

func (r *composeRun) inspect(id string) (pid, restarts int) {
	out, err := dockerCmd(nil, "inspect", "--format", "{{.State.Pid}} {{.RestartCount}}", id).Output()
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(out))
	if len(f) == 2 {
		pid, _ = strconv.Atoi(f[0])
		restarts, _ = strconv.Atoi(f[1])
	}
	return pid, restarts
}

// ---- scaling ----

// scaleLedgerWriter scales the ledger-writer to one replica, which then
// handles every event of a batch spread over the partitions, and to two,
// which divide the partitions between them (decision 071). The test then
// stops the replica that handled most of the second batch, gracefully, as a
// rollout would: the other takes every partition over and handles the third
// batch, each event once. Each container's own log says which events it
// published.
func (r *composeRun) scaleLedgerWriter(t *testing.T) {
	c := r.clusterFor(t)
	round := 0
	batch := func() map[string]int {
		t.Helper()
		round++
		ids := map[string]bool{}
		for i := range 16 {
			n := c.gh.AddIssue(repoName, alice, fmt.Sprintf("scale round %d item %d", round, i), "").Number
			cm := c.gh.AddComment(repoName, n, alice, fmt.Sprintf("Scale round %d", round))
			r.webhook(t, c, "issue_comment", deliveryID(n, 5000+round), c.gh.CommentWebhook(cm))
			ids[fmt.Sprintf("gh:issue-comment:%d", cm.ID)] = true
		}
		var per map[string]int
		if !testkit.Poll(composeWait, func() bool {
			per = r.publishedBy(t, "ledger-writer", ids)
			total := 0
			for _, k := range per {
				total += k
			}
			return total >= len(ids)
		}) {
			t.Fatalf("round %d: the ledger-writer published %v of %d events", round, per, len(ids))
		}
		time.Sleep(2 * time.Second) // a late duplicate would show now
		if per = r.publishedBy(t, "ledger-writer", ids); sumValues(per) != len(ids) {
			t.Errorf("round %d: %v published for %d events", round, per, len(ids))
		}
		return per
	}
	scale := func(n int) {
		r.mustCompose("up", "--detach", "--no-build", "--no-recreate", "--wait", "--wait-timeout", "180", "--scale", fmt.Sprintf("ledger-writer=%d", n))
	}
	scale(1)
	one := batch()
	if len(one) != 1 {
		t.Errorf("one replica: events published by %v", one)
	}
	scale(2)
	ids, err := r.composeOut("ps", "--quiet", "ledger-writer")
	if err != nil || len(strings.Fields(ids)) != 2 {
		t.Fatalf("ledger-writer containers after --scale 2: %q %v", ids, err)
	}
	two := batch()
	holder := ""
	for id, n := range two {
		if n > two[holder] {
			holder = id
		}
	}
	mustRun(t, dockerCmd(nil, "stop", "--time", "60", holder))
	three := batch()
	if len(three) != 1 || three[holder] != 0 {
		t.Errorf("with %s stopped, events published by %v, want all by the other replica", holder, three)
	}
	mustRun(t, dockerCmd(nil, "start", holder))
	shared := map[string]bool{}
	for id := range two {
		shared[id] = true
	}
	for id := range three {
		shared[id] = true
	}
	if len(shared) != 2 {
		t.Errorf("the two replicas did not share the partitions: %v, then %v", two, three)
	}
	t.Logf("ledger-writer scaled 1 → 2, 16 work items a round: published per container %v; with two %v; the holder stopped, %v",
		one, two, three)
}

// ---- the cluster profile ----

// clusterProfile brings the project up again as `docker compose --env-file
// deploy/nats/cluster.env` runs it — a three-node JetStream cluster, every
// stream, consumer and bucket R3, the routes closed by
// scripts/nats-routes.sh — and plays one work item through it while the
// server leading LOOP_INBOX is SIGKILLed and brought back by its restart
// policy: every event reaches GitHub, Slack and the session once, in order.
func (r *composeRun) clusterProfile(t *testing.T) {
	r.op.Close()
	mustRun(t, r.cmd("down", "--volumes", "--remove-orphans", "--timeout", "20"))
	mustRun(t, exec.Command(filepath.Join(composeRepoRoot, "scripts", "nats-routes.sh"), r.secrets, "nats:6222", "nats-2:6222", "nats-3:6222"))
	// The route credential is private (0600); the servers run as uid
	// 65531 (docs/deploy.md).
	if err := os.Chown(filepath.Join(r.secrets, "routes.conf"), 65531, 65531); err != nil {
		t.Fatal(err)
	}
	env, err := filepath.Abs(filepath.Join(composeRepoRoot, "deploy", "nats", "cluster.env"))
	if err != nil {
		t.Fatal(err)
	}
	r.files = append(r.files, "--env-file", env)
	start := time.Now()
	natsAddr := r.startNATS(t, "nats", "nats-2", "nats-3")
	mustRun(t, r.cmd("up", "--detach", "--no-build", "--wait", "--wait-timeout", "300"))
	ids, err := r.composeOut("ps", "--quiet", "nats-2", "nats-3")
	if err != nil || len(strings.Fields(ids)) != 2 {
		t.Fatalf("the cluster profile runs no nats-2 and nats-3: %q %v", ids, err)
	}
	t.Logf("three NATS nodes and the five services healthy in %s", time.Since(start).Round(time.Second))
	r.connect(t, natsAddr)

	c := r.clusterFor(t)
	n := r.openItem(t, c, "compose cluster work item")
	c.issues = []int{n}
	setup := []sentEvent{{tok{n, 0}, viaGitHub}}
	r.comment(t, c, n, fmt.Sprintf("the-loop start\n\nPlease work on this (%s).", tokenFor(n, 0)))
	root := r.waitThread(t, c, n)
	r.waitBoot(t, n)
	r.waitNode(t, n, "phase-selection")
	r.comment(t, c, n, "the-loop execute")
	r.waitNode(t, n, "requirements")

	leader := r.streamLeader(t, bus.StreamInbox)
	id, before := r.killOne(t, leader)
	t.Logf("SIGKILLed %s, the leader of %s", leader, bus.StreamInbox)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var sent []sentEvent
	for k := 1; k <= 9; k++ {
		e := sentEvent{tok{n, k}, viaSlack}
		if k%3 == 1 {
			e.kind = viaGitHub
			r.comment(t, c, n, fmt.Sprintf("Comment %d: %s", k, tokenFor(n, k)))
		} else if _, err := c.slackReply(ctx, root, fmt.Sprintf("Reply %d: %s", k, tokenFor(n, k))); err != nil {
			t.Fatal(err)
		}
		sent = append(sent, e)
		time.Sleep(time.Second)
	}
	after, back := r.waitRestarted(id, before)
	r.syncStandIn(t)
	o, gh, sl, pr := r.settle(c, append(setup, sent...))
	bad := outOfOrder(o.order)
	report := fmt.Sprintf("COMPOSE CLUSTER RESULT (3 NATS nodes, R3, %s SIGKILLed, restart count %d → %d): sent %d events + 1 start comment\n%s\n%s\n%s\nprompts out of order: %d work items",
		leader, before, after, len(sent), gh, sl, pr, len(bad))
	t.Log(report)
	fmt.Println(report)
	checkExactlyOnce(t, bad, gh, sl, pr)
	if !back {
		t.Errorf("%s did not come back by its restart policy", leader)
	}
}

// streamLeader is the compose service (nats, nats-2 or nats-3: each
// server is named by its hostname) leading stream, as the first server's
// monitoring port reports it.
func (r *composeRun) streamLeader(t *testing.T, stream string) string {
	t.Helper()
	mon, err := r.composeOut("port", "nats", "8222")
	if err != nil {
		t.Fatal(err)
	}
	var leader string
	if !testkit.Poll(composeWait, func() bool {
		leader = monitoredLeader(r.c.client, strings.TrimSpace(mon), stream)
		return leader != ""
	}) {
		t.Fatalf("no leader of %s reported", stream)
	}
	if leader != "nats" && leader != "nats-2" && leader != "nats-3" {
		t.Fatalf("the leader of %s is %q, not a compose service", stream, leader)
	}
	return leader
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// publishedBy counts, per container of svc, the events of ids its log says
// it published.
func (r *composeRun) publishedBy(t *testing.T, svc string, ids map[string]bool) map[string]int {
	t.Helper()
	out, err := r.composeOut("ps", "--quiet", "--all", svc)
	if err != nil {
		t.Fatal(err)
	}
	per := map[string]int{}
	for _, id := range strings.Fields(out) {
		logs, err := dockerCmd(nil, "logs", id).CombinedOutput()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(logs), "\n") {
			var rec struct {
				Msg       string `json:"msg"`
				EventID   string `json:"event_id"`
				Duplicate bool   `json:"duplicate"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "bus.published" && ids[rec.EventID] && !rec.Duplicate {
				per[id[:12]]++
			}
		}
	}
	return per
}

// ---- plumbing ----

// clusterFor is the fakes and senders of the run, for subtest t: its
// helpers (an echo of GitHub's writes among them) end with t.
func (r *composeRun) clusterFor(t *testing.T) *cluster {
	return &cluster{t: t, dir: r.c.dir, client: r.c.client, gh: r.c.gh, slack: r.c.slack,
		webhook: r.c.webhook, events: r.c.events, standIn: r.c.standIn}
}

func (r *composeRun) cmd(args ...string) *exec.Cmd {
	return composeCmd(r.env, append(append([]string{"-p", composeProject}, r.files...), args...)...)
}

// composeCmd runs Docker Compose with args: the docker CLI's own plugin, or
// the standalone one LOOP_TEST_COMPOSE names (what scripts/docker-env.sh
// builds into bin/tools when the machine has none of its own).
func composeCmd(env []string, args ...string) *exec.Cmd {
	if bin := os.Getenv("LOOP_TEST_COMPOSE"); bin != "" {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		return cmd
	}
	return dockerCmd(env, append([]string{"compose"}, args...)...)
}

func (r *composeRun) compose(args ...string) {
	_ = r.cmd(args...).Run()
}

func (r *composeRun) mustCompose(args ...string) {
	r.t.Helper()
	mustRun(r.t, r.cmd(args...))
}

func (r *composeRun) composeOut(args ...string) (string, error) {
	var out bytes.Buffer
	cmd := r.cmd(args...)
	cmd.Stdout = &out
	err := cmd.Run()
	return out.String(), err
}

func dockerCmd(env []string, args ...string) *exec.Cmd {
	cmd := exec.Command("docker", args...)
	cmd.Env = env
	return cmd
}

// mustRun runs cmd and fails t with its output unless it succeeds, or
// "ignore" is given.
func mustRun(t *testing.T, cmd *exec.Cmd, ignore ...string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil && len(ignore) == 0 {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
}

// buildStatic builds pkg for linux with cgo off (a static binary any base
// runs) into out.
func buildStatic(t *testing.T, pkg, out string) {
	t.Helper()
	abs, err := filepath.Abs(out)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-o", abs, pkg)
	cmd.Dir = composeRepoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux")
	mustRun(t, cmd)
}

// ensureBase imports the Debian base image unless the engine has it:
// mmdebstrap builds a root filesystem from Debian's packages (the apt
// sources this machine uses) and `docker import` makes it an image.
func ensureBase(t *testing.T) {
	t.Helper()
	if dockerCmd(nil, "image", "inspect", composeBase).Run() == nil {
		return
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Fatal("mmdebstrap is not installed (scripts/docker-env.sh installs it)")
	}
	start := time.Now()
	tar := filepath.Join(t.TempDir(), "base.tar")
	mustRun(t, exec.Command("mmdebstrap", "--variant=apt", "--include="+composeBasePackages, "--format=tar", "bookworm", tar))
	mustRun(t, dockerCmd(os.Environ(), "import", tar, composeBase))
	t.Logf("base image %s made from Debian packages in %s", composeBase, time.Since(start).Round(time.Second))
}

// natsVersion is the nats-server version go.mod requires, without its v.
func natsVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(composeRepoRoot, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "github.com/nats-io/nats-server/v2" {
			return strings.TrimPrefix(f[1], "v")
		}
	}
	t.Fatal("go.mod requires no nats-server")
	return ""
}

// forward listens on the compose network's gateway and forwards every
// connection to target's host (a fake on loopback); it returns target with
// the listener as its host: the URL the containers use.
func forward(t *testing.T, target string) string {
	t.Helper()
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	to := u.Host
	ln, err := net.Listen("tcp", composeGateway+":0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", to)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = copyConn(out, in); done <- struct{}{} }()
				go func() { _, _ = copyConn(in, out); done <- struct{}{} }()
				<-done
			}()
		}
	}()
	u.Host = ln.Addr().String()
	return u.String()
}

func copyConn(dst, src net.Conn) (int64, error) {
	defer func() {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}()
	var n int64
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			w, werr := dst.Write(buf[:k])
			n += int64(w)
			if werr != nil {
				return n, werr
			}
		}
		if err != nil {
			return n, err
		}
	}
}
