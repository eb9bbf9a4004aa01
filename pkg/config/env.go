package config

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
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

// Common is what every process reads, whichever services it hosts: the bus,
// the admin server, the operator config, logs, the topology.
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
	// SignersFile is read by the operator's provisioning only.
	SignersFile string `envconfig:"SIGNERS_FILE" desc:"the public signers file 'the-loop auth init' writes (each identity's public NKey, nothing secret): 'the-loop provision' and 'the-loop auth signers' write it to the signers bucket as the operator"`
	NATS
	Status
	API
}

// API is where the CLI's reading verbs read through the control plane's
// HTTP API instead of NATS (docs/api.md): from a laptop that reaches the
// admin address, with no bus credential.
type API struct {
	URL   string `envconfig:"API_URL" desc:"the control plane's API (http://host:9090/api/v1): 'events', 'sessions list', 'dlq list' and 'graph status' read through it instead of NATS; empty: NATS"`
	Token Secret `envconfig:"API_TOKEN" desc:"the bearer token the reading verbs present to LOOP_API_URL (the read token, LOOP_STATUS_TOKEN, beyond loopback)"`
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
	// ObserverNkeyFile is the identity the page reads the loop's content
	// through under 'serve': a service's own identity reads only what it
	// consumes ('up' holds the observer already).
	ObserverNkeyFile string `envconfig:"STATUS_NKEY_FILE" desc:"serve: the observer's NKey seed file, which the status page reads work items, sessions, dead letters and events through; unset: the page shows only the streams' and consumers' state ('up' needs none)"`
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
	// SigningSeedFile: a user and password carry no key, and every
	// identity signs what it publishes (docs/decisions/099-signed-events.md).
	SigningSeedFile string `envconfig:"NATS_SIGNING_SEED_FILE" desc:"with LOOP_NATS_USER: file holding this identity's NKey user seed, which signs the events it publishes (its public key in the signers bucket); required with a user and password, unused with an NKey seed or creds file, which sign with their own"`
	TLSCA           string `envconfig:"NATS_TLS_CA" desc:"CA certificate file that verifies the NATS server (tls:// URLs)"`
	TLSCert         string `envconfig:"NATS_TLS_CERT" desc:"client certificate file (mutual TLS; with LOOP_NATS_TLS_KEY)"`
	TLSKey          string `envconfig:"NATS_TLS_KEY" desc:"client certificate key file (mutual TLS)"`
}

// Session is what an agent session is given to reach the loop: the
// dispatcher's session endpoint and its own token. `the-loop ask` and
// `the-loop graph complete` read them inside a session; nothing else does.
type Session struct {
	URL   string `envconfig:"SESSION_URL" desc:"inside an agent session: the dispatcher's session endpoint (set by the dispatcher)"`
	Token Secret `envconfig:"SESSION_TOKEN" desc:"inside an agent session: the session's own token for the endpoint (set by the dispatcher)"`
	// StopMaxAttempts is read by `the-loop hook stop` itself, from the
	// environment as it is: declared here so that the other verbs accept a
	// session's environment.
	StopMaxAttempts int `envconfig:"STOP_MAX_ATTEMPTS" default:"3" desc:"inside an agent session: how many times in a row the plugin's Stop hook sends the agent back to an incomplete node before it lets the session stop (set by the dispatcher)"`
}

// GitHub is how the services that keep the ledger on GitHub reach it:
// ledger-writer and ingress-github embed it in their Config. Each service's
// own GitHub settings live in its Config.
type GitHub struct {
	Token       Secret `envconfig:"GITHUB_TOKEN" desc:"GitHub token the ledger reads and writes with; ledger-writer and ingress-github need it once they talk to GitHub"`
	APIURL      string `envconfig:"GITHUB_API_URL" default:"https://api.github.com/" desc:"GitHub REST base URL (GitHub Enterprise, or a fake in tests)"`
	Login       string `envconfig:"GITHUB_LOGIN" desc:"the ledger's own login; empty: asked of GET /user with the token"`
	EnvelopeKey Secret `envconfig:"ENVELOPE_KEY" desc:"HMAC key signing ledger envelopes, at least 32 bytes; ledger-writer and ingress-github need it ('up' generates one)"`
	App
}

// AutoExecute is the auto-execute label, which ingress-github polls by and
// the dispatcher spawns sessions for.
type AutoExecute struct {
	Label string `envconfig:"GITHUB_POLL_LABEL" default:"the-loop: auto-execute" desc:"the auto-execute label: selects the work items poll mode reads and arms them for the dispatcher"`
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

// Slack is how the services that talk to Slack reach it: ingress-slack and
// slack-renderer embed it in their Config.
type Slack struct {
	BotToken Secret `envconfig:"SLACK_BOT_TOKEN" desc:"Slack bot token (xoxb-…); needed whenever channels.slack.enabled"`
	APIURL   string `envconfig:"SLACK_API_URL" default:"https://slack.com/api/" desc:"Slack Web API base URL (a fake in tests)"`
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

// DefaultWorkspaceRoot is where `the-loop up` gives each work item its
// workspace when LOOP_WORKSPACE_ROOT is empty: the-loop/workspaces under
// XDG_DATA_HOME (~/.local/share by default), apart from the store, whose
// seeds and key no session may find in its tree.
func DefaultWorkspaceRoot(env Env) (string, error) {
	if d := env["XDG_DATA_HOME"]; d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "the-loop", "workspaces"), nil
	}
	home := env["HOME"]
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("LOOP_WORKSPACE_ROOT is empty and there is no home directory to keep workspaces in: set LOOP_WORKSPACE_ROOT")
		}
		home = h
	}
	return filepath.Join(home, ".local", "share", "the-loop", "workspaces"), nil
}

// minEnvelopeKey is the shortest envelope key accepted: HMAC-SHA256 keys
// shorter than the hash's 32 bytes weaken the signature that stops a
// prompt-injected agent forging an approver's envelope
// (docs/architecture.md#the-ledger).
const minEnvelopeKey = 32

// Validate checks the values Process cannot check by type.
func (c Common) Validate() error {
	var errs []error
	errs = append(errs, CheckAddr("LOOP_ADMIN_ADDR", c.AdminAddr))
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
			if err := CheckURL("LOOP_NATS_URL", strings.TrimSpace(u), "nats", "tls", "ws", "wss"); err != nil {
				errs = append(errs, err)
				break
			}
		}
	}
	return errors.Join(errs...)
}

// Validate checks the values Process cannot check by type. It does not
// require the token or the envelope key, which a service asks for when it
// needs them; see RequireToken and RequireEnvelopeKey.
func (g GitHub) Validate() error {
	var errs []error
	errs = append(errs, CheckURL("LOOP_GITHUB_API_URL", g.APIURL, "https", "http"), g.App.Validate())
	if g.EnvelopeKey.IsSet() && len(g.EnvelopeKey.Reveal()) < minEnvelopeKey {
		errs = append(errs, fmt.Errorf("LOOP_ENVELOPE_KEY is too short: it must be at least %d bytes", minEnvelopeKey))
	}
	return errors.Join(errs...)
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
// needed depends on the operator YAML: each service asks for them.
func (s Slack) Validate() error {
	return CheckURL("LOOP_SLACK_API_URL", s.APIURL, "https", "http")
}

// Validate checks the values Process cannot check by type.
func (u Up) Validate() error {
	var errs []error
	errs = append(errs, CheckAddr("LOOP_NATS_LISTEN", u.NATSListen))
	return errors.Join(errs...)
}
