package main

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kelseyhightower/envconfig"

	"github.com/the-loop/bus/pkg/config"
)

// TestSettingsFromAnOriginalConfig: the process settings a file written for
// the original sets through its keys (routing.autoExecuteLabel,
// polling.intervalSeconds, channels.slack.botTokenEnv, …) are what a service
// started with LOOP_CONFIG reads, unless the environment sets them itself.
func TestSettingsFromAnOriginalConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cli-config.yaml")
	src := `version: "0.6.0"
routing:
  spawnOnUnmatched: always
  autoExecuteLabel: "loop: go"
polling:
  enabled: true
  intervalSeconds: 90
  sources:
    - {provider: github, repos: [octo/repo]}
channels:
  slack:
    botTokenEnv: TEAM_SLACK_BOT_TOKEN
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := loadSettings(config.Env{
		"LOOP_CONFIG":               path,
		"LOOP_DISPATCHER_WORKDIR":   "/srv/elsewhere",
		"TEAM_SLACK_BOT_TOKEN":      "xoxb-team",
		"LOOP_GITHUB_POLL_INTERVAL": "2m", // the environment wins over polling.intervalSeconds
	})
	if err != nil {
		t.Fatal(err)
	}
	gh := s.IngressGitHub
	if gh.Label != "loop: go" || s.Dispatcher.Label != "loop: go" || gh.Mode != "poll" || gh.PollRepos != "octo/repo" ||
		s.Dispatcher.Spawn != "always" || s.IngressSlack.BotToken.Reveal() != "xoxb-team" || s.SlackRenderer.BotToken.Reveal() != "xoxb-team" {
		t.Errorf("the file's settings did not take effect: ingress-github %+v, dispatcher %+v", gh, s.Dispatcher)
	}
	if gh.PollInterval != 2*time.Minute || s.Dispatcher.Workdir != "/srv/elsewhere" {
		t.Errorf("the environment did not win: interval %s, workdir %s", gh.PollInterval, s.Dispatcher.Workdir)
	}
	if len(s.fromConfig) != 1 || s.fromConfig[0].Path != "polling.intervalSeconds" {
		t.Errorf("warnings %v, want one for polling.intervalSeconds", s.fromConfig)
	}
}

// TestMigrateConfigOnAnOriginalFile: migrate-config on a file written for the
// original moves the two removed keys, keeps the rest, and says which keys
// the migrated file will be warned about at every load; a second run changes
// nothing and says the same.
func TestMigrateConfigOnAnOriginalFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cli-config.yaml")
	src := `version: "0.6.0"
routing:
  autoExecuteLabel: "loop: go"
  harnessArgs:
    claude: [--permission-mode, acceptEdits] # our sessions' permissions
service:
  enabled: true
  port: 4114
channels:
  slack:
    enabled: true
    channel: C1
    events: [session.awaiting_input]
    authorizedUsers: [U111]
`
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	env := config.Env{"LOOP_CONFIG": path}
	wantWarned := []string{"it loads with 2 warning(s):", "! service.enabled (line", "! service.port (line"}
	code, out, stderr := runVerb(t, env, "migrate-config", "--write")
	if code != 0 {
		t.Fatalf("migrate-config --write: %d %s", code, stderr)
	}
	for _, want := range append([]string{"renamed channels.slack.events", "moved Slack member U111"}, wantWarned...) {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	migrated, _ := os.ReadFile(path)
	if !strings.Contains(string(migrated), "# our sessions' permissions") || !strings.Contains(string(migrated), "autoExecuteLabel") {
		t.Errorf("the migration dropped a key or comment:\n%s", migrated)
	}
	code, out, _ = runVerb(t, env, "migrate-config", "--write")
	if code != 0 || !strings.Contains(out, "nothing to migrate") {
		t.Errorf("second run: %d %s", code, out)
	}
	for _, want := range wantWarned {
		if !strings.Contains(out, want) {
			t.Errorf("second run lacks %q:\n%s", want, out)
		}
	}
	if again, _ := os.ReadFile(path); string(again) != string(migrated) {
		t.Error("second run changed the file")
	}
}

// Every setting keeps its name wherever it is declared, and envconfig (whose
// tags the settings use, and whose table the docs print) derives the same
// names as the reader.
func TestSettingNames(t *testing.T) {
	t.Parallel()
	var theirs []string
	for _, spec := range (&settings{}).specs() {
		var b bytes.Buffer
		if err := envconfig.Usagef(config.Prefix, spec, &b, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
			t.Fatal(err)
		}
		theirs = append(theirs, strings.Fields(b.String())...)
	}
	slices.Sort(theirs)
	theirs = slices.Compact(theirs)
	if diff := cmp.Diff(theirs, knownSettings()); diff != "" {
		t.Errorf("keys (-envconfig +ours):\n%s", diff)
	}
	want := []string{
		"LOOP_ADMIN_ADDR", "LOOP_ADMIN_NKEY_FILE", "LOOP_ADMIN_TOKEN", "LOOP_AGENT_GIT_CREDENTIALS", "LOOP_API_TOKEN", "LOOP_API_URL", "LOOP_CONCURRENCY", "LOOP_CONFIG", "LOOP_DISPATCHER_HOST", "LOOP_DISPATCHER_RUNNER", "LOOP_DISPATCHER_SPAWN", "LOOP_DISPATCHER_WORKDIR", "LOOP_ENVELOPE_KEY",
		"LOOP_GITHUB_API_URL", "LOOP_GITHUB_APP_ID", "LOOP_GITHUB_APP_INSTALLATION_ID", "LOOP_GITHUB_APP_PRIVATE_KEY_FILE", "LOOP_GITHUB_INSECURE_NO_SIGNATURE", "LOOP_GITHUB_LOGIN",
		"LOOP_GITHUB_MODE", "LOOP_GITHUB_POLL_INTERVAL", "LOOP_GITHUB_POLL_LABEL", "LOOP_GITHUB_POLL_REPOS", "LOOP_GITHUB_TOKEN",
		"LOOP_GITHUB_WEBHOOK_ADDR", "LOOP_GITHUB_WEBHOOK_CONCURRENCY", "LOOP_GITHUB_WEBHOOK_SECRET", "LOOP_GITHUB_WRITES_PER_HOUR", "LOOP_GITHUB_WRITES_PER_MINUTE", "LOOP_HARNESS", "LOOP_HARNESS_ARGS", "LOOP_HARNESS_BINARY", "LOOP_HARNESS_PLUGIN_DIR", "LOOP_LOG_FORMAT", "LOOP_LOG_LEVEL",
		"LOOP_NATS_CREDS_FILE", "LOOP_NATS_LISTEN", "LOOP_NATS_NKEY_FILE", "LOOP_NATS_NKEY_SEED", "LOOP_NATS_PASSWORD", "LOOP_NATS_SIGNING_SEED_FILE",
		"LOOP_NATS_TLS_CA", "LOOP_NATS_TLS_CERT", "LOOP_NATS_TLS_KEY", "LOOP_NATS_URL", "LOOP_NATS_USER", "LOOP_PARTITIONS",
		"LOOP_SESSION_ADDR", "LOOP_SESSION_ENDPOINT_HOST", "LOOP_SESSION_ENV", "LOOP_SESSION_SANDBOX", "LOOP_SESSION_SANDBOX_PORTS", "LOOP_SESSION_SANDBOX_READ", "LOOP_SESSION_SANDBOX_WRITE", "LOOP_SESSION_TOKEN", "LOOP_SESSION_URL", "LOOP_SIGNERS_FILE",
		"LOOP_SLACK_API_URL", "LOOP_SLACK_APP_TOKEN", "LOOP_SLACK_BOT_TOKEN", "LOOP_SLACK_EVENTS_ADDR", "LOOP_SLACK_POST_INTERVAL", "LOOP_SLACK_SIGNING_SECRET", "LOOP_STATUS_EXPOSE", "LOOP_STATUS_NKEY_FILE", "LOOP_STATUS_TOKEN", "LOOP_STOP_MAX_ATTEMPTS", "LOOP_STORE_DIR", "LOOP_STREAM_REPLICAS",
		"LOOP_TMUX_BINARY", "LOOP_TMUX_DIR", "LOOP_TMUX_SOCKET", "LOOP_WORKSPACE_GIT_URL", "LOOP_WORKSPACE_KEEP", "LOOP_WORKSPACE_ROOT", "LOOP_WORKSPACE_SHARED", "LOOP_WORKSPACE_STRATEGY",
	}
	if diff := cmp.Diff(want, knownSettings()); diff != "" {
		t.Errorf("settings (-want +got):\n%s", diff)
	}
}

// Services share one .env: loading it for any host accepts every service's
// settings and refuses a typo, naming the setting it meant.
func TestSharedEnvironment(t *testing.T) {
	t.Parallel()
	shared := config.Env{
		"LOOP_GITHUB_TOKEN": "ghp_x", "LOOP_SLACK_BOT_TOKEN": "xoxb-1", "LOOP_SLACK_POST_INTERVAL": "2s",
		"LOOP_TMUX_BINARY": "/usr/bin/tmux", "LOOP_STORE_DIR": "/x", "LOOP_TEST_NATS_URL": "nats://127.0.0.1:4222",
	}
	s, err := loadSettings(shared)
	if err != nil {
		t.Fatal(err)
	}
	if s.SlackRenderer.PostInterval != 2*time.Second || s.IngressSlack.BotToken.Reveal() != "xoxb-1" || s.Dispatcher.TmuxBinary != "/usr/bin/tmux" ||
		s.LedgerWriter.Token.Reveal() != "ghp_x" || s.IngressGitHub.Token.Reveal() != "ghp_x" {
		t.Errorf("each service did not get its settings: %+v", s)
	}
	shared["LOOP_SLACK_POST_INTERVL"] = "1s"
	if _, err := loadSettings(shared); err == nil || !strings.Contains(err.Error(), "LOOP_SLACK_POST_INTERVL (did you mean LOOP_SLACK_POST_INTERVAL?)") {
		t.Errorf("a typo: %v", err)
	}
}
