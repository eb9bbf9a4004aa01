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
