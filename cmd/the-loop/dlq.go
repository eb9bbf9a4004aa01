package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/the-loop/bus/internal/statuspage"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/eventlog"
)

// connectWait bounds how long an operator verb waits for NATS.
const connectWait = 5 * time.Second

// cliSource is the source of the event-log records an operator verb writes.
const cliSource = "cli"

// cliEvents is the event log of an operator verb: its records go to
// loop.log.cli.<type> and are stored before the verb exits (a JetStream
// publish, where the services' fire and forget), so a short-lived command
// never loses the record of what it changed. Of its slog side only a record
// that could not be stored shows, on stderr: the verb's output is its own.
func cliEvents(conn *bus.Conn, stderr io.Writer) *eventlog.Logger {
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return eventlog.New(cliSource, log, storedLog{conn})
}

// storedLog publishes event-log records to the LOOP_LOG stream and waits
// for the PubAck, under a msg id of the record's own bytes (a retried
// publish is stored once).
type storedLog struct{ conn *bus.Conn }

func (p storedLog) PublishLog(ctx context.Context, subject string, data []byte) error {
	sum := sha256.Sum256(data)
	_, err := p.conn.Publish(ctx, bus.Message{Subject: subject, Data: data, MsgID: "log:" + hex.EncodeToString(sum[:16])})
	return err
}

// cmdDLQ lists dead-lettered events or replays one under a new id.
func cmdDLQ(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: dlq list|replay", errUsage)
	}
	switch args[0] {
	case "list":
		fs := newFlags("dlq list", stderr)
		limit := fs.Int("limit", 100, "show at most N entries")
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		var entries []statuspage.DeadLetter
		if api, ok, err := readThroughAPI(env); err != nil {
			return err
		} else if ok {
			var list struct{ DeadLetters []statuspage.DeadLetter }
			if err := api.get(ctx, "/dead-letters", &list); err != nil {
				return err
			}
			entries = list.DeadLetters[:min(len(list.DeadLetters), *limit)]
		} else {
			conn, err := cliConnect(ctx, env, "the-loop-dlq", read)
			if err != nil {
				return err
			}
			defer conn.Close()
			dl, err := conn.ListDLQ(ctx, *limit)
			if err != nil {
				return fmt.Errorf("list DLQ: %w", err)
			}
			for _, e := range dl {
				entries = append(entries, statuspage.DeadLetter{Seq: e.Seq, EventID: e.CEID, Subject: e.PublishSubject, Consumer: e.Consumer,
					Reason: e.Reason, Deliveries: e.Deliveries, Time: e.Time})
			}
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SEQ\tTIME\tEVENT ID\tSUBJECT\tDELIVERIES\tREASON")
		for _, e := range entries {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%d\t%s\n", e.Seq, e.Time.UTC().Format(time.RFC3339), e.EventID, e.Subject, e.Deliveries, e.Reason)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%d dead-lettered event(s)\n", len(entries))
		return nil
	case "replay":
		fs := newFlags("dlq replay", stderr)
		if err := parseFlags(fs, args[1:]); err != nil {
			return err
		}
		if fs.NArg() != 1 {
			return fmt.Errorf("%w: dlq replay <seq>", errUsage)
		}
		seq, err := strconv.ParseUint(fs.Arg(0), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: dlq replay: %q is not a sequence number", errUsage, fs.Arg(0))
		}
		conn, err := cliConnect(ctx, env, "the-loop-dlq", write)
		if err != nil {
			return err
		}
		defer conn.Close()
		res, err := conn.ReplayDLQ(ctx, seq)
		if err != nil {
			return fmt.Errorf("replay DLQ entry %d: %w", seq, err)
		}
		fmt.Fprintf(stdout, "replayed DLQ entry %d to %s as %s\n", seq, res.Subject, res.MsgID)
		cliEvents(conn, stderr).Emit(ctx, "bus.replayed", slog.Uint64("dlq_seq", seq), slog.String("event_id", res.MsgID),
			slog.String("replay_of", res.Original), slog.String("subject", res.Subject), slog.Uint64("stream_seq", res.PubAck.Seq))
		return nil
	}
	return fmt.Errorf("%w: dlq list|replay", errUsage)
}
