package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
)

// TestServeRefusesWithoutRequiredSettings: a service missing what it cannot
// work without exits 1 at start, before connecting, with one line naming
// the service and each missing setting — what a container's log shows
// (docs/deploy.md) — and one that has them gets past the check.
func TestServeRefusesWithoutRequiredSettings(t *testing.T) {
	dir := t.TempDir()
	slackOn := filepath.Join(dir, "slack.yaml")
	if err := os.WriteFile(slackOn, []byte(`version: "0.7.0"
channels:
  slack:
    enabled: true
    channel: C0123
    read: {mode: socket}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("k", 32)
	base := config.Env{"LOOP_NATS_URL": "nats://127.0.0.1:1"}
	with := func(kv ...string) config.Env {
		e := config.Env{}
		for k, v := range base {
			e[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			e[kv[i]] = kv[i+1]
		}
		return e
	}
	for _, c := range []struct {
		service string
		env     config.Env
		missing []string // empty: nothing is missing
	}{
		{"ledger-writer", with(), []string{"LOOP_GITHUB_TOKEN", "LOOP_ENVELOPE_KEY"}},
		{"ledger-writer", with("LOOP_ENVELOPE_KEY", key), []string{"LOOP_GITHUB_TOKEN"}},
		{"ingress-github", with("LOOP_ENVELOPE_KEY", key), []string{"LOOP_GITHUB_WEBHOOK_SECRET"}},
		{"ingress-github", with("LOOP_ENVELOPE_KEY", key, "LOOP_GITHUB_MODE", "poll", "LOOP_GITHUB_POLL_REPOS", "o/r"), []string{"LOOP_GITHUB_TOKEN"}},
		{"ingress-github", with("LOOP_ENVELOPE_KEY", key, "LOOP_GITHUB_WEBHOOK_SECRET", "s"), nil},
		{"slack-renderer", with("LOOP_CONFIG", slackOn), []string{"LOOP_SLACK_BOT_TOKEN"}},
		{"slack-renderer", with(), nil}, // the Slack channel is off
		{"ingress-slack", with("LOOP_CONFIG", slackOn), []string{"LOOP_SLACK_BOT_TOKEN", "LOOP_SLACK_APP_TOKEN"}},
		{"ingress-slack", with("LOOP_CONFIG", slackOn, "LOOP_SLACK_BOT_TOKEN", "b", "LOOP_SLACK_APP_TOKEN", "a"), nil},
	} {
		if len(c.missing) == 0 {
			// Past the check the service would connect: the check alone.
			s, err := loadSettings(c.env)
			if err != nil {
				t.Fatal(err)
			}
			def, _ := lookupService(c.service)
			if err := requireSettings(def, &s); err != nil {
				t.Errorf("serve %s with %v refused: %v", c.service, keysOf(c.env), err)
			}
			continue
		}
		code, stdout, stderr := runVerb(t, c.env, "serve", c.service)
		refused := strings.Contains(stderr, "cannot start")
		if code != 1 || stdout != "" || !refused || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, c.service) {
			t.Errorf("serve %s with %v: exit %d, want 1 and one line naming the service\nstdout: %s\nstderr: %s", c.service, keysOf(c.env), code, stdout, stderr)
		}
		for _, m := range c.missing {
			if !strings.Contains(stderr, m+" is not set") {
				t.Errorf("serve %s with %v does not name %s: %s", c.service, keysOf(c.env), m, stderr)
			}
		}
	}
}

// TestUpNamesThePortInUse: `up` on a NATS port another process holds says
// so at once, in one line naming LOOP_NATS_LISTEN, not with the server's
// log and a timeout.
func TestUpNamesThePortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	dir := t.TempDir()
	env := config.Env{"LOOP_STORE_DIR": filepath.Join(dir, "store"), "LOOP_WORKSPACE_ROOT": filepath.Join(dir, "ws"),
		"LOOP_NATS_LISTEN": ln.Addr().String(), "LOOP_LOG_FORMAT": "json"}
	code, _, stderr := runVerb(t, env, "up")
	if code != 1 || !strings.HasPrefix(stderr, "the-loop: LOOP_NATS_LISTEN="+ln.Addr().String()+": the address is in use") ||
		strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Errorf("up on a port in use: exit %d\n%s", code, stderr)
	}
}
