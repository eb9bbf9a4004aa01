package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
)

// cmdEvents prints the bus catalog (--types), the event-log catalog
// (--log-types), or tails the event log (--follow).
func cmdEvents(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("events", stderr)
	types := fs.Bool("types", false, "print the catalog event types and their flags")
	logTypes := fs.Bool("log-types", false, "print the event-log record types")
	follow := fs.Bool("follow", false, "tail the event log (loop.log.>) until interrupted")
	last := fs.Int("last", 0, "with --follow: start with the last N records")
	jsonOut := fs.Bool("json", false, "with --follow: print records as JSON lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case *types:
		return catalog.WriteTable(stdout)
	case *logTypes:
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "LOG TYPE\tLEVEL\tDESCRIPTION")
		for _, t := range eventlog.Types() {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", t.Name, t.Level, t.Description)
		}
		return tw.Flush()
	case *follow:
		conn, err := cliConnect(ctx, env, "the-loop-events", read)
		if err != nil {
			return err
		}
		defer conn.Close()
		err = conn.TailLog(ctx, bus.TailOptions{Last: *last}, func(r bus.LogRecord) error {
			if *jsonOut {
				_, err := fmt.Fprintf(stdout, "%s\n", r.Data)
				return err
			}
			var rec eventlog.Record
			if err := json.Unmarshal(r.Data, &rec); err != nil {
				_, err := fmt.Fprintf(stdout, "%s (unreadable record: %v)\n", r.Subject, err)
				return err
			}
			_, err := fmt.Fprintln(stdout, eventlog.Format(rec))
			return err
		})
		if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			return fmt.Errorf("follow the event log: %w", err)
		}
		return nil
	}
	return fmt.Errorf("%w: events needs --types, --log-types or --follow", errUsage)
}
