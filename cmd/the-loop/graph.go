package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/services/dispatcher/graphstate"
)

// cmdGraph shows or moves a work item's process graph.
//
//   - status REF [--json]: the state the dispatcher keeps in KV "graph".
//   - complete REF: the agent session says its node's work is done; the
//     work item leaves the current agent node by done and the entered node's
//     notifications are published, exactly as the dispatcher publishes them.
//     A human gate is refused: only an authorized person's comment decides
//     one.
//
// Both read and write the state through package graphstate, the dispatcher's
// own, with the same compare-and-set. A NATS request/reply endpoint on the
// dispatcher is the intended transport once pkg/bus offers one (see the
// decision record); the behaviour will not change.
func cmdGraph(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	const usage = "graph status|complete REF"
	if len(args) == 0 {
		return fmt.Errorf("%w: %s", errUsage, usage)
	}
	verb := args[0]
	fs := newFlags("graph "+verb, stderr)
	asJSON := fs.Bool("json", false, "status: print the state as JSON")
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

func graphStatus(ctx context.Context, env config.Env, stdout io.Writer, ref string, asJSON bool) error {
	conn, err := cliConnect(ctx, env, "the-loop-graph")
	if err != nil {
		return err
	}
	defer conn.Close()
	store, err := graphstate.Open(ctx, conn)
	if err != nil {
		return fmt.Errorf("graph state: %w", err)
	}
	st, rev, err := store.Get(ctx, ref)
	if err != nil {
		return err
	}
	if st == nil {
		return fmt.Errorf("%s has no graph state: no session has started its graph", ref)
	}
	if asJSON {
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stdout, "%s\n", b)
		return err
	}
	reg := graph.NewRegistry()
	g, known := reg.Get(st.Graph)
	fmt.Fprintf(stdout, "work item:  %s (%s)\n", ref, graphstate.WorkItemURL(ref))
	fmt.Fprintf(stdout, "graph:      %s (revision %d, version %d)\n", st.Graph, rev, st.Version)
	node := st.Current
	atGate := false
	if known {
		if n := g.Node(st.Current); n != nil && n.Phase != "" {
			node += " (phase: " + n.Phase + ")"
		}
		atGate = st.AtHumanGate(g)
	}
	fmt.Fprintf(stdout, "node:       %s\n", node)
	fmt.Fprintf(stdout, "status:     %s\n", st.Status)
	fmt.Fprintf(stdout, "human gate: %v\n", atGate)
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
	if len(st.ApprovedBy) > 0 {
		fmt.Fprintln(stdout, "approvedBy:")
		for _, a := range st.ApprovedBy {
			fmt.Fprintf(stdout, "  %s\n", a.Entry())
		}
	}
	return nil
}

func graphComplete(ctx context.Context, env config.Env, stdout io.Writer, ref string) error {
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	cfg := defaultConfig
	if s.Common.ConfigPath != "" {
		if cfg, _, err = config.LoadFile(s.Common.ConfigPath); err != nil {
			return err
		}
	}
	conn, err := cliConnect(ctx, env, "the-loop-graph")
	if err != nil {
		return err
	}
	defer conn.Close()
	store, err := graphstate.Open(ctx, conn)
	if err != nil {
		return fmt.Errorf("graph state: %w", err)
	}
	st, t, err := store.CompleteAndPublish(ctx, conn, graph.NewRegistry(), ref, cfg.Channels.Slack.MaxChars)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s done; now at %s (%s)\n", ref, t.From, t.To, st.Status)
	return nil
}
