package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// exitError ends a verb with its own exit code; run prints its message, if
// any, to stderr as it is. The agent's verbs speak protocols in which the
// code carries the meaning (a Stop hook's 2 blocks the stop).
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// checkTimeout bounds the one request `check` makes.
const checkTimeout = 20 * time.Second

// Exit codes of `the-loop check` (docs/agents.md).
const (
	checkPassed    = 0
	checkFailed    = 1
	checkCannotRun = 2
)

// cmdCheck asks the session endpoint whether the session's current node is
// complete and prints the answer: a short table, or the CheckReport as
// JSON. It exits 0 when nothing fails by --fail-on (block: only a node the
// agent can act on fails; unmet: a wait on a person fails too), 1 when
// something does, and 2 when it could not ask (no session endpoint in the
// environment, the endpoint unreachable, or a refusal), with the reason on
// stderr.
func cmdCheck(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("check", stderr)
	asJSON := fs.Bool("json", false, "print the check report as JSON")
	failOn := fs.String("fail-on", "block", "what fails the check: block (a node the agent can act on), or unmet (also a wait on a person)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: check [--json] [--fail-on block|unmet] (unexpected %q)", errUsage, fs.Arg(0))
	}
	if *failOn != "block" && *failOn != "unmet" {
		return fmt.Errorf("%w: check: --fail-on is block or unmet, not %q", errUsage, *failOn)
	}
	client, ok := sessionEndpoint(env, checkTimeout)
	if !ok {
		return &exitError{code: checkCannotRun, msg: "the-loop check: could not run: " + sessionapi.ErrNoEndpoint.Error()}
	}
	report, err := client.Check(ctx)
	if err != nil {
		return &exitError{code: checkCannotRun, msg: "the-loop check: could not run: " + oneLine(err.Error())}
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(report); err != nil {
			return err
		}
	} else {
		writeCheck(stdout, report)
	}
	if checkFails(report, *failOn) {
		return &exitError{code: checkFailed, msg: fmt.Sprintf("the-loop check: %s: %s at %s", oneLine(report.Ref), oneLine(report.Status), oneLine(report.CurrentNode))}
	}
	return nil
}

// checkFails reports whether r fails by failOn: block fails on a blocking
// node only; unmet on anything but ok, done and skipped (a status this
// binary does not know included: a gate fails closed).
func checkFails(r sessionapi.CheckReport, failOn string) bool {
	if failOn == "unmet" {
		switch r.Status {
		case sessionapi.CheckOK, sessionapi.CheckDone, sessionapi.CheckSkipped:
			return false
		}
		return true
	}
	return r.Blocking()
}

// writeCheck prints r for a person or an agent: the work item, where it
// stands and why, then one line per visited node.
func writeCheck(w io.Writer, r sessionapi.CheckReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "work item\t%s\n", oneLine(r.Ref))
	if r.Graph != "" {
		fmt.Fprintf(tw, "graph\t%s\n", oneLine(r.Graph))
	}
	node := oneLine(r.CurrentNode)
	if r.Phase != "" && r.Phase != r.CurrentNode {
		node += " (phase " + oneLine(r.Phase) + ")"
	}
	fmt.Fprintf(tw, "node\t%s\n", node)
	fmt.Fprintf(tw, "status\t%s\n", oneLine(r.Status))
	for _, m := range r.Messages {
		fmt.Fprintf(tw, "\t· %s\n", oneLine(m))
	}
	if r.SpecDir != "" {
		fmt.Fprintf(tw, "specs\t%s\n", oneLine(r.SpecDir))
	}
	tw.Flush()
	if len(r.Nodes) == 0 {
		return
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tACTOR\tSTATUS\tMESSAGES")
	for _, n := range r.Nodes {
		msgs := make([]string, len(n.Messages))
		for i, m := range n.Messages {
			msgs[i] = oneLine(m)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", oneLine(n.Node), oneLine(n.Actor), oneLine(n.Status), strings.Join(msgs, "; "))
	}
	tw.Flush()
}

// oneLine makes s safe to print on one line of a terminal or an agent's
// context: control characters (escapes, newlines, tabs) become spaces.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == unicode.ReplacementChar || unicode.Is(unicode.Bidi_Control, r) {
			return ' '
		}
		return r
	}, s)
	return strings.TrimSpace(s)
}

// sessionEndpoint is the session endpoint's client, from the two variables
// the dispatcher sets in a session, read as they are: the hooks run on every
// turn of every session, and a setting elsewhere in the environment that the
// process settings would refuse must not take them down. ok is false
// outside a session.
func sessionEndpoint(env config.Env, timeout time.Duration) (sessionapi.Client, bool) {
	url, token := env["LOOP_SESSION_URL"], env["LOOP_SESSION_TOKEN"]
	if url == "" || token == "" {
		return sessionapi.Client{}, false
	}
	return sessionapi.Client{URL: url, Token: token, HTTP: &http.Client{Timeout: timeout}}, true
}
