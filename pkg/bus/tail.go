package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/pkg/catalog"
)

// LogRecord is one event-log message.
type LogRecord struct {
	Seq     uint64
	Subject string
	Time    time.Time
	Header  Header
	Data    []byte
}

// TailOptions selects what TailLog shows.
type TailOptions struct {
	// Subject filters the log (default "loop.log.>").
	Subject string
	// Last starts with the last Last matching records; 0 shows only records
	// published from now on.
	Last int
	// After starts with the first record after stream sequence After (a
	// reader resuming where it left off); it wins over Last.
	After uint64
}

// TailLog calls fn for every event-log record matching opts, in order, until
// ctx ends (then it returns nil) or fn returns an error (returned). It reads
// through an ordered ephemeral consumer, which leaves nothing behind and
// recreates itself across reconnects.
func (c *Conn) TailLog(ctx context.Context, opts TailOptions, fn func(LogRecord) error) error {
	all := catalog.LogPrefix + ".>"
	if opts.Subject == "" {
		opts.Subject = all
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{opts.Subject},
		DeliverPolicy:  jetstream.DeliverNewPolicy,
	}
	skipWhilePending := uint64(0)
	if opts.After > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, opts.After+1
	} else if opts.Last > 0 {
		s, err := c.js.Stream(ctx, StreamLog)
		if err != nil {
			return fmt.Errorf("bus: tail: %w", err)
		}
		st := s.CachedInfo().State
		switch {
		case st.Msgs == 0:
			// Nothing stored: "new" is the same.
		case opts.Subject == all:
			// Every record matches: start N before the end.
			cfg.DeliverPolicy = jetstream.DeliverByStartSequencePolicy
			cfg.OptStartSeq = max(st.FirstSeq, st.LastSeq-min(st.LastSeq, uint64(opts.Last))+1)
		default:
			// Positions of matching records are unknown: read them all and
			// skip until at most Last remain.
			cfg.DeliverPolicy = jetstream.DeliverAllPolicy
			skipWhilePending = uint64(opts.Last)
		}
	}
	cons, err := c.js.OrderedConsumer(ctx, StreamLog, cfg)
	if err != nil {
		return fmt.Errorf("bus: tail: %w", err)
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("bus: tail: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				return nil
			}
			return fmt.Errorf("bus: tail: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("bus: tail: %w", err)
		}
		if skipWhilePending > 0 {
			if meta.NumPending >= skipWhilePending {
				continue
			}
			skipWhilePending = 0
		}
		rec := LogRecord{
			Seq:     meta.Sequence.Stream,
			Subject: m.Subject(),
			Time:    meta.Timestamp,
			Header:  fromNatsHeader(m.Headers()),
			Data:    m.Data(),
		}
		if err := fn(rec); err != nil {
			return err
		}
	}
}

// ReadOptions selects the stored records ReadLog reads.
type ReadOptions struct {
	// Subjects filter the log (default "loop.log.>").
	Subjects []string
	// Since starts with the first record stored at or after it; zero:
	// the stream's first record.
	Since time.Time
}

// ErrStopRead, returned by ReadLog's fn, ends the read early without an
// error.
var ErrStopRead = errors.New("bus: stop reading")

// ReadLog calls fn for every stored event-log record matching opts, in
// order, and returns once it has read the last one stored when it started
// (or fn returns ErrStopRead; any other error of fn is returned). Like
// TailLog it reads through an ordered ephemeral consumer, which leaves
// nothing behind.
func (c *Conn) ReadLog(ctx context.Context, opts ReadOptions, fn func(LogRecord) error) error {
	if len(opts.Subjects) == 0 {
		opts.Subjects = []string{catalog.LogPrefix + ".>"}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: opts.Subjects, DeliverPolicy: jetstream.DeliverAllPolicy}
	if !opts.Since.IsZero() {
		since := opts.Since
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	cons, err := c.js.OrderedConsumer(ctx, StreamLog, cfg)
	if err != nil {
		return fmt.Errorf("bus: read the log: %w", err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		return fmt.Errorf("bus: read the log: %w", err)
	}
	if info.NumPending == 0 {
		return nil
	}
	it, err := cons.Messages()
	if err != nil {
		return fmt.Errorf("bus: read the log: %w", err)
	}
	stop := context.AfterFunc(ctx, it.Stop)
	defer stop()
	defer it.Stop()
	for {
		m, err := it.Next()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("bus: read the log: %w", err)
		}
		meta, err := m.Metadata()
		if err != nil {
			return fmt.Errorf("bus: read the log: %w", err)
		}
		err = fn(LogRecord{Seq: meta.Sequence.Stream, Subject: m.Subject(), Time: meta.Timestamp, Header: fromNatsHeader(m.Headers()), Data: m.Data()})
		switch {
		case errors.Is(err, ErrStopRead):
			return nil
		case err != nil:
			return err
		case meta.NumPending == 0:
			return nil
		}
	}
}
