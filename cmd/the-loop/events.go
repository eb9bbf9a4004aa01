package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
)

// cmdEvents prints the bus catalog (--types), the event-log catalog
// (--log-types), tails the event log (--follow), or prints the stored
// records the query flags select.
func cmdEvents(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("events", stderr)
	types := fs.Bool("types", false, "print the catalog event types and their flags")
	logTypes := fs.Bool("log-types", false, "print the event-log record types")
	follow := fs.Bool("follow", false, "tail the event log (loop.log.>) until interrupted")
	last := fs.Int("last", 0, "with --follow: start with the last N records")
	jsonOut := fs.Bool("json", false, "print records as JSON lines")
	workItem := fs.String("work-item", "", "only records about this work item (github:owner/repo#N)")
	typ := fs.String("type", "", "only records of this type (graph.advanced), or about events of this catalog type (gate.feedback)")
	since := fs.String("since", "", "only records since then: a duration back from now (90m) or a time (RFC 3339)")
	delivery := fs.String("delivery-id", "", "only records about this delivery (GitHub's X-GitHub-Delivery)")
	limit := fs.Int("limit", 200, "without --follow: print at most the newest N matching records")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	from, err := eventlog.ParseSince(*since, time.Now())
	if err != nil {
		return fmt.Errorf("%w: events --%v", errUsage, err)
	}
	q := eventlog.Query{WorkItem: *workItem, Type: *typ, DeliveryID: *delivery, Since: from}
	print := func(r bus.LogRecord) error {
		var rec eventlog.Record
		if err := json.Unmarshal(r.Data, &rec); err != nil {
			_, err := fmt.Fprintf(stdout, "%s (unreadable record: %v)\n", r.Subject, err)
			return err
		}
		if !q.Match(rec) {
			return nil
		}
		if *jsonOut {
			_, err := fmt.Fprintf(stdout, "%s\n", r.Data)
			return err
		}
		_, err := fmt.Fprintln(stdout, eventlog.Format(rec))
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
		err = conn.TailLog(ctx, bus.TailOptions{Last: *last}, print)
		if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
			return fmt.Errorf("follow the event log: %w", err)
		}
		return nil
	}
	if *limit <= 0 {
		return fmt.Errorf("%w: events --limit is at least 1", errUsage)
	}
	if api, ok, err := readThroughAPI(env); err != nil {
		return err
	} else if ok {
		return apiEvents(ctx, api, stdout, *workItem, *typ, *since, *delivery, *limit, *jsonOut)
	}
	conn, err := cliConnect(ctx, env, "the-loop-events", read)
	if err != nil {
		return err
	}
	defer conn.Close()
	found, err := statuspage.NewestLog(ctx, conn, q, *limit)
	if err != nil {
		return fmt.Errorf("read the event log: %w", err)
	}
	for _, r := range found {
		if err := print(r); err != nil {
			return err
		}
	}
	return nil
}

// apiEvents prints the records the API's /events answers for the query.
func apiEvents(ctx context.Context, api apiClient, stdout io.Writer, workItem, typ, since, delivery string, limit int, asJSON bool) error {
	q := url.Values{"limit": {strconv.Itoa(min(limit, 1000))}}
	for k, v := range map[string]string{"workItem": workItem, "type": typ, "since": since, "deliveryId": delivery} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var list struct{ Events []statuspage.EventRecord }
	if err := api.get(ctx, "/events?"+q.Encode(), &list); err != nil {
		return err
	}
	for _, e := range list.Events {
		if asJSON {
			b, err := json.Marshal(e.Record)
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(stdout, "%s\n", b); err != nil {
				return err
			}
			continue
		}
		if _, err := fmt.Fprintln(stdout, eventlog.Format(e.Record)); err != nil {
			return err
		}
	}
	return nil
}
