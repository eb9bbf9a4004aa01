package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/the-loop/bus/pkg/config"
)

// Shapes of what `init` writes into the config: a GitHub login, a Slack
// member id and a Slack channel id. Anything else is refused before a file
// is written.
var (
	githubLogin  = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$`)
	slackMember  = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)
	slackChannel = regexp.MustCompile(`^[CG][A-Z0-9]{2,}$`)
)

// cmdInit is `the-loop init`: a starter operator config (LOOP_CONFIG) that
// authorizes one person, optionally on Slack too, written where asked and
// never over an existing file; then it says what to do next.
func cmdInit(_ context.Context, args []string, _ config.Env, stdout, stderr io.Writer) error {
	const usage = "init --github LOGIN [--name NAME] [--slack-user ID --slack-channel ID] [FILE]"
	fs := newFlags("init", stderr)
	login := fs.String("github", "", "the GitHub login of the person who directs the loop (required)")
	name := fs.String("name", "", "their name, as messages show it (default: the login)")
	member := fs.String("slack-user", "", "their Slack member id (U…), to answer and approve from Slack")
	channel := fs.String("slack-channel", "", "the Slack channel id (C…) work items are discussed in; turns Slack on")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 || *login == "" {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	path := "the-loop.yaml"
	if fs.NArg() == 1 {
		path = fs.Arg(0)
	}
	src, err := starterConfig(*login, *name, *member, *channel)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, iofs.ErrExist) {
		return fmt.Errorf("%s exists: init never overwrites a config; edit it, or name another file", path)
	}
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	if _, err := f.Write(src); err != nil {
		f.Close()
		return fmt.Errorf("init: write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("init: write %s: %w", path, err)
	}
	fmt.Fprintf(stdout, "wrote %s: %s directs the loop from GitHub", path, *login)
	if *member != "" {
		fmt.Fprintf(stdout, " and from Slack (%s)", *member)
	}
	fmt.Fprintf(stdout, ".\n\nNext:\n")
	fmt.Fprintf(stdout, "  1. LOOP_CONFIG=%s LOOP_GITHUB_TOKEN=<a token that may comment on your repositories> the-loop up\n", path)
	fmt.Fprintf(stdout, "     (it prints what else is missing: the webhook secret, the Slack tokens)\n")
	fmt.Fprintf(stdout, "  2. On GitHub, label an issue \"the-loop: auto-execute\" and comment \"the-loop start\"\n")
	fmt.Fprintf(stdout, "  3. Answer the agent's questions and approve its phases on the issue")
	if *channel != "" {
		fmt.Fprintf(stdout, " or in its Slack thread")
	}
	fmt.Fprintln(stdout, "\n  The configuration reference: docs/configuration.md")
	return nil
}

// starterConfig is the config init writes, checked with the loader the
// services use: it must load without an error or a warning.
func starterConfig(login, name, member, channel string) ([]byte, error) {
	if !githubLogin.MatchString(login) {
		return nil, fmt.Errorf("--github %q is not a GitHub login", login)
	}
	if member != "" && !slackMember.MatchString(member) {
		return nil, fmt.Errorf("--slack-user %q is not a Slack member id (U… or W…)", member)
	}
	if channel != "" && !slackChannel.MatchString(channel) {
		return nil, fmt.Errorf("--slack-channel %q is not a Slack channel id (C… or G…)", channel)
	}
	if name == "" {
		name = login
	}
	entry := "{github: " + strconv.Quote(login) + ", name: " + strconv.Quote(name)
	if member != "" {
		entry += ", slack: " + strconv.Quote(member)
	}
	entry += "}"
	var b strings.Builder
	b.WriteString(`# Operator config (LOOP_CONFIG), written by ` + "`the-loop init`" + `; the services reload it
# when it changes. Reference: docs/configuration.md.
version: "0.7.0"
routing:
  # The people who may direct the loop: start work, answer, approve. Anyone
  # else's comments are recorded, never obeyed.
  authorizedUsers:
    - ` + entry + "\n")
	if channel != "" {
		b.WriteString(`channels:
  ledger: github
  slack:
    enabled: true
    channel: ` + strconv.Quote(channel) + `
    # What the channel is told, and what it may say back.
    subscribe: [session.awaiting_input]
    publish: [work-item.reply]
    read:
      mode: socket
`)
	}
	src := []byte(b.String())
	_, warnings, err := config.Parse(src)
	if err != nil {
		return nil, fmt.Errorf("init: the starter config does not load: %w", err)
	}
	if len(warnings) > 0 {
		return nil, fmt.Errorf("init: the starter config loads with warnings: %v", warnings)
	}
	return src, nil
}
