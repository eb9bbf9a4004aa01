package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/the-loop/bus/internal/hatch"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/identity"
	"github.com/the-loop/bus/pkg/sessions"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// cmdStanding lists the standing sessions of the operator config, starts and
// stops them, and speaks to one
// (docs/decisions/118-standing-sessions-keep-a-ledger-issue.md). A start or a
// stop is the control command on the session's ledger issue, a message a
// reply on it: each is recorded there by the ledger before the dispatcher
// that hosts the session acts on it, exactly as if the person had typed it.
func cmdStanding(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: standing list|start|stop|say", errUsage)
	}
	verb := args[0]
	switch verb {
	case "list":
		fs := newFlags("standing list", stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		cfg, err := standingConfig(env)
		if err != nil {
			return err
		}
		recs := map[string]sessions.Record{}
		if len(cfg.Standing.Sessions) > 0 {
			conn, err := cliConnect(ctx, env, "the-loop-standing", read)
			if err != nil {
				return err
			}
			defer conn.Close()
			store, err := sessions.Open(ctx, conn)
			if err != nil {
				return fmt.Errorf("session registry: %w", err)
			}
			for _, st := range cfg.Standing.Sessions {
				if st.Ledger == "" {
					continue
				}
				rec, _, err := store.Get(ctx, st.Ledger)
				if err != nil {
					return fmt.Errorf("session registry: %w", err)
				}
				recs[st.Name] = rec
			}
		}
		return writeStanding(stdout, cfg.Standing, recs)
	case "start", "stop":
		fs := newFlags("standing "+verb, stderr)
		as := fs.String("as", "", "your GitHub login, as routing.authorizedUsers names it")
		names, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if *as == "" || len(names) > 1 {
			return fmt.Errorf("%w: standing %s [NAME] --as LOGIN", errUsage, verb)
		}
		cfg, err := standingConfig(env)
		if err != nil {
			return err
		}
		picked, err := pickStanding(cfg.Standing, names, verb == "start")
		if err != nil {
			return err
		}
		cmd := control.Start
		if verb == "stop" {
			cmd = control.Stop
		}
		for _, st := range picked {
			if err := requestControl(ctx, env, stdout, cmd, st.Ledger, *as); err != nil {
				return fmt.Errorf("standing session %s: %w", st.Name, err)
			}
		}
		return nil
	case "say":
		fs := newFlags("standing say", stderr)
		text := fs.String("text", "", "the message, typed into the session's terminal")
		as := fs.String("as", "", "your GitHub login, as routing.authorizedUsers names it")
		names, err := parseInterspersed(fs, args[1:])
		if err != nil {
			return err
		}
		if len(names) != 1 || strings.TrimSpace(*text) == "" || *as == "" {
			return fmt.Errorf("%w: standing say NAME --text TEXT --as LOGIN", errUsage)
		}
		cfg, err := standingConfig(env)
		if err != nil {
			return err
		}
		picked, err := pickStanding(cfg.Standing, names, false)
		if err != nil {
			return err
		}
		return sayStanding(ctx, env, stdout, cfg, picked[0], *text, *as)
	}
	return fmt.Errorf("%w: standing list|start|stop|say", errUsage)
}

// standingConfig is the operator config LOOP_CONFIG names, which declares
// the standing sessions; without one there are none to act on.
func standingConfig(env config.Env) (*config.Config, error) {
	s, err := loadSettings(env)
	if err != nil {
		return nil, err
	}
	if s.Common.ConfigPath == "" {
		return nil, errors.New("no operator config: standing sessions are declared in its standingSessions, and LOOP_CONFIG names none")
	}
	cfg, _, err := config.LoadFile(s.Common.ConfigPath)
	return cfg, err
}

// pickStanding is the sessions a verb acts on: the one named, or — for a
// start without a name — every one that auto-starts, or — for a stop
// without one — every declared one. Each needs a ledger issue, and a start
// needs standing sessions on; a session started before they were switched
// off stays stoppable, and may be spoken to while it runs.
func pickStanding(st config.Standing, names []string, start bool) ([]config.StandingSession, error) {
	if !st.Enabled && start {
		return nil, errors.New("standingSessions.enabled is false in the operator config: no standing session starts")
	}
	var out []config.StandingSession
	if len(names) == 1 {
		x, ok := st.Session(names[0])
		if !ok {
			return nil, fmt.Errorf("no standing session %q is declared in standingSessions.sessions", names[0])
		}
		out = append(out, x)
	} else {
		for _, x := range st.Sessions {
			if !start || x.AutoStart {
				out = append(out, x)
			}
		}
	}
	var ok []config.StandingSession
	for _, x := range out {
		if x.Ledger == "" {
			if len(names) == 1 {
				return nil, fmt.Errorf("standing session %q names no ledger issue (ledger: owner/repo#N): it cannot run", x.Name)
			}
			continue
		}
		ok = append(ok, x)
	}
	if len(ok) == 0 {
		return nil, errors.New("no standing session to act on: none is declared with a ledger issue (and autoStart, for a start without a name)")
	}
	return ok, nil
}

func writeStanding(w io.Writer, st config.Standing, recs map[string]sessions.Record) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tLEDGER\tSTATUS\tHOST\tTMUX\tAUTOSTART\tSLACK\tDESCRIPTION")
	for _, x := range st.Sessions {
		ledger, status, host, target := x.Ledger, "not running", "-", "-"
		if ledger == "" {
			ledger, status = "-", "no ledger issue"
		}
		if s := recs[x.Name].Session; s.Live() && s.Kind == sessions.KindStanding {
			status, host, target = string(s.Status), s.Host, s.TmuxTarget
		}
		desc := x.Description
		if desc == "" {
			desc = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\t%t\t%s\n", x.Name, ledger, status, host, target, x.AutoStart, x.Slack, desc)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	state := "on"
	if !st.Enabled {
		state = "off (standingSessions.enabled is false: none starts)"
	}
	_, err := fmt.Fprintf(w, "%d standing session(s), %s\n", len(st.Sessions), state)
	return err
}

// sayStanding publishes text as the person's reply to the standing session
// st from the cli: recorded on its ledger issue, then typed into its
// terminal. A message answers a session that runs, never starts one: it is
// refused here when the registry shows none, as the dispatcher would drop it.
func sayStanding(ctx context.Context, env config.Env, stdout io.Writer, cfg *config.Config, st config.StandingSession, text, login string) error {
	person, ok := cfg.Routing.AuthorizedUsers.ByChannel(identity.ChannelGitHub, login)
	if !ok {
		return fmt.Errorf("%s is not in routing.authorizedUsers: the dispatcher would refuse the message", login)
	}
	conn, err := cliConnect(ctx, env, "the-loop-standing", write)
	if err != nil {
		return err
	}
	defer conn.Close()
	store, err := sessions.Open(ctx, conn)
	if err != nil {
		return fmt.Errorf("session registry: %w", err)
	}
	rec, _, err := store.Get(ctx, st.Ledger)
	if err != nil {
		return fmt.Errorf("session registry: %w", err)
	}
	if !rec.Session.Live() || rec.Session.Kind != sessions.KindStanding {
		return fmt.Errorf("standing session %s is not running: start it with `the-loop standing start %s --as %s`", st.Name, st.Name, login)
	}
	ev := hatch.ReplyEvent("cli-say", st.Ledger, &loopv1.Actor{Github: person.GitHub, Slack: person.Slack, Name: person.Name}, text, time.Now())
	msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		return err
	}
	if _, err := conn.Publish(ctx, bus.FromEnvelope(msg)); err != nil {
		return fmt.Errorf("publish the message: %w", err)
	}
	fmt.Fprintf(stdout, "said to standing session %s as %s (%s); it is recorded on %s, then typed into its terminal\n", st.Name, person.GitHub, ev.GetId(), st.Ledger)
	return nil
}
