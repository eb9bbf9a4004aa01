package config

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"
)

// Prefix is the prefix of every process setting: LOOP_NATS_URL and so on. It
// must never be empty: envconfig would then read bare names such as NATS_URL,
// which Kubernetes service links inject.
const Prefix = "LOOP"

// testPrefix marks variables the test suites read (LOOP_TEST_NATS_URL …). They
// are not settings of the binary, so CheckEnv lets them through rather than
// refusing to start a service in a shell that also runs the tests.
const testPrefix = Prefix + "_TEST_"

// Env is a snapshot of environment variables. Settings are read only from an
// Env handed in, never from the process environment behind the caller's
// back, so tests build one as a literal: config.Env{"LOOP_NATS_URL": "…"}.
type Env map[string]string

// EnvFrom parses "KEY=value" lines as os.Environ returns them. The first
// occurrence of a key wins, as it does for os.Getenv.
func EnvFrom(environ []string) Env {
	e := make(Env, len(environ))
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue
		}
		if _, dup := e[k]; !dup {
			e[k] = v
		}
	}
	return e
}

// OSEnv snapshots the process environment. It is meant for main and nowhere
// else.
func OSEnv() Env { return EnvFrom(os.Environ()) }

// Lookup returns a variable's value and whether it is set; it has the shape of
// os.LookupEnv.
func (e Env) Lookup(key string) (string, bool) {
	v, ok := e[key]
	return v, ok
}

// Common is what every service reads.
type Common struct {
	NATSURL    string     `envconfig:"NATS_URL" desc:"NATS server URL(s), comma-separated; empty: the embedded server of 'the-loop up'"`
	AdminAddr  string     `envconfig:"ADMIN_ADDR" default:":9090" desc:"listen address of /healthz, /readyz and /metrics"`
	ConfigPath string     `envconfig:"CONFIG" desc:"path of the operator YAML (version 0.7.0), reloaded on change; empty: built-in defaults (nobody authorized, Slack off)"`
	LogLevel   slog.Level `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	// LogFormat: people read a terminal, collectors read JSON.
	LogFormat   string `envconfig:"LOG_FORMAT" default:"auto" desc:"log lines: text, json, or auto (text when standard error is a terminal, JSON otherwise)"`
	Partitions  int    `envconfig:"PARTITIONS" default:"16" desc:"partitions of the inbox and event streams, shared by a service's replicas: the most events a service handles at once (its ceiling: partitions ÷ the downstream's latency); changed only drained and stopped (README, Operations)"`
	Concurrency int    `envconfig:"CONCURRENCY" default:"16" desc:"events one replica of a consuming service handles at once, over the partitions it owns: replicas add throughput up to LOOP_PARTITIONS ÷ this"`
	Replicas    int    `envconfig:"STREAM_REPLICAS" default:"1" desc:"replicas of every stream, consumer and KV bucket: 1 on a single server, 3 on a JetStream cluster"`
	NATS
	Status
}

// Status is who may see the status page the admin server serves (/status)
// and who may act on it.
type Status struct {
	// Expose serves the page beyond loopback; it needs Token.
	Expose bool   `envconfig:"STATUS_EXPOSE" default:"false" desc:"serve /status to clients beyond loopback, to those presenting LOOP_STATUS_TOKEN (default: loopback clients only)"`
	Token  Secret `envconfig:"STATUS_TOKEN" desc:"token a client beyond loopback presents to read /status (with LOOP_STATUS_EXPOSE)"`
	// AdminToken unlocks the page's actions (DLQ replay) for whoever
	// presents it, loopback included.
	AdminToken Secret `envconfig:"ADMIN_TOKEN" desc:"token an operator presents on /status to replay dead letters; unset: the page has no actions"`
	// AdminNkeyFile is the operator identity the page's actions run as
	// under 'serve' ('up' holds it already).
	AdminNkeyFile string `envconfig:"ADMIN_NKEY_FILE" desc:"serve: the operator's NKey seed file, which the status page's DLQ replay acts with (with LOOP_ADMIN_TOKEN); 'up' needs none"`
}

// Validate checks the values Process cannot check by type.
func (s Status) Validate() error {
	if s.Expose && !s.Token.IsSet() {
		return errors.New("LOOP_STATUS_EXPOSE is true but LOOP_STATUS_TOKEN is not set: an exposed status page needs a token")
	}
	return nil
}

// NATS is the credential a process connects to NATS with: each service is its
// own bus identity, whose permissions say what it may publish and consume
// (docs/architecture.md, trust boundaries). One of the NKey seed (a file or
// the value), the creds file, or the user and password; the TLS files are
// optional beside any of them.
type NATS struct {
	NkeyFile  string `envconfig:"NATS_NKEY_FILE" desc:"file holding this process's NKey user seed (SU…), as issued by 'the-loop auth init' or 'the-loop up'"`
	NkeySeed  Secret `envconfig:"NATS_NKEY_SEED" desc:"this process's NKey user seed itself (for a secret delivered in the environment)"`
	CredsFile string `envconfig:"NATS_CREDS_FILE" desc:"JWT creds file (decentralized NATS auth)"`
	User      string `envconfig:"NATS_USER" desc:"NATS user name (with LOOP_NATS_PASSWORD)"`
	Password  Secret `envconfig:"NATS_PASSWORD" desc:"NATS password of LOOP_NATS_USER"`
	TLSCA     string `envconfig:"NATS_TLS_CA" desc:"CA certificate file that verifies the NATS server (tls:// URLs)"`
	TLSCert   string `envconfig:"NATS_TLS_CERT" desc:"client certificate file (mutual TLS; with LOOP_NATS_TLS_KEY)"`
	TLSKey    string `envconfig:"NATS_TLS_KEY" desc:"client certificate key file (mutual TLS)"`
}

// Setting names the credential setting in force, for messages: the first of
// LOOP_NATS_NKEY_FILE, LOOP_NATS_NKEY_SEED, LOOP_NATS_CREDS_FILE and
// LOOP_NATS_USER that is set, or all of them when none is.
func (n NATS) Setting() string {
	switch {
	case n.NkeyFile != "":
		return "LOOP_NATS_NKEY_FILE"
	case n.NkeySeed.IsSet():
		return "LOOP_NATS_NKEY_SEED"
	case n.CredsFile != "":
		return "LOOP_NATS_CREDS_FILE"
	case n.User != "":
		return "LOOP_NATS_USER"
	}
	return "LOOP_NATS_NKEY_FILE, LOOP_NATS_NKEY_SEED, LOOP_NATS_CREDS_FILE or LOOP_NATS_USER"
}

// Set reports whether any credential is set.
func (n NATS) Set() bool {
	return n.NkeyFile != "" || n.NkeySeed.IsSet() || n.CredsFile != "" || n.User != ""
}

// Session is what an agent session is given to reach the loop: the
// dispatcher's session endpoint and its own token. `the-loop ask` and
// `the-loop graph complete` read them inside a session; nothing else does.
type Session struct {
	URL   string `envconfig:"SESSION_URL" desc:"inside an agent session: the dispatcher's session endpoint (set by the dispatcher)"`
	Token Secret `envconfig:"SESSION_TOKEN" desc:"inside an agent session: the session's own token for the endpoint (set by the dispatcher)"`
}

// GitHub is what the services that talk to GitHub read: ingress-github,
// ledger-writer and the dispatcher.
type GitHub struct {
	Token         Secret `envconfig:"GITHUB_TOKEN" desc:"GitHub token the ledger reads and writes with; ledger-writer and ingress-github need it once they talk to GitHub"`
	APIURL        string `envconfig:"GITHUB_API_URL" default:"https://api.github.com/" desc:"GitHub REST base URL (GitHub Enterprise, or a fake in tests)"`
	Login         string `envconfig:"GITHUB_LOGIN" desc:"the ledger's own login; empty: asked of GET /user with the token"`
	WebhookSecret Secret `envconfig:"GITHUB_WEBHOOK_SECRET" desc:"webhook HMAC secret; ingress-github needs it to accept webhooks"`
	WebhookAddr   string `envconfig:"GITHUB_WEBHOOK_ADDR" default:":8787" desc:"listen address of POST /gh-webhook"`
	// WebhookConcurrency bounds what a flood of requests, signed or not,
	// can hold of ingress-github at once.
	WebhookConcurrency int `envconfig:"GITHUB_WEBHOOK_CONCURRENCY" default:"64" desc:"webhook requests ingress-github handles at once; one more is answered 503 with Retry-After"`
	// Mode is how ingress-github learns of GitHub activity.
	Mode string `envconfig:"GITHUB_MODE" default:"webhook" desc:"ingress-github intake: webhook, poll (for deployments GitHub cannot reach) or both"`
	// InsecureNoSignature lets ingress-github accept unsigned webhooks.
	InsecureNoSignature bool          `envconfig:"GITHUB_INSECURE_NO_SIGNATURE" default:"false" desc:"accept webhooks without a signature when no secret is set (never in production; every response says so)"`
	PollRepos           string        `envconfig:"GITHUB_POLL_REPOS" desc:"poll mode: comma-separated owner/repo list to poll"`
	PollLabel           string        `envconfig:"GITHUB_POLL_LABEL" default:"the-loop: auto-execute" desc:"the auto-execute label: selects the work items poll mode reads and arms them for the dispatcher"`
	PollInterval        time.Duration `envconfig:"GITHUB_POLL_INTERVAL" default:"60s" desc:"poll mode: time between polling cycles"`
	WritesPerMinute     int           `envconfig:"GITHUB_WRITES_PER_MINUTE" default:"80" desc:"ledger-writer: content writes per minute per process, under GitHub's secondary limit (divide by the replicas sharing one token)"`
	WritesPerHour       int           `envconfig:"GITHUB_WRITES_PER_HOUR" default:"500" desc:"ledger-writer: content writes per hour per process (divide by the replicas sharing one token)"`
	EnvelopeKey         Secret        `envconfig:"ENVELOPE_KEY" desc:"HMAC key signing ledger envelopes, at least 32 bytes; ledger-writer and ingress-github need it ('up' generates one)"`
	App
}

// App is GitHub App authentication, the alternative to a token: the app
// signs a JWT with its private key and mints installation tokens, refreshed
// before they expire.
type App struct {
	AppID          int64  `envconfig:"GITHUB_APP_ID" desc:"GitHub App id: authenticate as the app's installation instead of LOOP_GITHUB_TOKEN (with LOOP_GITHUB_APP_PRIVATE_KEY_FILE)"`
	InstallationID int64  `envconfig:"GITHUB_APP_INSTALLATION_ID" desc:"the app's installation id; empty: found per repository (GET /repos/{owner}/{repo}/installation)"`
	PrivateKeyFile string `envconfig:"GITHUB_APP_PRIVATE_KEY_FILE" desc:"PEM file of the GitHub App's private key"`
}

// Set reports whether GitHub App authentication is configured.
func (a App) Set() bool { return a.AppID != 0 }

// Validate checks the values Process cannot check by type.
func (a App) Validate() error {
	switch {
	case a.AppID != 0 && a.PrivateKeyFile == "":
		return errors.New("LOOP_GITHUB_APP_ID is set but LOOP_GITHUB_APP_PRIVATE_KEY_FILE is not: the app signs its requests with its private key")
	case a.AppID == 0 && (a.PrivateKeyFile != "" || a.InstallationID != 0):
		return errors.New("LOOP_GITHUB_APP_PRIVATE_KEY_FILE or LOOP_GITHUB_APP_INSTALLATION_ID is set without LOOP_GITHUB_APP_ID")
	}
	return nil
}

// Slack is what ingress-slack and slack-renderer read.
type Slack struct {
	BotToken      Secret `envconfig:"SLACK_BOT_TOKEN" desc:"Slack bot token (xoxb-…); needed whenever channels.slack.enabled"`
	AppToken      Secret `envconfig:"SLACK_APP_TOKEN" desc:"Slack app-level token (xapp-…); needed by read.mode socket"`
	SigningSecret Secret `envconfig:"SLACK_SIGNING_SECRET" desc:"Slack signing secret; needed by read.mode events"`
	APIURL        string `envconfig:"SLACK_API_URL" default:"https://slack.com/api/" desc:"Slack Web API base URL (a fake in tests)"`
	EventsAddr    string `envconfig:"SLACK_EVENTS_ADDR" default:":8788" desc:"listen address of POST /slack/events and /slack/interactions (read.mode events)"`
	// PostInterval paces the renderer; Slack allows about one message per
	// second per channel, so a shorter interval only makes sense against
	// a stand-in (the demo, tests).
	PostInterval time.Duration `envconfig:"SLACK_POST_INTERVAL" default:"1s" desc:"least time between two posts to one Slack channel (chat.postMessage allows about one per second per channel)"`
}

// Up is what `the-loop up` reads on top of the services' settings.
type Up struct {
	StoreDir   string `envconfig:"STORE_DIR" desc:"directory of the embedded JetStream store, the generated envelope key and bus identities; empty: $XDG_STATE_HOME/the-loop (~/.local/state/the-loop), outside any session's working directory"`
	NATSListen string `envconfig:"NATS_LISTEN" default:"127.0.0.1:4222" desc:"listen address of the embedded NATS server (authorization on: only the-loop's own identities connect)"`
}

// DefaultStoreDir is where `up` keeps its store when LOOP_STORE_DIR is
// empty: the user's state directory (XDG), away from the directory `up` is
// started in, which is usually the repository agent sessions work in.
func DefaultStoreDir(env Env) (string, error) {
	if d := env["XDG_STATE_HOME"]; d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "the-loop"), nil
	}
	home := env["HOME"]
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("LOOP_STORE_DIR is empty and there is no home directory to keep the store in: set LOOP_STORE_DIR")
		}
		home = h
	}
	return filepath.Join(home, ".local", "state", "the-loop"), nil
}

// allSettings is the union of every concern. CheckEnv judges the environment
// against it, not against the one service's struct, because services share
// one .env (compose, a laptop shell): `serve ledger-writer` must not refuse
// LOOP_SLACK_BOT_TOKEN that is there for ingress-slack. A typo still fails,
// in every service. Add each new concern here.
type allSettings struct {
	Common
	GitHub
	Slack
	Up
	Dispatcher
	Session
}

// Dispatcher is what the dispatcher reads: where agent sessions run.
type Dispatcher struct {
	Runner        string `envconfig:"DISPATCHER_RUNNER" default:"tmux" desc:"what hosts agent sessions: tmux (sessions survive restarts; attach to watch) or process (child processes of the dispatcher, for hosts without tmux; they end with it)"`
	TmuxBinary    string `envconfig:"TMUX_BINARY" default:"tmux" desc:"tmux binary the dispatcher runs sessions in"`
	TmuxSocket    string `envconfig:"TMUX_SOCKET" desc:"private tmux server name (tmux -L); empty: the user's default server"`
	HarnessBinary string `envconfig:"HARNESS_BINARY" default:"claude" desc:"agent harness binary (Claude Code: spawned with --session-id, resumed with --resume)"`
	Host          string `envconfig:"DISPATCHER_HOST" desc:"this dispatcher replica's name in the session registry; empty: the hostname (use the pod name on Kubernetes)"`
	Workdir       string `envconfig:"DISPATCHER_WORKDIR" default:"." desc:"working directory of agent sessions"`
	Spawn         string `envconfig:"DISPATCHER_SPAWN" default:"labeled" desc:"when an event for a work item without a session spawns one: never, labeled (carries the auto-execute label, LOOP_GITHUB_POLL_LABEL) or always"`
	// SessionAddr is where agent sessions reach the loop: sessions run on
	// the dispatcher's host, so loopback.
	SessionAddr string `envconfig:"SESSION_ADDR" default:"127.0.0.1:8790" desc:"listen address of the session endpoint agent sessions ask and complete through (loopback: sessions run on this host); keep the port fixed so sessions that outlive a restart still reach it"`
	// SessionEnv names variables of the dispatcher's environment an agent
	// session also gets, besides the allow-list (PATH, HOME, TERM, locale…).
	SessionEnv string `envconfig:"SESSION_ENV" desc:"comma-separated names of further variables agent sessions inherit (the harness's own settings, e.g. ANTHROPIC_API_KEY); LOOP_* never"`
}

// SessionEnvNames is LOOP_SESSION_ENV as a list.
func (d Dispatcher) SessionEnvNames() []string {
	var out []string
	for n := range strings.SplitSeq(d.SessionEnv, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Validate checks the values Process cannot check by type.
func (d Dispatcher) Validate() error {
	var errs []error
	switch d.Spawn {
	case "never", "labeled", "always":
	default:
		errs = append(errs, fmt.Errorf("LOOP_DISPATCHER_SPAWN is %q: it must be never, labeled or always", d.Spawn))
	}
	switch d.Runner {
	case "tmux", "process":
	default:
		errs = append(errs, fmt.Errorf("LOOP_DISPATCHER_RUNNER is %q: it must be tmux or process", d.Runner))
	}
	errs = append(errs, checkAddr("LOOP_SESSION_ADDR", d.SessionAddr))
	for _, n := range d.SessionEnvNames() {
		if strings.HasPrefix(n, Prefix+"_") {
			errs = append(errs, fmt.Errorf("LOOP_SESSION_ENV names %s: the-loop's own settings never reach an agent session", n))
		}
	}
	return errors.Join(errs...)
}

// minEnvelopeKey is the shortest envelope key accepted: HMAC-SHA256 keys
// shorter than the hash's 32 bytes weaken the signature that stops a
// prompt-injected agent forging an approver's envelope
// (docs/architecture.md#the-ledger).
const minEnvelopeKey = 32

// Validate checks the values Process cannot check by type.
func (c Common) Validate() error {
	var errs []error
	errs = append(errs, checkAddr("LOOP_ADMIN_ADDR", c.AdminAddr))
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		errs = append(errs, fmt.Errorf("LOOP_LOG_FORMAT is %q: it must be auto, text or json", c.LogFormat))
	}
	errs = append(errs, c.Status.Validate())
	if c.Partitions < 1 || c.Partitions > 1024 {
		errs = append(errs, fmt.Errorf("LOOP_PARTITIONS is %d: it must be between 1 and 1024", c.Partitions))
	}
	if c.Concurrency < 1 || c.Concurrency > 1024 {
		errs = append(errs, fmt.Errorf("LOOP_CONCURRENCY is %d: it must be between 1 and 1024", c.Concurrency))
	}
	if c.Replicas != 1 && c.Replicas != 3 && c.Replicas != 5 {
		errs = append(errs, fmt.Errorf("LOOP_STREAM_REPLICAS is %d: it must be 1, 3 or 5", c.Replicas))
	}
	if c.NATSURL != "" {
		for u := range strings.SplitSeq(c.NATSURL, ",") {
			if err := checkURL("LOOP_NATS_URL", strings.TrimSpace(u), "nats", "tls", "ws", "wss"); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Validate checks the values Process cannot check by type. It does not
// require the envelope key or the webhook secret, which only some services
// need; see RequireEnvelopeKey.
func (g GitHub) Validate() error {
	var errs []error
	errs = append(errs, checkURL("LOOP_GITHUB_API_URL", g.APIURL, "https", "http"), g.App.Validate())
	errs = append(errs, checkAddr("LOOP_GITHUB_WEBHOOK_ADDR", g.WebhookAddr))
	if g.EnvelopeKey.IsSet() && len(g.EnvelopeKey.Reveal()) < minEnvelopeKey {
		errs = append(errs, fmt.Errorf("LOOP_ENVELOPE_KEY is too short: it must be at least %d bytes", minEnvelopeKey))
	}
	if g.WebhookConcurrency < 1 {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_WEBHOOK_CONCURRENCY is %d: it must be at least 1", g.WebhookConcurrency))
	}
	if g.WritesPerMinute < 1 || g.WritesPerHour < 1 {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_WRITES_PER_MINUTE and LOOP_GITHUB_WRITES_PER_HOUR must be at least 1"))
	}
	switch g.Mode {
	case "webhook", "poll", "both":
	default:
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_MODE is %q: it must be webhook, poll or both", g.Mode))
	}
	if g.PollInterval < 5*time.Second {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_POLL_INTERVAL is %s: it must be at least 5s", g.PollInterval))
	}
	if g.Mode != "webhook" && strings.TrimSpace(g.PollRepos) == "" {
		errs = append(errs, fmt.Errorf("LOOP_GITHUB_MODE is %s but LOOP_GITHUB_POLL_REPOS names no repository", g.Mode))
	}
	return errors.Join(errs...)
}

// PollRepoList is LOOP_GITHUB_POLL_REPOS as a list.
func (g GitHub) PollRepoList() []string {
	var out []string
	for r := range strings.SplitSeq(g.PollRepos, ",") {
		if r = strings.TrimSpace(r); r != "" {
			out = append(out, r)
		}
	}
	return out
}

// RequireToken fails unless the GitHub token is set. It is not a `required`
// tag because `up` and cmd compose every concern for every service, and
// slack-renderer never talks to GitHub.
func (g GitHub) RequireToken() error {
	if !g.Token.IsSet() && !g.App.Set() {
		return errors.New("LOOP_GITHUB_TOKEN is not set: this service reads or writes GitHub with it (or with a GitHub App: LOOP_GITHUB_APP_ID)")
	}
	return nil
}

// RequireEnvelopeKey fails unless the envelope key is set: `serve` refuses to
// start the ledger-writer or ingress-github without it
// (docs/architecture.md#the-ledger).
func (g GitHub) RequireEnvelopeKey() error {
	if !g.EnvelopeKey.IsSet() {
		return errors.New("LOOP_ENVELOPE_KEY is not set: the ledger-writer and ingress-github sign and verify envelopes with it")
	}
	return nil
}

// Validate checks the values Process cannot check by type. Which tokens are
// needed depends on the operator YAML; see Require.
func (s Slack) Validate() error {
	return errors.Join(
		checkURL("LOOP_SLACK_API_URL", s.APIURL, "https", "http"),
		checkAddr("LOOP_SLACK_EVENTS_ADDR", s.EventsAddr),
		checkNonNegative("LOOP_SLACK_POST_INTERVAL", s.PostInterval),
	)
}

func checkNonNegative(key string, d time.Duration) error {
	if d < 0 {
		return fmt.Errorf("%s is %s: it must not be negative", key, d)
	}
	return nil
}

// Require fails unless the tokens the given read mode needs are set: the bot
// token always, the app token for Socket Mode, the signing secret for the
// Events API.
func (s Slack) Require(mode ReadMode) error {
	var errs []error
	if !s.BotToken.IsSet() {
		errs = append(errs, errors.New("LOOP_SLACK_BOT_TOKEN is not set: the Slack channel is enabled"))
	}
	if mode == ReadSocket && !s.AppToken.IsSet() {
		errs = append(errs, errors.New("LOOP_SLACK_APP_TOKEN is not set: channels.slack.read.mode is socket"))
	}
	if mode == ReadEvents && !s.SigningSecret.IsSet() {
		errs = append(errs, errors.New("LOOP_SLACK_SIGNING_SECRET is not set: channels.slack.read.mode is events"))
	}
	return errors.Join(errs...)
}

// Validate checks the values Process cannot check by type.
func (u Up) Validate() error {
	var errs []error
	errs = append(errs, checkAddr("LOOP_NATS_LISTEN", u.NATSListen))
	return errors.Join(errs...)
}

func checkAddr(name, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%s is %q: want host:port or :port", name, addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%s is %q: the port must be a number from 0 to 65535", name, addr)
	}
	return nil
}

// checkURL accepts an absolute URL with one of the schemes. It quotes the
// value, so it must only see settings that are not secret.
func checkURL(name, raw string, schemes ...string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || !slices.Contains(schemes, u.Scheme) {
		return fmt.Errorf("%s is %q: want an absolute %s URL", name, raw, strings.Join(schemes, "/"))
	}
	return nil
}

// setting is one environment variable bound to a struct field. The key is
// derived exactly as envconfig derives it (a test pins the two together).
type setting struct {
	key   string
	field reflect.Value
	tag   reflect.StructTag
}

// Process fills each spec — a pointer to a struct composed of Common, GitHub,
// Slack, Up and fields tagged in envconfig's vocabulary — from env, after
// CheckEnv has found no unknown LOOP_* variable. Then it runs Validate of
// every concern the spec embeds. All problems come back at once, joined, so an
// operator fixes them in one pass.
//
// It follows envconfig's tags (envconfig, default, required, desc) but reads
// env instead of the process environment: envconfig v1.4.0's Process and
// CheckDisallowed read os.Environ directly, which tests must not touch. Two
// deliberate differences: a variable set to "" counts as unset (so a .env
// line `LOOP_ADMIN_ADDR=` keeps the default and `required` means non-empty),
// and there is no fallback to the bare name without the prefix.
func Process(env Env, specs ...any) error {
	errs := []error{CheckEnv(env)}
	for _, spec := range specs {
		settings, err := gather(Prefix, spec)
		if err != nil {
			return err
		}
		for _, s := range settings {
			errs = append(errs, s.set(env))
		}
		if err := errors.Join(errs...); err != nil {
			// Validating half-filled structs would only repeat the errors.
			continue
		}
		errs = append(errs, validateAll(reflect.ValueOf(spec).Elem()))
	}
	return errors.Join(errs...)
}

// CheckEnv reports every LOOP_* variable in env that is not a known setting
// of any service, naming it and the nearest known name. Variables under
// LOOP_TEST_ belong to the test suites and pass.
func CheckEnv(env Env) error {
	known := knownKeys()
	var unknown []string
	for k := range env {
		if !strings.HasPrefix(k, Prefix+"_") || strings.HasPrefix(k, testPrefix) || slices.Contains(known, k) {
			continue
		}
		unknown = append(unknown, k)
	}
	slices.Sort(unknown)
	errs := make([]error, 0, len(unknown))
	for _, k := range unknown {
		msg := fmt.Sprintf("unknown environment variable %s", k)
		if near := nearest(k, known); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		errs = append(errs, errors.New(msg))
	}
	return errors.Join(errs...)
}

// Settings lists every known setting name, sorted.
func Settings() []string {
	keys := knownKeys()
	slices.Sort(keys)
	return keys
}

// Keys lists the settings spec reads (a pointer to a settings struct), in
// field order.
func Keys(spec any) []string {
	settings, err := gather(Prefix, spec)
	if err != nil {
		return nil
	}
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.key
	}
	return keys
}

func knownKeys() []string {
	settings, err := gather(Prefix, &allSettings{})
	if err != nil {
		panic(err) // allSettings is ours; a test covers it
	}
	keys := make([]string, len(settings))
	for i, s := range settings {
		keys[i] = s.key
	}
	return keys
}

// nearest returns the known key closest to k by edit distance, if it is
// close enough to be the likely intent.
func nearest(k string, known []string) string {
	best, bestD := "", 4
	for _, c := range known {
		if d := editDistance(k, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// gather walks spec the way envconfig's gatherInfo does: an embedded struct
// shares its parent's prefix, a named struct field extends it, and a field's
// key is its envconfig tag (or its name), upper-cased, after the prefix.
func gather(prefix string, spec any) ([]setting, error) {
	v := reflect.ValueOf(spec)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("config: a spec must be a pointer to a struct, not %T", spec)
	}
	return gatherValue(prefix, v.Elem()), nil
}

func gatherValue(prefix string, v reflect.Value) []setting {
	var out []setting
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		f := v.Field(i)
		if !f.CanSet() || sf.Tag.Get("ignored") == "true" {
			continue
		}
		key := sf.Name
		if tag := sf.Tag.Get("envconfig"); tag != "" {
			key = tag
		}
		key = strings.ToUpper(prefix + "_" + key)
		if f.Kind() == reflect.Struct && !reflect.PointerTo(f.Type()).Implements(textUnmarshaler) {
			inner := prefix
			if !sf.Anonymous {
				inner = key
			}
			out = append(out, gatherValue(inner, f)...)
			continue
		}
		out = append(out, setting{key: key, field: f, tag: sf.Tag})
	}
	return out
}

// set fills the field from env or its default. Its errors quote the value only
// when the field is not a Secret.
func (s setting) set(env Env) error {
	raw, _ := env.Lookup(s.key)
	if raw == "" {
		raw = s.tag.Get("default")
	}
	if raw == "" {
		if s.tag.Get("required") == "true" {
			return fmt.Errorf("%s is required and not set: %s", s.key, s.tag.Get("desc"))
		}
		s.field.Set(reflect.Zero(s.field.Type()))
		return nil
	}
	if u, ok := s.field.Addr().Interface().(encoding.TextUnmarshaler); ok {
		if err := u.UnmarshalText([]byte(raw)); err != nil {
			return fmt.Errorf("%s is %q: %w", s.key, raw, err)
		}
		return nil
	}
	if s.field.Type() == reflect.TypeOf(time.Duration(0)) {
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("%s is %q: want a duration such as 60s or 5m", s.key, raw)
		}
		s.field.SetInt(int64(d))
		return nil
	}
	switch s.field.Kind() {
	case reflect.String:
		s.field.SetString(raw)
	case reflect.Int, reflect.Int64, reflect.Int32:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || s.field.OverflowInt(n) {
			return fmt.Errorf("%s is %q: want a whole number", s.key, raw)
		}
		s.field.SetInt(n)
	case reflect.Bool:
		b, err := strconv.ParseBool(raw)
		if err != nil {
			return fmt.Errorf("%s is %q: want true or false", s.key, raw)
		}
		s.field.SetBool(b)
	default:
		return fmt.Errorf("config: %s has unsupported type %s", s.key, s.field.Type())
	}
	return nil
}

// validateAll runs Validate of each concern struct found in v. It matches the
// concern types themselves rather than any Validate method, because a
// service's struct that embeds one concern gets its Validate promoted and
// would otherwise be validated twice.
func validateAll(v reflect.Value) error {
	var errs []error
	if v.CanAddr() {
		switch c := v.Addr().Interface().(type) {
		case *Common:
			return c.Validate()
		case *GitHub:
			return c.Validate()
		case *Slack:
			return c.Validate()
		case *Up:
			return c.Validate()
		case *Dispatcher:
			return c.Validate()
		}
	}
	for i := range v.NumField() {
		if f := v.Field(i); f.Kind() == reflect.Struct && f.CanSet() {
			errs = append(errs, validateAll(f))
		}
	}
	return errors.Join(errs...)
}

// usageFormat is envconfig's table with the columns the docs print.
const usageFormat = "SETTING\tTYPE\tDEFAULT\tREQUIRED\tDESCRIPTION\n" +
	"{{range .}}{{usage_key .}}\t{{usage_type .}}\t{{usage_default .}}\t{{usage_required .}}\t{{usage_description .}}\n{{end}}"

// UsageOf is Usage limited to the settings keep accepts (by name, e.g.
// LOOP_GITHUB_TOKEN): what one service reads of specs it shares with others.
func UsageOf(w io.Writer, keep func(key string) bool, specs ...any) error {
	var rows bytes.Buffer
	if err := usageRows(&rows, specs...); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for i, l := range strings.SplitAfter(rows.String(), "\n") {
		key, _, _ := strings.Cut(l, "\t")
		if l != "" && (i == 0 || keep(key)) {
			if _, err := io.WriteString(tw, l); err != nil {
				return err
			}
		}
	}
	return tw.Flush()
}

// Usage writes the table of the settings specs read — name, type, default,
// required, description — for `the-loop serve X --help`. With no specs it
// lists every known setting, for the docs.
func Usage(w io.Writer, specs ...any) error {
	if len(specs) == 0 {
		specs = []any{&allSettings{}}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if err := usageRows(tw, specs...); err != nil {
		return err
	}
	return tw.Flush()
}

// usageRows writes the table's rows, tab-separated, the header first.
func usageRows(w io.Writer, specs ...any) error {
	for i, spec := range specs {
		format := usageFormat
		if i > 0 {
			_, format, _ = strings.Cut(usageFormat, "\n")
		}
		if err := envconfig.Usagef(Prefix, spec, w, format); err != nil {
			return fmt.Errorf("usage: %w", err)
		}
	}
	return nil
}
