package main

import (
	"github.com/the-loop/bus/pkg/redact"
)

// secretSettings are the loop's own secrets a process may be given in its
// environment. A loop process reads them once (config.OSEnv) and then
// withholds them from its environment: agent sessions run as the same user,
// and a child process or /proc/<pid>/environ must not hand them over
// (docs/agents.md, SECURITY.md boundary 3). LOOP_SESSION_TOKEN is not among
// them: it is the agent's own, and its verbs read it.
var secretSettings = []string{
	"LOOP_GITHUB_TOKEN", "LOOP_GITHUB_WEBHOOK_SECRET", "LOOP_ENVELOPE_KEY",
	"LOOP_SLACK_BOT_TOKEN", "LOOP_SLACK_APP_TOKEN", "LOOP_SLACK_SIGNING_SECRET",
	"LOOP_NATS_NKEY_SEED", "LOOP_NATS_PASSWORD", "LOOP_STATUS_TOKEN", "LOOP_ADMIN_TOKEN", "LOOP_API_TOKEN",
}

// harden makes this process keep its secrets to itself: the secrets leave
// its environment once read, their values are wiped from the environment
// block it started with (what /proc/<pid>/environ shows), and no same-user
// process may read its memory (not dumpable, where the system offers it).
func harden() {
	redact.Withhold(secretSettings...)
	// Best effort: where /proc is not mounted there is no block to read
	// either.
	_ = wipeEnviron(secretSettings)
	notDumpable()
}
