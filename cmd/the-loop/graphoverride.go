package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/the-loop/bus/internal/hatch"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/graph"
	"github.com/the-loop/bus/services/dispatcher"
)

// The operator's escape hatch (docs/decisions/111-operator-escape-hatch.md):
// `the-loop graph advance|skip|force|escalate REF --reason TEXT` moves a
// stuck or misclassified work item by hand. The verb asks the dispatcher
// where the work item stands, checks the move against the graph when this
// process knows it, and publishes a graph.override to the inbox as the
// operator — the only identity the bus lets raise it. The ledger-writer
// records it on the work item, naming the operator (and the person, with
// --as) and the reason; the dispatcher then applies the recorded event,
// refusing it if the work item has left the node it was decided at.

// overrideFlags are the flags of the four verbs.
type overrideFlags struct {
	to, reason, as *string
	wait           *time.Duration
}

// addOverrideFlags registers the flags of action on fs; --to only where the
// verb takes a target, so that each verb's help lists exactly its own.
func addOverrideFlags(fs *flag.FlagSet, action graph.Action) overrideFlags {
	var f overrideFlags
	empty := ""
	f.to = &empty
	if action.NeedsTarget() {
		f.to = fs.String("to", "", "the node to move the work item to (required)")
	}
	f.reason = fs.String("reason", "", "why, recorded on the work item with the move (required)")
	f.as = fs.String("as", "", "your GitHub login, as routing.authorizedUsers names it, recorded as the person behind the operator")
	f.wait = fs.Duration("wait", 30*time.Second, "how long to wait for the dispatcher to apply the move (0: do not wait)")
	return f
}

// overrideUsage is the usage line of action.
func overrideUsage(action graph.Action) string {
	if action.NeedsTarget() {
		return "graph " + string(action) + " REF --to NODE --reason TEXT [--as LOGIN] [--wait D]"
	}
	return "graph " + string(action) + " REF --reason TEXT [--as LOGIN] [--wait D]"
}

// errSessionOverride: the escape hatch is the operator's, never an agent
// session's.
var errSessionOverride = errors.New("an agent session may not move its graph by hand")

// refuseInSession refuses the verb in an agent session's environment, which
// the dispatcher marks with the session endpoint and token. A session holds
// no bus credential either, so the bus would refuse the publish too; this
// says why in words.
func refuseInSession(env config.Env, verb string) error {
	_, url := env["LOOP_SESSION_URL"]
	_, token := env["LOOP_SESSION_TOKEN"]
	if url || token {
		return fmt.Errorf("graph %s is the operator's escape hatch: %w (finish the node with `the-loop graph complete`, or ask a person with `the-loop ask`)", verb, errSessionOverride)
	}
	return nil
}

// graphOverride checks and publishes the operator's move of ref, then waits
// for the dispatcher to apply it.
func graphOverride(ctx context.Context, env config.Env, stdout io.Writer, ref string, action graph.Action, f overrideFlags) error {
	reason := strings.TrimSpace(*f.reason)
	switch {
	case reason == "":
		return fmt.Errorf("%w: %s (the reason is recorded on the work item)", errUsage, overrideUsage(action))
	case action.NeedsTarget() && *f.to == "":
		return fmt.Errorf("%w: %s", errUsage, overrideUsage(action))
	}
	cfg, err := cliConfig(env)
	if err != nil {
		return err
	}
	m := hatch.Move{Ref: ref, Action: action, To: *f.to, Reason: reason}
	if *f.as != "" {
		if m.Person, err = hatch.Person(cfg, *f.as); err != nil {
			return fmt.Errorf("--as %w", err)
		}
	}
	conn, err := cliConnect(ctx, env, "the-loop-graph", write)
	if err != nil {
		return err
	}
	defer conn.Close()
	pub, err := hatch.Publish(ctx, conn, cfg, m)
	if err != nil {
		return err
	}
	ev, person, to := pub.Event, m.Person, pub.To
	who := "the operator"
	if person != nil {
		who += " (" + person.GetGithub() + ")"
	}
	fmt.Fprintf(stdout, "requested %s of %s from %s to %s as %s (%s); it is recorded on the work item, then applied by the dispatcher\n",
		action, ref, pub.From, orNext(to), who, ev.GetId())
	if *f.wait <= 0 {
		return nil
	}
	return waitOverride(ctx, conn, stdout, ref, ev.GetId(), *f.wait)
}

// orNext names a target the CLI could not work out.
func orNext(to string) string {
	if to == "" {
		return "its next node"
	}
	return to
}

// waitOverride polls the dispatcher until the override with id is in the
// work item's state. Not applied in time is not an error: the ledger-writer
// may be waiting out GitHub, and the move is applied once recorded.
func waitOverride(ctx context.Context, conn *bus.Conn, stdout io.Writer, ref, id string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	for {
		var ans dispatcher.GraphStatus
		if err := hatch.Ask(ctx, conn, dispatcher.SubjectGraphStatus, ref, &ans); err == nil && ans.State != nil && ans.State.Overridden(id) {
			fmt.Fprintf(stdout, "%s: applied; now at %s (%s)\n", ref, ans.State.Current, ans.State.Status)
			return nil
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stdout, "%s: not applied within %s; `the-loop graph status %s` shows whether it was, and the dispatcher's log why not\n", ref, wait, ref)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// cliConfig is the operator config this process is given (LOOP_CONFIG), or
// the default one.
func cliConfig(env config.Env) (*config.Config, error) {
	s, err := loadSettings(env)
	if err != nil {
		return nil, err
	}
	if s.Common.ConfigPath == "" {
		return defaultConfig, nil
	}
	cfg, _, err := config.LoadFile(s.Common.ConfigPath)
	return cfg, err
}
