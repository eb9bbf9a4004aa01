package config

import (
	"bytes"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/kelseyhightower/envconfig"
)

// ledgerWriter is how a service composes a shared struct of this package
// with a setting of its own.
type ledgerWriter struct {
	Common
	GitHub
	Pace int `envconfig:"OWN_PACE" default:"80" desc:"a service's own setting"`
}

// every is the structs this package declares: what CheckEnv knows here.
func every() []any {
	return []any{&Common{}, &GitHub{}, &AutoExecute{}, &Slack{}, &Up{}, &Session{}, &ledgerWriter{}}
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
		GitHub: GitHub{Token: NewSecret(token), APIURL: "https://api.github.com/", EnvelopeKey: NewSecret(envelopeKey)},
		Pace:   80,
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
	var common Common
	var slack Slack
	var up Up
	env := Env{
		"LOOP_NATS_URL":        "nats://a:4222, nats://b:4222",
		"LOOP_ADMIN_ADDR":      "127.0.0.1:9999",
		"LOOP_CONFIG":          "/etc/the-loop/cli-config.yaml",
		"LOOP_LOG_LEVEL":       "debug",
		"LOOP_PARTITIONS":      "32",
		"LOOP_SLACK_BOT_TOKEN": "xoxb-1",
		"LOOP_SLACK_API_URL":   "http://127.0.0.1:1234/api/",
		"LOOP_STORE_DIR":       "/var/lib/the-loop",
		"LOOP_NATS_LISTEN":     "127.0.0.1:4333",
	}
	if err := Process(env, &common, &slack, &up); err != nil {
		t.Fatalf("Process: %v", err)
	}
	if common.LogLevel != slog.LevelDebug || common.Partitions != 32 || common.ConfigPath != env["LOOP_CONFIG"] ||
		slack.APIURL != env["LOOP_SLACK_API_URL"] || up.StoreDir != "/var/lib/the-loop" || slack.BotToken.Reveal() != "xoxb-1" {
		t.Errorf("values not read: %+v %+v %+v", common, slack, up)
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
		{"bad log level", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_LOG_LEVEL": "chatty"}, []string{`LOOP_LOG_LEVEL is "chatty": want debug, info, warn or error`}},
		{"bad address", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_ADMIN_ADDR": "9090"}, []string{`LOOP_ADMIN_ADDR is "9090"`}},
		{"bad url", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_GITHUB_API_URL": "api.github.com"}, []string{"LOOP_GITHUB_API_URL", "absolute"}},
		{"bad nats url", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_NATS_URL": "http://x"}, []string{"LOOP_NATS_URL"}},
		{"bad own setting", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_OWN_PACE": "fast"}, []string{`LOOP_OWN_PACE is "fast": want a whole number`}},
		{"short envelope key", Env{"LOOP_GITHUB_TOKEN": token, "LOOP_ENVELOPE_KEY": "short-DO-NOT-PRINT"}, []string{"LOOP_ENVELOPE_KEY is too short"}},
		{"all at once", Env{"LOOP_X": "1", "LOOP_GITHUB_TOKEN": token, "LOOP_PARTITIONS": "x", "LOOP_ADMIN_ADDR": "y"}, []string{"LOOP_X", "LOOP_PARTITIONS"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var cfg ledgerWriter
			err := errors.Join(CheckEnv(tt.env, every()...), Process(tt.env, &cfg))
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
	if err := errors.Join(CheckEnv(shared, every()...), Process(shared, &cfg)); err != nil {
		t.Fatalf("Process: %v", err)
	}
	shared["LOOP_SLACK_BOT_TOKE"] = "x"
	if err := CheckEnv(shared, every()...); err == nil || !strings.Contains(err.Error(), "LOOP_SLACK_BOT_TOKE (did you mean LOOP_SLACK_BOT_TOKEN?)") {
		t.Errorf("CheckEnv = %v", err)
	}
}

// Our key derivation must be envconfig's, so the table envconfig prints and
// the names Process reads cannot drift apart. (cmd/the-loop pins the names
// of every setting, the services' included.)
func TestSettingsMatchEnvconfig(t *testing.T) {
	t.Parallel()
	var theirs []string
	for _, spec := range every() {
		var b bytes.Buffer
		if err := envconfig.Usagef(Prefix, spec, &b, "{{range .}}{{usage_key .}}\n{{end}}"); err != nil {
			t.Fatal(err)
		}
		for _, k := range strings.Fields(b.String()) {
			if !slices.Contains(theirs, k) {
				theirs = append(theirs, k)
			}
		}
	}
	if diff := cmp.Diff(theirs, Keys(every()...)); diff != "" {
		t.Errorf("keys (-envconfig +ours):\n%s", diff)
	}
}

// Usage prints a setting two specs share once.
func TestUsage(t *testing.T) {
	t.Parallel()
	var all bytes.Buffer
	if err := Usage(&all, every()...); err != nil {
		t.Fatal(err)
	}
	golden(t, "usage.txt", all.Bytes())
	if n := strings.Count(all.String(), "\nLOOP_GITHUB_TOKEN "); n != 1 {
		t.Errorf("LOOP_GITHUB_TOKEN, in GitHub and in ledgerWriter, is listed %d times:\n%s", n, all.String())
	}
	var one bytes.Buffer
	if err := Usage(&one, &ledgerWriter{}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(one.String(), "SLACK") || !strings.Contains(one.String(), "LOOP_ENVELOPE_KEY") || !strings.Contains(one.String(), "LOOP_OWN_PACE") {
		t.Errorf("a service's usage lists what it does not read, or misses what it does:\n%s", one.String())
	}
}

func TestRequire(t *testing.T) {
	t.Parallel()
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
