package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// The verbs an agent session runs (docs/agents.md). Each asks the
// dispatcher's session endpoint with the session's own token, about the
// session's own work item; none of them touches the bus.

// agentTimeout bounds one request of these verbs.
const agentTimeout = 30 * time.Second

// inSession reports whether env is an agent session's.
func inSession(env config.Env) bool {
	_, ok := env["LOOP_SESSION_URL"]
	return ok
}

// writeJSON prints v indented.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// graphShow prints the session's graph, node by node, with where the work
// item stands.
func graphShow(ctx context.Context, env config.Env, stdout io.Writer, asJSON bool) error {
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	v, err := client.Graph(rctx)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "%s follows %s; now at %s (%s)\n", v.Ref, v.Graph, v.CurrentNode, v.Status)
	if v.SpecDir != "" {
		fmt.Fprintf(stdout, "artifacts: %s/\n", v.SpecDir)
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tNODE\tACTOR\tPHASE\tARTIFACT\tLEADS TO")
	for _, n := range v.Nodes {
		mark := ""
		if n.Current {
			mark = "→"
		}
		actor := n.Actor
		if n.Gate != "" {
			actor += " (" + n.Gate + ")"
		}
		if n.Terminal {
			actor += ", terminal"
		}
		if n.Skipped {
			actor += ", skipped"
		}
		var edges []string
		for _, o := range []string{"done", "execute", "approved", "approved-with-comments", "changes-requested", "more-work", "escalate"} {
			if to, ok := n.On[o]; ok {
				edges = append(edges, o+"→"+to)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", mark, n.Name, actor, n.Phase, n.Artifact, strings.Join(edges, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range v.Nodes {
		if n.Current && (n.Instructions != "" || len(n.Checks) > 0) {
			if n.Instructions != "" {
				fmt.Fprintf(stdout, "%s: %s\n", n.Name, n.Instructions)
			}
			for _, c := range n.Checks {
				fmt.Fprintf(stdout, "%s is done once %s\n", n.Name, c)
			}
		}
	}
	return nil
}

// sessionsRegister records the conversation id the session's harness chose
// for itself.
func sessionsRegister(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("sessions register", stderr)
	ref := fs.String("work-item", "", "the work item (default: the session's own; another is refused)")
	id := fs.String("harness-session-id", "", "the harness's own conversation id")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *id == "" || fs.NArg() > 0 {
		return fmt.Errorf("%w: sessions register --harness-session-id ID [--work-item REF]", errUsage)
	}
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	r, err := client.Register(rctx, *ref, *id)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s conversation %s registered; a respawn resumes it\n", r.Ref, r.Harness, r.HarnessSessionID)
	return nil
}

// sessionsLinkPR records a pull request as delivering the session's work
// item.
func sessionsLinkPR(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("sessions link-pr", stderr)
	ref := fs.String("work-item", "", "the work item (default: the session's own; another is refused)")
	pr := fs.String("pull-request", "", "the pull request: its number in the work item's repository (16, #16) or a ref (github:owner/other#16)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *pr == "" && fs.NArg() == 1 {
		*pr = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%w: sessions link-pr --pull-request N|REF [--work-item REF]", errUsage)
	}
	if *pr == "" {
		return fmt.Errorf("%w: sessions link-pr --pull-request N|REF [--work-item REF]", errUsage)
	}
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	l, err := client.LinkPR(rctx, *ref, *pr)
	if err != nil {
		return err
	}
	if l.Already {
		fmt.Fprintf(stdout, "%s already delivers %s\n", l.PullRequest, l.Ref)
		return nil
	}
	fmt.Fprintf(stdout, "%s now delivers %s: its reviews, comments and checks reach this work item\n", l.PullRequest, l.Ref)
	return nil
}

// cmdInstructions prints the repository's instruction documents for the
// session's current step.
func cmdInstructions(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("instructions", stderr)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	text := fs.Bool("text", true, "print each present document's text")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: instructions [--json] [--text=false]", errUsage)
	}
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	in, err := client.Instructions(rctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, in)
	}
	fmt.Fprintf(stdout, "%s at %s (%s): %d instruction document(s)\n", in.Ref, in.Node, in.Phase, len(in.Docs))
	for _, n := range slices.Sorted(maps.Keys(in.Notes)) {
		fmt.Fprintf(stdout, "note: %s: %s\n", n, in.Notes[n])
	}
	for _, d := range in.Docs {
		step := ""
		if d.Step {
			step = " (this step's own)"
		}
		fmt.Fprintf(stdout, "- %s: %s%s", d.Path, d.State, step)
		if d.Notes != "" {
			fmt.Fprintf(stdout, " — %s", d.Notes)
		}
		fmt.Fprintln(stdout)
		if *text && d.Text != "" {
			fmt.Fprintf(stdout, "\n%s\n\n", strings.TrimRight(d.Text, "\n"))
		}
	}
	return nil
}

// cmdScenarios prints the test scenarios the repository's tests declare.
func cmdScenarios(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("scenarios", stderr)
	asJSON := fs.Bool("json", false, "print the answer as JSON")
	var globs globList
	fs.Var(&globs, "glob", "a glob of test files, relative to the checkout (repeatable; replaces the repository's own)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: scenarios [--glob PATTERN]... [--json]", errUsage)
	}
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, agentTimeout)
	defer cancel()
	s, err := client.Scenarios(rctx, globs)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, s)
	}
	if len(s.Scenarios) == 0 {
		fmt.Fprintf(stdout, "no scenarios found under the checkout in %s\n", strings.Join(s.Globs, ", "))
		return nil
	}
	tw := tabwriter.NewWriter(stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FEATURE\tSCENARIO\tWHERE\tREQUIREMENT")
	for _, sc := range s.Scenarios {
		fmt.Fprintf(tw, "%s\t%s\t%s:%d\t%s\n", sc.Feature, sc.Scenario, sc.File, sc.Line, sc.Requirement)
	}
	if s.Truncated {
		fmt.Fprintln(tw, "…\t(the scan stopped at its bound)\t\t")
	}
	return tw.Flush()
}

// globList is a repeatable string flag.
type globList []string

func (g *globList) String() string     { return strings.Join(*g, ",") }
func (g *globList) Set(v string) error { *g = append(*g, v); return nil }

// sessionRef is the work item the session's token names ("" when none).
func sessionRef(env config.Env) string {
	ref, _ := sessionapi.TokenRef(env["LOOP_SESSION_TOKEN"])
	return ref
}
