package main

import (
	"os"
	"path/filepath"
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
	if s.GitHub.PollLabel != "loop: go" || s.GitHub.Mode != "poll" || s.GitHub.PollRepos != "octo/repo" ||
		s.Dispatcher.Spawn != "always" || s.Slack.BotToken.Reveal() != "xoxb-team" {
		t.Errorf("the file's settings did not take effect: github %+v, dispatcher %+v", s.GitHub, s.Dispatcher)
	}
	if s.GitHub.PollInterval != 2*time.Minute || s.Dispatcher.Workdir != "/srv/elsewhere" {
		t.Errorf("the environment did not win: interval %s, workdir %s", s.GitHub.PollInterval, s.Dispatcher.Workdir)
	}
	if len(s.fromConfig) != 1 || s.fromConfig[0].Path != "polling.intervalSeconds" {
		t.Errorf("warnings %v, want one for polling.intervalSeconds", s.fromConfig)
	}
}
