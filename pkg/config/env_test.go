package config

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/kelseyhightower/envconfig"
)

// ledgerWriter is how a service composes the concerns it reads.
type ledgerWriter struct {
	Common
	GitHub
}

const (
	token       = "ghp_DO_NOT_PRINT_0123456789"
	envelopeKey = "envelope-key-DO-NOT-PRINT-0123456789abcdef"
)

func TestProcessDefaults(t *testing.T) {
	t.Parallel()
	var cfg ledgerWriter
	err := Process(Env{"LOOP_GITHUB_TOKEN": token, "LOOP_ENVELOPE_KEY": envelopeKey, "HOME": "/root", "LOOP_ADMIN_ADDR": ""}, &cfg)
	if err != nil {
		t.Fatalf("Process: %v", err)
	}
	want := ledgerWriter{
		Common: Common{AdminAddr: ":9090", LogLevel: slog.LevelInfo, LogFormat: "auto", Partitions: 16, Concurrency: 16, Replicas: 1},
		GitHub: GitHub{Token: NewSecret(token), APIURL: "https://api.github.com/", WebhookAddr: ":8787", WebhookConcurrency: 64, EnvelopeKey: NewSecret(envelopeKey),
			Mode: "webhook", PollLabel: "the-loop: auto-execute", PollInterval: time.Minute, WritesPerMinute: 80, WritesPerHour: 500},
	}
	if diff := cmp.Diff(want, cfg, cmp.AllowUnexported(Secret{})); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	if err := cfg.RequireEnvelopeKey(); err != nil {
		t.Error(err)
	}
}

func TestProcessValues(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Common
		Slack
		Up
	}
	env := Env{
		"LOOP_NATS_URL":             "nats://a:4222, nats://b:4222",
		"LOOP_ADMIN_ADDR":           "127.0.0.1:9999",
		"LOOP_CONFIG":               "/etc/the-loop/cli-config.yaml",
		"LOOP_LOG_LEVEL":            "debug",
		"LOOP_PARTITIONS":           "32",
		"LOOP_SLACK_BOT_TOKEN":      "xoxb-1",
		"LOOP_SLACK_APP_TOKEN":      "xapp-1",
		"LOOP_SLACK_SIGNING_SECRET": "s",
		"LOOP_SLACK_API_URL":        "http://127.0.0.1:1234/api/",
		"LOOP_SLACK_EVENTS_ADDR":    ":0",
		"LOOP_STORE_DIR":            "/var/lib/the-loop",
		"LOOP_NATS_LISTEN":          "127.0.0.1:4333",
	}
	if err := Process(env, &cfg); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if cfg.LogLevel != slog.LevelDebug || cfg.Partitions != 32 || cfg.ConfigPath != env["LOOP_CONFIG"] ||
		cfg.Slack.APIURL != env["LOOP_SLACK_API_URL"] || cfg.StoreDir != "/var/lib/the-loop" || cfg.BotToken.Reveal() != "xoxb-1" {
		t.Errorf("values not read: %+v", cfg)
	}
	for _, mode := range []ReadMode{ReadPoll, ReadSocket, ReadEvents, ReadOff} {
		if err := cfg.Require(mode); err != nil {
			t.Errorf("Require(%s): %v", mode, err)
		}
	}
}

func TestProcessErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  Env
		want []string
	}{
		{"unknown variable named, with a suggestion", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_GITHUB_TOKN": token}, []string{"unknown environment variable LOOP_GITHUB_TOKN (did you mean LOOP_GITHUB_TOKEN?)"}},
		{"unknown variable far from any", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_FROBNICATE": "1"}, []string{"unknown environment variable LOOP_FROBNICATE"}},
		{"bad partitions", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_PARTITIONS": "many"}, []string{`LOOP_PARTITIONS is "many": want a whole number`}},
		{"partitions out of range", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_PARTITIONS": "0"}, []string{"LOOP_PARTITIONS is 0"}},
		{"bad log level", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_LOG_LEVEL": "chatty"}, []string{`LOOP_LOG_LEVEL is "chatty"`}},
		{"bad address", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_ADMIN_ADDR": "9090"}, []string{`LOOP_ADMIN_ADDR is "9090"`}},
		{"bad url", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_GITHUB_API_URL": "api.github.com"}, []string{"LOOP_GITHUB_API_URL", "absolute"}},
		{"bad nats url", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_NATS_URL": "http://x"}, []string{"LOOP_NATS_URL"}},
		{"no webhook concurrency", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_GITHUB_WEBHOOK_CONCURRENCY": "0"}, []string{"LOOP_GITHUB_WEBHOOK_CONCURRENCY is 0"}},
		{"short envelope key", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_ENVELOPE_KEY": "short-DO-NOT-PRINT"}, []string{"LOOP_ENVELOPE_KEY is too short"}},
		{"all at once", Env{"LOOP_X": "1", "LOOP_GITHUB_TOKEN": token, "LOOP_PARTITIONS": "x", "LOOP_ADMIN_ADDR": "y"}, []string{"LOOP_X", "LOOP_PARTITIONS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var cfg ledgerWriter
			err := Process(tt.env, &cfg)
			if err == nil {
				t.Fatal("Process accepted it")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			for _, secret := range []string{token, "DO-NOT-PRINT", "DO_NOT_PRINT"} {
				if strings.Contains(err.Error(), secret) {
					t.Errorf("error carries a secret:\n%v", err)
				}
			}
		})
	}
}

// A shared .env must not stop a service over another service's settings;
// a typo must stop every service.
func TestCheckEnvUnion(t *testing.T) {
	t.Parallel()
	shared := Env{
		"LOOP_GITHUB_TOKEN":    token,
		"LOOP_SLACK_BOT_TOKEN": "xoxb-1", // ingress-slack's, not the ledger-writer's
		"LOOP_STORE_DIR":       "/x",     // up's
		"LOOP_TEST_NATS_URL":   "nats://127.0.0.1:4222",
		"PATH":                 "/bin",
		"LOOPY":                "not ours",
	}
	var cfg ledgerWriter
	if err := Process(shared, &cfg); err != nil {
		t.Fatalf("Process: %v", err)
	}
	shared["LOOP_SLACK_BOT_TOKE"] = "x"
	if err := CheckEnv(shared); err == nil || !strings.Contains(err.Error(), "LOOP_SLACK_BOT_TOKE (did you mean LOOP_SLACK_BOT_TOKEN?)") {
		t.Errorf("CheckEnv = %v", err)
	}
}

// Our key derivation must be envconfig's, so the table envconfig prints and
// the names Process reads cannot drift apart.
func TestSettingsMatchEnvconfig(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := envconfig.Usagef(Prefix, &allSettings{}, &b, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
		t.Fatal(err)
	}
	theirs := strings.Fields(b.String())
	slices.Sort(theirs)
	if diff := cmp.Diff(theirs, Settings()); diff != "" {
		t.Errorf("keys (-envconfig +ours):\n%s", diff)
	}
	want := []string{
		"LOOP_ADMIN_ADDR", "LOOP_ADMIN_NKEY_FILE", "LOOP_ADMIN_TOKEN", "LOOP_CONCURRENCY", "LOOP_CONFIG", "LOOP_DISPATCHER_HOST", "LOOP_DISPATCHER_RUNNER", "LOOP_DISPATCHER_SPAWN", "LOOP_DISPATCHER_WORKDIR", "LOOP_ENVELOPE_KEY",
		"LOOP_GITHUB_API_URL", "LOOP_GITHUB_APP_ID", "LOOP_GITHUB_APP_INSTALLATION_ID", "LOOP_GITHUB_APP_PRIVATE_KEY_FILE", "LOOP_GITHUB_INSECURE_NO_SIGNATURE", "LOOP_GITHUB_LOGIN",
		"LOOP_GITHUB_MODE", "LOOP_GITHUB_POLL_INTERVAL", "LOOP_GITHUB_POLL_LABEL", "LOOP_GITHUB_POLL_REPOS", "LOOP_GITHUB_TOKEN",
		"LOOP_GITHUB_WEBHOOK_ADDR", "LOOP_GITHUB_WEBHOOK_CONCURRENCY", "LOOP_GITHUB_WEBHOOK_SECRET", "LOOP_GITHUB_WRITES_PER_HOUR", "LOOP_GITHUB_WRITES_PER_MINUTE", "LOOP_HARNESS_BINARY", "LOOP_LOG_FORMAT", "LOOP_LOG_LEVEL",
		"LOOP_NATS_CREDS_FILE", "LOOP_NATS_LISTEN", "LOOP_NATS_NKEY_FILE", "LOOP_NATS_NKEY_SEED", "LOOP_NATS_PASSWORD",
		"LOOP_NATS_TLS_CA", "LOOP_NATS_TLS_CERT", "LOOP_NATS_TLS_KEY", "LOOP_NATS_URL", "LOOP_NATS_USER", "LOOP_PARTITIONS",
		"LOOP_SESSION_ADDR", "LOOP_SESSION_ENV", "LOOP_SESSION_TOKEN", "LOOP_SESSION_URL",
		"LOOP_SLACK_API_URL", "LOOP_SLACK_APP_TOKEN", "LOOP_SLACK_BOT_TOKEN", "LOOP_SLACK_EVENTS_ADDR", "LOOP_SLACK_POST_INTERVAL", "LOOP_SLACK_SIGNING_SECRET", "LOOP_STATUS_EXPOSE", "LOOP_STATUS_TOKEN", "LOOP_STORE_DIR", "LOOP_STREAM_REPLICAS",
		"LOOP_TMUX_BINARY", "LOOP_TMUX_SOCKET",
	}
	if diff := cmp.Diff(want, Settings()); diff != "" {
		t.Errorf("Settings (-want +got):\n%s", diff)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	var all bytes.Buffer
	if err := Usage(&all); err != nil {
		t.Fatal(err)
	}
	golden(t, "usage.txt", all.Bytes())
	var one bytes.Buffer
	if err := Usage(&one, &ledgerWriter{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(one.String(), "SLACK") || !strings.Contains(one.String(), "LOOP_ENVELOPE_KEY") {
		t.Errorf("a service's usage lists what it does not read, or misses what it does:\n%s", one.String())
	}
}

func TestRequire(t *testing.T) {
	t.Parallel()
	tests := []struct {
		s    Slack
		mode ReadMode
		want string
	}{
		{Slack{}, ReadPoll, "LOOP_SLACK_BOT_TOKEN"},
		{Slack{BotToken: NewSecret("b")}, ReadSocket, "LOOP_SLACK_APP_TOKEN"},
		{Slack{BotToken: NewSecret("b")}, ReadEvents, "LOOP_SLACK_SIGNING_SECRET"},
		{Slack{BotToken: NewSecret("b")}, ReadPoll, ""},
	}
	for _, tt := range tests {
		err := tt.s.Require(tt.mode)
		if (tt.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("Require(%s) = %v, want %q", tt.mode, err, tt.want)
		}
	}
	if err := (GitHub{}).RequireEnvelopeKey(); err == nil {
		t.Error("RequireEnvelopeKey accepted an unset key")
	}
	if err := (GitHub{}).RequireToken(); err == nil || !strings.Contains(err.Error(), "LOOP_GITHUB_TOKEN") {
		t.Errorf("RequireToken(unset) = %v", err)
	}
	if err := (GitHub{Token: NewSecret(token)}).RequireToken(); err != nil {
		t.Errorf("RequireToken(set) = %v", err)
	}
}

func TestEnvFrom(t *testing.T) {
	t.Parallel()
	got := EnvFrom([]string{"A=1", "B=x=y", "A=2", "NOEQ", "=z", "E="})
	if diff := cmp.Diff(Env{"A": "1", "B": "x=y", "E": ""}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// The `required` tag is honoured (and means non-empty) for any spec that
// uses it.
func TestProcessRequiredTag(t *testing.T) {
	t.Parallel()
	var cfg struct {
		Common
		Must string `envconfig:"MUST" required:"true" desc:"a required setting"`
	}
	for _, env := range []Env{{}, {"LOOP_MUST": ""}} {
		if err := Process(env, &cfg); err == nil || !strings.Contains(err.Error(), "LOOP_MUST is required and not set") {
			t.Errorf("Process(%v) = %v", env, err)
		}
	}
}
