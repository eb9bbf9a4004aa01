package main

import (
	"fmt"
	"io"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/sandbox"
	"github.com/the-loop/bus/services/dispatcher"
)

// isTerminal reports whether w is a terminal (a TTY), where people read.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// capability is one thing the loop can do once set up, and what it lacks.
type capability struct {
	name string
	// missing says what is not there and the setting or install step
	// that fixes it; empty: ready.
	missing []string
}

// checklist judges, from the settings and the operator config alone, each
// capability a first run asks about: GitHub intake, ledger writes, Slack,
// agent sessions. It is what `up` prints at start, so a new user learns what
// is missing without reading /readyz.
func checklist(s settings, cfg *config.Config, lookPath func(string) (string, error)) []capability {
	gh := s.IngressGitHub
	var intake []string
	switch gh.Mode {
	case "webhook", "both":
		if !gh.WebhookSecret.IsSet() && !gh.InsecureNoSignature {
			intake = append(intake, "LOOP_GITHUB_WEBHOOK_SECRET is not set: set it to the secret of the repository's webhook (POST /gh-webhook on LOOP_GITHUB_WEBHOOK_ADDR), or poll instead with LOOP_GITHUB_MODE=poll and LOOP_GITHUB_POLL_REPOS")
		}
	}
	if gh.Mode != "webhook" && !gh.Token.IsSet() && !gh.App.Set() {
		intake = append(intake, "polling reads GitHub with LOOP_GITHUB_TOKEN (or the GitHub App: LOOP_GITHUB_APP_ID, LOOP_GITHUB_APP_PRIVATE_KEY_FILE), and neither is set")
	}
	var ledger []string
	if !gh.Token.IsSet() && !gh.App.Set() {
		ledger = append(ledger, "LOOP_GITHUB_TOKEN is not set: set it to a token that may comment on the repositories, or authenticate as a GitHub App with LOOP_GITHUB_APP_ID and LOOP_GITHUB_APP_PRIVATE_KEY_FILE")
	}
	var slack []string
	sc := cfg.Channels.Slack
	switch {
	case s.Common.ConfigPath == "":
		slack = append(slack, "LOOP_CONFIG is not set: write an operator config with channels.slack.enabled: true and channels.slack.channel (docs/configuration.md), then set LOOP_SLACK_BOT_TOKEN")
	case !sc.Enabled:
		slack = append(slack, "channels.slack.enabled is false in LOOP_CONFIG: set it and channels.slack.channel")
	default:
		if err := s.IngressSlack.Require(sc.Read.Mode); err != nil {
			slack = append(slack, strings.Split(err.Error(), "\n")...)
		}
	}
	var sessions []string
	d := s.Dispatcher
	if d.Runner == "tmux" {
		if _, err := lookPath(d.TmuxBinary); err != nil {
			sessions = append(sessions, fmt.Sprintf("tmux (%s) is not installed: install it (apt-get install tmux, brew install tmux), set LOOP_TMUX_BINARY to it, or run sessions as child processes with LOOP_DISPATCHER_RUNNER=process", d.TmuxBinary))
		}
	}
	if _, err := lookPath(d.HarnessCommand()); err != nil {
		sessions = append(sessions, fmt.Sprintf("the agent harness %q is not on PATH: install it, or set LOOP_HARNESS_BINARY to the harness (LOOP_HARNESS picks claude, cursor, aider or generic)", d.HarnessCommand()))
	}
	if d.SessionSandbox == dispatcher.SandboxLandlock {
		if err := sandboxSupported(); err != nil {
			sessions = append(sessions, fmt.Sprintf("this kernel cannot confine sessions (LOOP_SESSION_SANDBOX=landlock; Landlock ABI %d): %v. Sessions do not start: run Linux 6.7 or later with landlock among its LSMs, or set LOOP_SESSION_SANDBOX=off to run them unconfined, able to read what this user can, the store included", sandbox.ABI(), err))
		}
	}
	return []capability{
		{"GitHub intake", intake},
		{"ledger writes", ledger},
		{"Slack", slack},
		{"agent sessions", sessions},
	}
}

// sandboxSupported is sandbox.Supported (a test stands in for a kernel
// without Landlock).
var sandboxSupported = sandbox.Supported

// printChecklist writes the checklist, one capability a line with ✓ or ✗
// and, under a ✗, what to do.
func printChecklist(w io.Writer, caps []capability) {
	fmt.Fprintln(w, "the-loop up: what this run can do")
	for _, c := range caps {
		if len(c.missing) == 0 {
			fmt.Fprintf(w, "  ✓ %s\n", c.name)
			continue
		}
		fmt.Fprintf(w, "  ✗ %s\n", c.name)
		for _, m := range c.missing {
			fmt.Fprintf(w, "      %s\n", m)
		}
	}
}

// operatorConfig loads LOOP_CONFIG for the checklist; the host loads and
// watches it again, and refuses it with the reason when it is broken.
func operatorConfig(s settings) *config.Config {
	if s.Common.ConfigPath == "" {
		return defaultConfig
	}
	cfg, _, err := config.LoadFile(s.Common.ConfigPath)
	if err != nil || cfg == nil {
		return defaultConfig
	}
	return cfg
}
