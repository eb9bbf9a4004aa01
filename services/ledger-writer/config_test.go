package ledgerwriter

import (
	"strings"
	"testing"

	"github.com/the-loop/bus/pkg/config"
)

// The pacing defaults are GitHub's documented limits, from the tags; zero is
// refused.
func TestConfig(t *testing.T) {
	t.Parallel()
	var cfg Config
	if err := config.Process(config.Env{}, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.WritesPerMinute != 80 || cfg.WritesPerHour != 500 || cfg.APIURL != "https://api.github.com/" || cfg != DefaultConfig() {
		t.Errorf("defaults: %+v", cfg)
	}
	err := config.Process(config.Env{"LOOP_GITHUB_WRITES_PER_HOUR": "0"}, &cfg)
	if err == nil || !strings.Contains(err.Error(), "LOOP_GITHUB_WRITES_PER_HOUR must be at least 1") {
		t.Errorf("Process = %v", err)
	}
}

// TestRequired: the writer cannot start without its GitHub credential and
// the envelope key; the error names each.
func TestRequired(t *testing.T) {
	err := DefaultConfig().Required()
	if err == nil || !strings.Contains(err.Error(), "LOOP_GITHUB_TOKEN") || !strings.Contains(err.Error(), "LOOP_ENVELOPE_KEY") {
		t.Errorf("empty: %v", err)
	}
	cfg := DefaultConfig()
	cfg.App.AppID = 1
	cfg.EnvelopeKey = config.NewSecret(strings.Repeat("k", 32))
	if err := cfg.Required(); err != nil {
		t.Errorf("with an App and a key: %v", err)
	}
}
