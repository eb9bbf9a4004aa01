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
	if opts.Last > 0 {
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
