package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// ErrNotProvisioned: a stream, bucket or consumer of the topology does not
// exist yet. Services do not provision (the operator does:
// docs/decisions/098-provisioning-is-the-operators.md), so a service that
// starts first waits for it.
var ErrNotProvisioned = errors.New("bus: topology not provisioned")

// ErrPartitionMismatch: a partitioned stream was provisioned with another
// partition count than the process runs with.
var ErrPartitionMismatch = errors.New("bus: partition count differs")

// CheckTopology reports whether t is in place for a process that runs the
// consumer groups groups: every stream, bucket and object store of t
// exists, each group's consumers of partitions 0..N-1 exist, and the
// partitioned streams have t's partition count. It uses metadata reads only,
// which every identity has. The error wraps ErrPartitionMismatch or
// ErrNotProvisioned and says what differs or is missing.
func (c *Conn) CheckTopology(ctx context.Context, t Topology, groups []ConsumerGroup) error {
	t.setDefaults()
	var missing, mismatch []string
	streams := streamNames(t)
	for _, name := range streams {
		s, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			missing = append(missing, "stream "+name)
			continue
		}
		if err != nil {
			return fmt.Errorf("bus: stream %s: %w", name, err)
		}
		if name != StreamInbox && name != StreamEvents {
			continue
		}
		if n := transformPartitions(s.CachedInfo().Config.SubjectTransform); n != t.Partitions {
			mismatch = append(mismatch, fmt.Sprintf("%s has %d partitions", name, n))
		}
	}
	if len(mismatch) > 0 {
		return fmt.Errorf("%w: %s, this process runs with %d (LOOP_PARTITIONS)", ErrPartitionMismatch, strings.Join(mismatch, ", "), t.Partitions)
	}
	for _, g := range groups {
		for p := range t.Partitions {
			name := ConsumerName(g.Service, p)
			_, err := c.js.Consumer(ctx, g.Stream, name)
			if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
				missing = append(missing, "consumer "+g.Stream+"/"+name)
				continue
			}
			if err != nil {
				return fmt.Errorf("bus: consumer %s/%s: %w", g.Stream, name, err)
			}
		}
	}
	if len(missing) > 0 {
		shown := missing
		if len(shown) > 4 {
			shown = append(shown[:4:4], fmt.Sprintf("%d more", len(missing)-4))
		}
		return fmt.Errorf("%w: missing %s", ErrNotProvisioned, strings.Join(shown, ", "))
	}
	return nil
}
