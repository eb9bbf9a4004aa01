package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// `the-loop critic list|run`: in an agent session, the critics the operator
// configured, and one review round by one of them on a node's artifact
// (docs/decisions/120-critics.md). The dispatcher runs the critic; this
// verb only names it, the node and a brief.

// Exit codes of `the-loop critic run`.
const (
	criticRoundOK     = 0
	criticRoundFailed = 1
	criticCannotRun   = 2
)

// criticRequestSlack is how much longer than its wait a run request may
// take: the record is awaited after the round.
const criticRequestSlack = time.Minute

func cmdCritic(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: critic list|run", errUsage)
	}
	switch args[0] {
	case "list":
		return criticList(ctx, args[1:], env, stdout, stderr)
	case "run":
		return criticRun(ctx, args[1:], env, stdout, stderr)
	}
	return fmt.Errorf("%w: critic list|run (not %q)", errUsage, args[0])
}

// criticList prints the critics the operator configured.
func criticList(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("critic list", stderr)
	asJSON := fs.Bool("json", false, "print the critics as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: critic list [--json]", errUsage)
	}
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	cs, err := client.Critics(rctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, cs)
	}
	if len(cs.RepoCritics) > 0 {
		fmt.Fprintf(stdout, "note: the repository's harness configuration names %s (reviews.critics); those are not run: critics are the operator's (routing.critics)\n",
			strings.Join(cs.RepoCritics, ", "))
	}
	if len(cs.Critics) == 0 {
		fmt.Fprintln(stdout, "no critics are configured: the operator names them in routing.critics")
		return nil
	}
	yes := map[bool]string{true: "yes", false: "no"}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CRITIC\tHARNESS\tMODEL\tCOMMAND\tAVAILABLE\tENABLED\tTIMEOUT")
	for _, c := range cs.Critics {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Name, dash(c.Harness), dash(c.Model), c.Command,
			yes[c.Available], yes[c.Enabled], time.Duration(c.Timeout))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

// criticRun runs one round and prints how it ended: the findings when it
// ended within --wait, else that they will arrive as a new prompt. It exits
// 0 when the round succeeded or goes on, 1 when it failed or timed out (the
// findings so far are printed and recorded all the same), 2 when it could
// not be asked for.
func criticRun(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("critic run", stderr)
	node := fs.String("node", "", "the node whose artifact is reviewed; a node without one: the checkout (default: the current node's artifact once written, else the last one written along the way)")
	brief := fs.String("brief", "", "what to ask the critic to look at, added to its prompt")
	briefFile := fs.String("brief-file", "", "read the brief from `FILE` ('-': standard input)")
	wait := fs.Duration("wait", 0, "wait up to this long for the round to end and print its findings (default: do not wait; they arrive as a new prompt)")
	asJSON := fs.Bool("json", false, "print the round as JSON")
	pos, err := parseInterspersed(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] == "" {
		return fmt.Errorf("%w: critic run NAME [--node NODE] [--brief TEXT|--brief-file F|-] [--wait D] [--json]", errUsage)
	}
	if *brief != "" && *briefFile != "" {
		return fmt.Errorf("%w: critic run: --brief and --brief-file are one or the other", errUsage)
	}
	if *briefFile != "" {
		b, err := readBrief(*briefFile)
		if err != nil {
			return &exitError{code: criticCannotRun, msg: "the-loop critic run: the brief: " + err.Error()}
		}
		*brief = b
	}
	name := pos[0]
	client, err := sessionClient(env)
	if err != nil {
		return &exitError{code: criticCannotRun, msg: "the-loop critic run: " + err.Error()}
	}
	client.HTTP = &http.Client{Timeout: *wait + criticRequestSlack}
	rctx, cancel := context.WithTimeout(ctx, *wait+criticRequestSlack)
	defer cancel()
	r, err := client.CriticRun(rctx, sessionapi.CriticRunRequest{Critic: name, Node: *node, Brief: *brief, Wait: sessionapi.Duration(*wait)})
	if err != nil {
		return &exitError{code: criticCannotRun, msg: "the-loop critic run: " + oneLine(err.Error())}
	}
	if *asJSON {
		if err := writeJSON(stdout, r); err != nil {
			return err
		}
	} else {
		writeRound(stdout, r)
	}
	if r.Outcome != "" && r.Outcome != sessionapi.CriticOK {
		return &exitError{code: criticRoundFailed, msg: fmt.Sprintf("the-loop critic run: critic %s: %s: %s", r.Critic, r.Outcome, oneLine(r.Error))}
	}
	return nil
}

// writeRound prints r as a person reads it.
func writeRound(w io.Writer, r sessionapi.CriticRound) {
	what := "the checkout"
	if r.Artifact != "" {
		what = r.Artifact
	}
	if r.Running {
		fmt.Fprintf(w, "critic %s is reviewing %s (round %s); its findings will be recorded on %s and arrive as a new prompt: stop and wait for them\n",
			r.Critic, what, r.ID, r.Ref)
		return
	}
	fmt.Fprintf(w, "critic %s on %s: %s after %s\n", r.Critic, what, r.Outcome, time.Duration(r.Duration))
	if r.Error != "" {
		fmt.Fprintf(w, "why: %s\n", r.Error)
	}
	switch {
	case r.URL != "":
		fmt.Fprintf(w, "recorded: %s\n", r.URL)
	case r.Pending:
		fmt.Fprintln(w, "recorded: not yet confirmed; the findings are on the bus and will be recorded")
	}
	if strings.TrimSpace(r.Findings) != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimRight(r.Findings, "\n"))
	}
}

// readBrief reads a brief from file name, or standard input for "-".
func readBrief(name string) (string, error) {
	var b []byte
	var err error
	if name == "-" {
		b, err = io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
	} else {
		b, err = os.ReadFile(name)
	}
	return string(b), err
}
