package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	wantWarned := []string{"it loads with 3 warning(s):", "! routing.harnessArgs.claude (line", "! service.enabled (line", "! service.port (line"}
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
