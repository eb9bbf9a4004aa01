package ingressgithub

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/the-loop/bus/pkg/config"
)

// The defaults are the tags' and an empty environment gives them.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	var got Config
	if err := config.Process(config.Env{}, &got); err != nil {
		t.Fatalf("Process: %v", err)
	}
	want := Config{
		GitHub:      config.GitHub{APIURL: "https://api.github.com/"},
		AutoExecute: config.AutoExecute{Label: "the-loop: auto-execute"},
		WebhookAddr: ":8787", WebhookConcurrency: 64, Mode: "webhook", PollInterval: time.Minute,
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(config.Secret{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, DefaultConfig(), cmp.AllowUnexported(config.Secret{})); diff != "" {
		t.Errorf("DefaultConfig (-want +got):\n%s", diff)
	}
}

func TestConfigRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  config.Env
		want string
	}{
		{config.Env{"LOOP_GITHUB_WEBHOOK_CONCURRENCY": "0"}, "LOOP_GITHUB_WEBHOOK_CONCURRENCY is 0"},
		{config.Env{"LOOP_GITHUB_MODE": "sometimes"}, `LOOP_GITHUB_MODE is "sometimes"`},
		{config.Env{"LOOP_GITHUB_MODE": "poll"}, "LOOP_GITHUB_POLL_REPOS names no repository"},
		{config.Env{"LOOP_GITHUB_POLL_INTERVAL": "1s"}, "LOOP_GITHUB_POLL_INTERVAL is 1s"},
		{config.Env{"LOOP_GITHUB_WEBHOOK_ADDR": "8787"}, `LOOP_GITHUB_WEBHOOK_ADDR is "8787"`},
		{config.Env{"LOOP_ENVELOPE_KEY": "short-DO-NOT-PRINT"}, "LOOP_ENVELOPE_KEY is too short"},
	} {
		var cfg Config
		err := config.Process(tt.env, &cfg)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Process(%v) = %v, want %q", tt.env, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "DO-NOT-PRINT") {
			t.Errorf("the error carries a secret: %v", err)
		}
	}
	var cfg Config
	if err := config.Process(config.Env{"LOOP_GITHUB_MODE": "both", "LOOP_GITHUB_POLL_REPOS": " octo/a, ,octo/b "}, &cfg); err != nil {
		t.Fatal(err)
	}
	if got := cfg.PollRepoList(); !cmp.Equal(got, []string{"octo/a", "octo/b"}) {
		t.Errorf("PollRepoList = %q", got)
	}
}

// TestRequired: webhooks need their secret (or the explicit insecure
// setting), polling the GitHub credential, both the envelope key.
func TestRequired(t *testing.T) {
	key := config.NewSecret(strings.Repeat("k", 32))
	for _, c := range []struct {
		mut  func(*Config)
		want []string // the settings named; none: nothing missing
	}{
		{func(*Config) {}, []string{"LOOP_ENVELOPE_KEY", "LOOP_GITHUB_WEBHOOK_SECRET"}},
		{func(c *Config) { c.EnvelopeKey = key; c.InsecureNoSignature = true }, nil},
		{func(c *Config) { c.EnvelopeKey = key; c.WebhookSecret = config.NewSecret("s") }, nil},
		{func(c *Config) { c.EnvelopeKey = key; c.Mode = "poll" }, []string{"LOOP_GITHUB_TOKEN"}},
		{func(c *Config) { c.EnvelopeKey = key; c.Mode = "both"; c.Token = config.NewSecret("t") }, []string{"LOOP_GITHUB_WEBHOOK_SECRET"}},
	} {
		cfg := DefaultConfig()
		c.mut(&cfg)
		err := cfg.Required()
		if (err == nil) != (len(c.want) == 0) {
			t.Errorf("mode %s: %v, want %v missing", cfg.Mode, err, c.want)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w+" is not set") {
				t.Errorf("mode %s: %v does not name %s", cfg.Mode, err, w)
			}
		}
	}
}
