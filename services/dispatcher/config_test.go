package dispatcher

import (
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
)

// The settings' defaults come from the tags, and a zero Settings takes them.
func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	c := DefaultConfig()
	if c.Runner != RunnerTmux || c.Workdir != "." || c.Spawn != SpawnLabeled || c.Label != "the-loop: auto-execute" ||
		c.SessionAddr != "127.0.0.1:8790" || c.HarnessBinary != "claude" || DefaultLabel != c.Label {
		t.Errorf("defaults: %+v", c)
	}
	var s Settings
	s.setDefaults()
	if s.Runner != c.Runner || s.Workdir != c.Workdir || s.SpawnOnUnmatched != c.Spawn || s.Label != c.Label {
		t.Errorf("a zero Settings did not take Config's defaults: %+v", s)
	}
}

func TestConfigRefuses(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		env  config.Env
		want string
	}{
		{config.Env{"LOOP_DISPATCHER_SPAWN": "sometimes"}, `LOOP_DISPATCHER_SPAWN is "sometimes"`},
		{config.Env{"LOOP_DISPATCHER_RUNNER": "docker"}, `LOOP_DISPATCHER_RUNNER is "docker"`},
		{config.Env{"LOOP_SESSION_ADDR": "8790"}, `LOOP_SESSION_ADDR is "8790"`},
		{config.Env{"LOOP_SESSION_ENV": "ANTHROPIC_API_KEY, LOOP_NATS_NKEY_SEED"}, "LOOP_SESSION_ENV names LOOP_NATS_NKEY_SEED"},
	} {
		var c Config
		if err := config.Process(tt.env, &c); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Process(%v) = %v, want %q", tt.env, err, tt.want)
		}
	}
}
