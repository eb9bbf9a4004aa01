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
	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/control"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/sessions"
)

// cmdSessions lists agent sessions, or asks for one to be paused, resumed,
// stopped or cleaned up, or for a leftover tmux session in a work item's
// place to be adopted or ended (docs/decisions/100-a-tmux-server-per-session.md). A request is a control.command event from the cli
// channel: the ledger records it on the work item and the dispatcher that
// hosts the session executes it after the same named-actor check as a typed
// keyword — only that replica can reach the session's tmux.
func cmdSessions(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: sessions list|pause|resume|stop|cleanup|adopt|end|register|link-pr", errUsage)
	}
	verb := args[0]
	switch verb {
	case "register":
		return sessionsRegister(ctx, args[1:], env, stdout, stderr)
	case "link-pr":
		return sessionsLinkPR(ctx, args[1:], env, stdout, stderr)
	case "list":
		fs := newFlags("sessions list", stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if api, ok, err := readThroughAPI(env); err != nil {
			return err
		} else if ok {
			var list struct{ Sessions []statuspage.Session }
			if err := api.get(ctx, "/sessions", &list); err != nil {
				return err
			}
			return writeSessions(stdout, list.Sessions)
		}
		conn, err := cliConnect(ctx, env, "the-loop-sessions", read)
		if err != nil {
			return err
		}
		defer conn.Close()
		store, err := sessions.Open(ctx, conn)
		if err != nil {
			return fmt.Errorf("session registry: %w", err)
		}
		recs, err := store.List(ctx)
		if err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
		list := make([]statuspage.Session, len(recs))
		for i, r := range recs {
			list[i] = statuspage.SessionOf(r)
		}
		return writeSessions(stdout, list)
	case "pause", "resume", "stop", "cleanup", "adopt", "end":
		fs := newFlags("sessions "+verb, stderr)
		ref := fs.String("work-item", "", "the work item, github:owner/repo#N")
		as := fs.String("as", "", "your GitHub login, as routing.authorizedUsers names it")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if *ref == "" || *as == "" {
			return fmt.Errorf("%w: sessions %s --work-item REF --as LOGIN", errUsage, verb)
		}
		return requestControl(ctx, env, stdout, control.Command(verb), *ref, *as)
	}
	return fmt.Errorf("%w: sessions list|pause|resume|stop|cleanup|adopt|end", errUsage)
}

// writeSessions prints the sessions table, read from NATS or through the
// API: a work item without a session shows dashes.
func writeSessions(w io.Writer, list []statuspage.Session) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORK ITEM\tSTATUS\tHOST\tTMUX\tHARNESS SESSION\tLAST CONTROL\tDELIVERED\tUNCERTAIN")
	dash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, x := range list {
		host, target, hid := x.Host, x.TmuxTarget, x.HarnessSession
		if x.Status == statuspage.NoSession {
			host, target, hid = "-", "-", "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", x.Ref, x.Status, host, target, hid, dash(x.Control), x.Delivered, dash(x.Uncertain))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%d work item(s)\n", len(list))
	return err
}

// requestControl publishes a control.command from the cli channel. The actor
// comes from config, never from the flag alone: the login must be an
// authorized person, whose every id goes into the record (R5.4).
func requestControl(ctx context.Context, env config.Env, stdout io.Writer, cmd control.Command, ref, login string) error {
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	if !strings.HasPrefix(ref, "github:") || !strings.Contains(ref, "#") {
		return fmt.Errorf("%w: --work-item %q is not a ref like github:owner/repo#15", errUsage, ref)
	}
	cfg := defaultConfig
	if s.Common.ConfigPath != "" {
		if cfg, _, err = config.LoadFile(s.Common.ConfigPath); err != nil {
			return err
		}
	}
	ev, err := hatch.ControlEvent(cfg, "cli-control", ref, cmd, login, time.Now())
	if errors.Is(err, statuspage.ErrUnknownPerson) {
		return fmt.Errorf("%s is not in routing.authorizedUsers: the dispatcher would refuse the command", login)
	}
	if err != nil {
		return err
	}
	msg, err := envelope.ToMessage(ev, envelope.Inbox, "")
	if err != nil {
		return err
	}
	conn, err := cliConnect(ctx, env, "the-loop-sessions", write)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.Publish(ctx, bus.FromEnvelope(msg)); err != nil {
		return fmt.Errorf("publish the request: %w", err)
	}
	fmt.Fprintf(stdout, "requested %s of %s as %s (%s); it is recorded on the work item, then executed by the dispatcher that hosts the session\n", cmd, ref, ev.GetActor().GetGithub(), ev.GetId())
	return nil
}
