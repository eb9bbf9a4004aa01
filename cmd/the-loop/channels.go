package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/identity"
	ingressslack "github.com/the-loop/bus/services/ingress-slack"
)

// cmdChannels prints the channels' configuration and, from the one catalog
// definition, which types each channel may hear and raise (R1.5).
func cmdChannels(_ context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "status" {
		return fmt.Errorf("%w: channels status", errUsage)
	}
	fs := newFlags("channels status", stderr)
	path := fs.String("config", "", "operator config file (default: LOOP_CONFIG)")
	if err := parseFlags(fs, args[1:]); err != nil {
		return err
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	if *path == "" {
		*path = s.Common.ConfigPath
	}
	cfg := config.Default()
	var warnings []config.Warning
	source := "built-in defaults (LOOP_CONFIG is not set)"
	if *path != "" {
		cfg, warnings, err = config.LoadFile(*path)
		if err != nil {
			return err
		}
		source = *path
	}
	return writeChannelsStatus(stdout, source, cfg, warnings, s.IngressSlack)
}

func writeChannelsStatus(w io.Writer, source string, cfg *config.Config, warnings []config.Warning, env ingressslack.Config) error {
	sl := cfg.Channels.Slack
	fmt.Fprintf(w, "config: %s\n", source)
	for _, wn := range warnings {
		fmt.Fprintf(w, "warning: %s\n", wn)
	}
	fmt.Fprintf(w, "ledger: %s\n", cfg.Channels.Ledger)
	fmt.Fprintf(w, "slack: enabled=%t channel=%q read.mode=%s interval=%s verbosity=%s maxChars=%d\n",
		sl.Enabled, sl.Channel, sl.Read.Mode, sl.Read.Interval(), sl.Verbosity, sl.MaxChars)
	fmt.Fprintf(w, "slack tokens: bot %s (LOOP_SLACK_BOT_TOKEN), app %s (LOOP_SLACK_APP_TOKEN), signing secret %s (LOOP_SLACK_SIGNING_SECRET)\n",
		setUnset(env.BotToken.IsSet()), setUnset(env.AppToken.IsSet()), setUnset(env.SigningSecret.IsSet()))
	dir := cfg.Routing.AuthorizedUsers
	if dir == nil {
		dir, _ = identity.New(nil)
	}
	fmt.Fprintf(w, "authorized: %d person(s); %d GitHub login(s), %d Slack member id(s)\n", dir.Len(), len(dir.GitHubLogins()), len(dir.SlackIDs()))
	if sl.Kickoff.Repo == "" {
		fmt.Fprintln(w, "kickoff: disabled (channels.slack.kickoff.repo is empty)")
	} else {
		fmt.Fprintf(w, "kickoff: repo=%s labels=%s\n", sl.Kickoff.Repo, quoteList(sl.Kickoff.Labels))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TYPE\tSUBSCRIBE\tPUBLISH\tRECORDED OFF-LEDGER\tRAISED BY\tSLACK HEARS\tSLACK RAISES")
	for _, e := range catalog.All() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Type, catalog.YesNo(e.Subscribable), catalog.YesNo(e.Publishable),
			e.Record, e.RaisedBy, tick(sl.Subscribes(e.Type)), tick(sl.CanPublish(e.Type)))
	}
	// Names outside the catalog are kept (a custom graph may fire them, R2.4)
	// and marked so the operator sees them.
	for _, t := range sl.Subscribe {
		if !catalog.Known(t) {
			fmt.Fprintf(tw, "%s\t-\t-\t-\tcustom\t[!]\t%s\n", t, tick(slices.Contains(sl.Publish, t)))
		}
	}
	return tw.Flush()
}

func tick(b bool) string {
	if b {
		return "[x]"
	}
	return "[ ]"
}

func setUnset(b bool) string {
	if b {
		return "set"
	}
	return "unset"
}
