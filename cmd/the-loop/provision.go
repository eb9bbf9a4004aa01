package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// cmdProvision is `the-loop provision`: it creates or updates every stream,
// consumer and bucket of the topology the settings ask for (LOOP_PARTITIONS,
// LOOP_STREAM_REPLICAS) as the operator identity, and exits. Services never
// provision; they wait for it (docs/decisions/098-provisioning-is-the-operators.md).
// Changing the partition count is refused here while a replica runs with the
// old count or a consumer has something pending.
func cmdProvision(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("provision", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: provision takes no arguments", errUsage)
	}
	s, err := loadSettings(env)
	if err != nil {
		return err
	}
	log := newLogger(stderr, s.Common.LogLevel, s.Common.LogFormat)
	conn, err := cliConnect(ctx, env, "provision", write)
	if err != nil {
		return err
	}
	defer conn.Close()
	// A credential the server refuses (not the operator's) ends it at once
	// with the reason, rather than after the provisioning timeout.
	rctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	go func() {
		if err := conn.Refused(rctx); err != nil {
			refused(err)
		}
	}()
	topo := topologyOf(s)
	if s.Common.SignersFile != "" {
		// The identities' public keys `the-loop auth init` wrote: the
		// services check every event's signature against them
		// (docs/decisions/099-signed-events.md).
		if topo.Signers, err = bus.ReadSignersFile(s.Common.SignersFile); err != nil {
			return fmt.Errorf("LOOP_SIGNERS_FILE: %w", err)
		}
	}
	err = provision(rctx, log, conn, topo)
	var ae *bus.AuthError
	if cause := context.Cause(rctx); errors.As(cause, &ae) {
		return cause
	}
	if err != nil {
		return fmt.Errorf("provision streams and consumers: %w", err)
	}
	fmt.Fprintf(stdout, "the-loop provision: streams, consumers and buckets in place (%d partitions, %d replicas)\n", topo.Partitions, topo.Replicas)
	if len(topo.Signers) > 0 {
		fmt.Fprintf(stdout, "the-loop provision: the signers of %d identities written\n", len(topo.Signers))
	} else {
		fmt.Fprintln(stdout, "the-loop provision: signers left as they are (LOOP_SIGNERS_FILE is not set)")
	}
	return nil
}

// provisionAttempt bounds one attempt at provisioning.
const provisionAttempt = 20 * time.Second

// provision provisions topo within 30 seconds a replica: each replica of a
// replicated topology is a raft group per stream and consumer, formed
// through the meta leader.
// On a cluster a JetStream API request sent while a leader is being elected
// can go unanswered and would hold the call to its deadline, so an attempt
// that runs out of time is made again: provisioning is idempotent, and what
// the last attempt created is found.
func provision(ctx context.Context, log *slog.Logger, c *bus.Conn, topo bus.Topology) error {
	deadline := time.Now().Add(time.Duration(max(1, topo.Replicas)) * 30 * time.Second)
	for attempt := 1; ; attempt++ {
		end := time.Now().Add(provisionAttempt)
		if end.After(deadline) {
			end = deadline
		}
		actx, cancel := context.WithDeadline(ctx, end)
		err := c.Provision(actx, topo)
		cancel()
		if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) || !time.Now().Before(deadline) {
			return err
		}
		log.Warn("provisioning streams and consumers again", "attempt", attempt, "err", err)
	}
}
