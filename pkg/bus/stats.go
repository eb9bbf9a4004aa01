package bus

import (
	"context"
	"fmt"
)

// StreamStats is a stream's state, for status output, metrics (DLQ depth)
// and tests.
type StreamStats struct {
	Msgs, Bytes       uint64
	FirstSeq, LastSeq uint64
	Consumers         int
}

// StreamStats returns the current state of stream name.
func (c *Conn) StreamStats(ctx context.Context, name string) (StreamStats, error) {
	s, err := c.js.Stream(ctx, name)
	if err != nil {
		return StreamStats{}, fmt.Errorf("bus: stream %s: %w", name, err)
	}
	st := s.CachedInfo().State
	return StreamStats{
		Msgs: st.Msgs, Bytes: st.Bytes,
		FirstSeq: st.FirstSeq, LastSeq: st.LastSeq,
		Consumers: st.Consumers,
	}, nil
}
