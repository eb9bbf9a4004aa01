package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/the-loop/bus/internal/hatch"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/pkg/graphstate"
	"github.com/the-loop/bus/services/dispatcher"
	"github.com/the-loop/bus/services/dispatcher/sessionapi"
)

// cmdGraph shows or moves a work item's process graph by asking the
// dispatcher on its request/reply endpoint (dispatcher.SubjectGraphStatus,
// dispatcher.SubjectGraphComplete), which owns the state in KV "graph" and
// judges it by the graphs of the operator config in force.
//
//   - status REF [--json]: the state, and how the dispatcher reads it.
//   - complete REF: the agent session says its node's work is done; the
//     dispatcher moves the work item on by done and publishes the entered
//     node's notifications. A human gate is refused: only an authorized
//     person's comment decides one. In a session it goes through the
//     session endpoint (its own work item only); an operator's needs the
//     operator credential.
//   - advance REF --to NODE, skip REF, force REF --to NODE, escalate REF,
//     each with --reason TEXT [--as LOGIN]: the operator's escape hatch
//     (graphoverride.go). Never from an agent session, but for escalate
//     --reason TEXT, which there hands the session's own agent node to a
//     person (the graph's escalated end).
//
// With no dispatcher running the verb says so at once.
func cmdGraph(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	const usage = "graph status|complete REF, graph advance|force REF --to NODE --reason TEXT, graph skip|escalate REF --reason TEXT, " +
		"or inside an agent session: graph show|status|complete, graph escalate --reason TEXT"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	verb := args[0]
	fs := newFlags("graph "+verb, stderr)
	override := graph.Action(verb).Valid()
	var asJSON *bool
	var ov overrideFlags
	if override {
		ov = addOverrideFlags(fs, graph.Action(verb))
	} else {
		asJSON = fs.Bool("json", false, "status: print the state as JSON")
	}
	// The ref may come before or after the flags.
	rest := args[1:]
	var ref string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		ref, rest = rest[0], rest[1:]
	}
	if err := parseFlags(fs, rest); err != nil {
		return err
	}
	if ref == "" && fs.NArg() == 1 {
		ref = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	if graph.Action(verb) == graph.ActionEscalate && inSession(env) {
		// A session hands its own node to a person: not the operator's
		// hatch, the session endpoint's escalate.
		return sessionEscalate(ctx, env, stdout, ref, ov)
	}
	if override {
		// Refused before anything else, whatever the arguments: a session
		// learns at once that this is not its verb.
		if err := refuseInSession(env, verb); err != nil {
			return err
		}
		if ref == "" {
			return fmt.Errorf("%w: %s", errUsage, overrideUsage(graph.Action(verb)))
		}
		if graphstate.WorkItemURL(ref) == "" {
			return fmt.Errorf("%w: %q is not a ref like github:owner/repo#15", errUsage, ref)
		}
		return graphOverride(ctx, env, stdout, ref, graph.Action(verb), ov)
	}
	if verb == "show" {
		// The session's own graph: its token names the work item.
		if ref != "" {
			return fmt.Errorf("%w: graph show takes no ref: it shows the session's own work item", errUsage)
		}
		return graphShow(ctx, env, stdout, *asJSON)
	}
	if ref == "" && inSession(env) && (verb == "complete" || verb == "status") {
		ref = sessionRef(env)
	}
	if ref == "" {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	if graphstate.WorkItemURL(ref) == "" {
		return fmt.Errorf("%w: %q is not a ref like github:owner/repo#15", errUsage, ref)
	}
	switch verb {
	case "status":
		return graphStatus(ctx, env, stdout, ref, *asJSON)
	case "complete":
		return graphComplete(ctx, env, stdout, ref)
	}
	return fmt.Errorf("%w: %s", errUsage, usage)
}

// graphTimeout bounds one request: a complete reads the session registry,
// writes KV and waits for the notifications' acknowledgements.
const graphTimeout = 30 * time.Second

// askDispatcher connects and asks the dispatcher (requestGraph).
func askDispatcher(ctx context.Context, env config.Env, subject, ref string, out any) error {
	need := read
	if subject == dispatcher.SubjectGraphComplete {
		need = write
	}
	conn, err := cliConnect(ctx, env, "the-loop-graph", need)
	if err != nil {
		return err
	}
	defer conn.Close()
	return hatch.Ask(ctx, conn, subject, ref, out)
}

func graphStatus(ctx context.Context, env config.Env, stdout io.Writer, ref string, asJSON bool) error {
	var ans dispatcher.GraphStatus
	if api, ok, err := readThroughAPI(env); err != nil {
		return err
	} else if ok {
		if err := api.get(ctx, "/work-items/"+url.PathEscape(ref)+"/graph", &ans); err != nil {
			return err
		}
	} else if err := askDispatcher(ctx, env, dispatcher.SubjectGraphStatus, ref, &ans); err != nil {
		return err
	}
	st := ans.State
	if st == nil {
		return fmt.Errorf("the dispatcher's answer on %s carries no state", dispatcher.SubjectGraphStatus)
	}
	if asJSON {
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	fmt.Fprintf(stdout, "work item:  %s (%s)\n", ref, ans.URL)
	graphLine := st.Graph
	if !ans.Known {
		graphLine += " (not in the dispatcher's config)"
	}
	fmt.Fprintf(stdout, "graph:      %s (revision %d, version %d)\n", graphLine, ans.Revision, st.Version)
	node := st.Current
	if ans.Phase != "" {
		node += " (phase: " + ans.Phase + ")"
	}
	fmt.Fprintf(stdout, "node:       %s\n", node)
	fmt.Fprintf(stdout, "status:     %s\n", st.Status)
	fmt.Fprintf(stdout, "human gate: %v\n", ans.AtHumanGate)
	if st.Reason != "" {
		fmt.Fprintf(stdout, "reason:     %s\n", st.Reason)
	}
	fmt.Fprintln(stdout, "history:")
	for _, h := range st.History {
		line := "  " + h.EnteredAt.UTC().Format(time.RFC3339) + "  " + h.Node
		if h.Skipped {
			line += " (skipped)"
		}
		if h.Outcome != "" {
			line += " → " + string(h.Outcome)
		}
		fmt.Fprintln(stdout, line)
	}
	if len(st.Decisions) > 0 {
		fmt.Fprintln(stdout, "decisions:")
		for _, d := range st.Decisions {
			fmt.Fprintf(stdout, "  %s  %s: %s by %s\n", d.At.UTC().Format(time.RFC3339), d.Node, d.Outcome, quoteList(d.By))
		}
	}
	if len(st.Overrides) > 0 {
		// The operator's moves by hand, with who and why, as recorded on
		// the work item (docs/decisions/111-operator-escape-hatch.md).
		fmt.Fprintln(stdout, "overrides:")
		for _, o := range st.Overrides {
			by := "the operator"
			if o.By != "" {
				by += " (" + o.By + ")"
			}
			fmt.Fprintf(stdout, "  %s  %s %s → %s by %s: %s\n", o.At.UTC().Format(time.RFC3339), o.Action, o.From, o.To, by, o.Reason)
		}
	}
	if len(st.ApprovedBy) > 0 {
		fmt.Fprintln(stdout, "approvedBy:")
		for _, a := range st.ApprovedBy {
			fmt.Fprintf(stdout, "  %s\n", a.Entry())
		}
	}
	return nil
}

// sessionEscalate hands the session's own agent node to a person through
// the session endpoint; the reason reaches them with the escalation.
func sessionEscalate(ctx context.Context, env config.Env, stdout io.Writer, ref string, f overrideFlags) error {
	reason := strings.TrimSpace(*f.reason)
	switch {
	case reason == "":
		return fmt.Errorf("%w: graph escalate --reason TEXT (say why a person is needed)", errUsage)
	case *f.as != "":
		return fmt.Errorf("%w: graph escalate in a session takes no --as: the session escalates as itself", errUsage)
	case ref != "" && ref != sessionRef(env):
		return fmt.Errorf("%w: a session escalates only its own work item (%s)", errUsage, sessionRef(env))
	}
	client, err := sessionClient(env)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, graphTimeout)
	defer cancel()
	var ans dispatcher.GraphCompleted
	if err := client.Escalate(rctx, ref, reason, &ans); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s escalated to a person; now at %s\n", ans.Ref, ans.From, ans.To)
	return nil
}

// sessionCompleteTimeout bounds a session's complete: its node's tests may
// run first, as long as a verify-tests hook allows.
const sessionCompleteTimeout = time.Duration(graph.MaxTestTimeoutSeconds)*time.Second + 5*time.Minute

// graphComplete moves ref on. Inside an agent session (LOOP_SESSION_URL set)
// it asks the session endpoint, which lets a session complete only its own
// work item's node; elsewhere it is the operator's request on the bus.
func graphComplete(ctx context.Context, env config.Env, stdout io.Writer, ref string) error {
	var ans dispatcher.GraphCompleted
	if _, inSession := env["LOOP_SESSION_URL"]; inSession {
		client, err := sessionClient(env)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, sessionCompleteTimeout)
		defer cancel()
		said := false
		if err := client.CompleteWatching(rctx, ref, &ans, func(p sessionapi.CompletePending) {
			if !said {
				fmt.Fprintf(stdout, "%s: %s: %s; waiting\n", ref, p.Node, p.Running)
				said = true
			}
		}); err != nil {
			return err
		}
	} else if err := askDispatcher(ctx, env, dispatcher.SubjectGraphComplete, ref, &ans); err != nil {
		return err
	}
	status := ""
	if ans.State != nil {
		status = string(ans.State.Status)
	}
	fmt.Fprintf(stdout, "%s: %s done; now at %s (%s)\n", ref, ans.From, ans.To, status)
	return nil
}
