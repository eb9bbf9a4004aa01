// Package service holds what every service is given by the process that runs
// it (`the-loop serve <service>` or `the-loop up`): its bus connection, logger,
// event log, metrics registry and readiness checks, plus what every service's
// New and Run share: options applied in one way, and the partitioned consumer
// loop of the consuming services.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
	"github.com/the-loop/bus/pkg/envelope"
	"github.com/the-loop/bus/pkg/eventlog"
	"github.com/the-loop/bus/pkg/httpserver"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// Deps is what every service needs from its host process. What only one
// service reads — its tokens, addresses, pacing — is in that service's own
// Config, handed to its New beside Deps (docs/decisions/089-each-service-owns-its-settings.md).
type Deps struct {
	Conn       *bus.Conn
	Log        *slog.Logger
	Events     *eventlog.Logger
	Registry   prometheus.Registerer
	Ready      *httpserver.Readiness
	Partitions int
	// Concurrency bounds the events this replica handles at once
	// (LOOP_CONCURRENCY; 0: one per partition it owns).
	Concurrency int
	// Replica names this replica among its service's replicas (default the
	// host name; the dispatcher uses its session host).
	Replica string
	// Metrics is the bus metrics shared by the process's runners.
	Metrics *bus.Metrics
	// Config returns the operator config in force; it changes when the file
	// is edited (reload without restart), so read it per use, never keep it.
	Config func() *config.Config
	// Checks, when set, is the watcher behind Config: a service adds the
	// rules only it knows there (see GuardConfig). Nil: the config never
	// reloads.
	Checks ConfigChecks
}

// ConfigChecks takes rules every reloaded operator config must pass
// (*config.Watcher).
type ConfigChecks interface {
	AddCheck(config.Check) error
}

// GuardConfig makes check a rule of the service's operator config: the config
// in force now fails it with the error returned (refuse to start), and a
// reload that fails it is refused, keeping the previous config.
func (d Deps) GuardConfig(check config.Check) error {
	if d.Checks != nil {
		return d.Checks.AddCheck(check)
	}
	return check(d.Config())
}

// Validate reports a missing dependency.
func (d Deps) Validate() error {
	if d.Conn == nil || d.Log == nil || d.Events == nil || d.Ready == nil || d.Config == nil {
		return errors.New("service deps: connection, logger, event log, readiness and config are required")
	}
	return nil
}

// Apply returns base adjusted by each option in turn: how every service's New
// turns its defaults and its caller's options into the options it runs with.
func Apply[O any, F ~func(*O)](base O, opts []F) O {
	for _, o := range opts {
		o(&base)
	}
	return base
}

// EventHandler handles one decoded event.
type EventHandler func(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) error

// Consume runs this replica's share of service's partitioned consumers on
// stream (the replicas divide the partitions between them) and hands each
// decoded event to h. A message that is not a valid event can never become
// one, so it goes to the DLQ at once (bus.Permanent).
//
// On a bus with identities (deps.Conn.Signing) every message must first carry
// a valid signature by a publisher that may raise it on stream
// (bus.PolicyFor; docs/decisions/099-signed-events.md): anything else is
// logged as bus.forged_event and dead-lettered, never handed to h.
func Consume(ctx context.Context, deps Deps, service, stream string, h EventHandler) error {
	verify, err := verifier(ctx, deps, service, stream)
	if err != nil {
		return err
	}
	runner, err := deps.Conn.NewRunner(bus.ConsumerSpec{
		Service:     service,
		Stream:      stream,
		Partitions:  deps.Partitions,
		Concurrency: deps.Concurrency,
		Member:      deps.Replica,
		Logger:      deps.Log,
		Metrics:     deps.Metrics,
		DeadLettered: func(ctx context.Context, dl bus.DeadLetter) {
			deps.Events.Emit(ctx, "bus.dead_lettered", DeadLetterAttrs(dl)...)
		},
	}, bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		if err := verify(ctx, d); err != nil {
			return err
		}
		ev, err := envelope.FromMessage(envelope.Message{Subject: d.Subject, Header: d.Header, Data: d.Data})
		if err != nil {
			return bus.Permanent(fmt.Errorf("decode %s: %w", d.Subject, err))
		}
		return h(ctx, ev, d)
	}))
	if err != nil {
		return fmt.Errorf("%s: consumer runner: %w", service, err)
	}
	deps.Ready.Add(service, func() error {
		if !runner.Ready() {
			return errors.New("consumers not running")
		}
		return nil
	})
	if err := runner.Run(ctx); err != nil {
		return fmt.Errorf("%s: %w", service, err)
	}
	return nil
}

// verifier returns the signature check of service's deliveries on stream:
// none on a bus without identities; otherwise it waits for the signers the
// operator provisioned, and refuses a delivery whose signature does not
// hold with bus.Permanent (the DLQ, at once: no redelivery can sign it).
func verifier(ctx context.Context, deps Deps, service, stream string) (func(context.Context, *bus.Delivery) error, error) {
	if !deps.Conn.Signing() {
		return func(context.Context, *bus.Delivery) error { return nil }, nil
	}
	may, err := bus.PolicyFor(stream)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", service, err)
	}
	// Not ready while it waits: /readyz says what for.
	var loaded atomic.Bool
	deps.Ready.Add(service+"/signers", func() error {
		if !loaded.Load() {
			return errors.New("waiting for the signers bucket, which the operator's provisioning writes (the-loop auth signers)")
		}
		return nil
	})
	signers, err := deps.Conn.SharedSigners(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", service, err)
	}
	loaded.Store(true)
	return func(ctx context.Context, d *bus.Delivery) error {
		signer, err := deps.Conn.CheckDelivery(signers, d, may)
		if err == nil {
			return nil
		}
		reason := "unsigned"
		var fe *bus.ForgedError
		if errors.As(err, &fe) {
			reason = fe.Reason
		}
		deps.Events.Emit(ctx, "bus.forged_event",
			slog.String("event_id", d.Header.Get(envelope.HeaderID)),
			slog.String("event_type", string(d.Type)),
			slog.String("work_item", d.Header.Get("ce-subject")),
			slog.String("signer", signer),
			slog.String("consumer", service),
			slog.Int("partition", d.Partition),
			slog.Uint64("stream_seq", d.StreamSeq),
			slog.String("reason", reason),
			slog.String("detail", err.Error()))
		return bus.Permanent(err)
	}, nil
}

// EventAttrs are the log attributes of an event: ids and types only (R8.2).
func EventAttrs(ev *loopv1.Event, d *bus.Delivery) []slog.Attr {
	return []slog.Attr{
		slog.String("event_id", ev.GetId()),
		slog.String("event_type", ev.GetType()),
		slog.String("work_item", ev.GetSubject()),
		slog.String("origin", ev.GetSource()),
		slog.Int("partition", d.Partition),
		slog.Uint64("delivery", d.NumDelivered),
	}
}

// DeadLetterAttrs are the event-log attributes of a dead letter: where it
// was and why it went, by kind (the reason text, which may quote a remote
// error, stays in LOOP_DLQ where `the-loop dlq list` shows it).
func DeadLetterAttrs(dl bus.DeadLetter) []slog.Attr {
	d := dl.Delivery
	why := "max-deliveries"
	if dl.Permanent {
		why = "permanent"
	}
	return []slog.Attr{
		slog.String("event_id", d.MsgID),
		slog.String("event_type", string(d.Type)),
		slog.String("work_item", d.Header.Get("ce-subject")),
		slog.String("consumer", dl.Consumer),
		slog.Int("partition", d.Partition),
		slog.Uint64("stream_seq", d.StreamSeq),
		slog.Uint64("deliveries", d.NumDelivered),
		slog.String("reason", why),
	}
}

// WaitConnected marks the service ready once the bus is connected and then
// waits for ctx; it is the whole of an ingress skeleton.
func WaitConnected(ctx context.Context, deps Deps, service string) error {
	deps.Ready.Add(service, func() error {
		if !deps.Conn.Connected() {
			return errors.New("not connected to NATS")
		}
		return nil
	})
	<-ctx.Done()
	return nil
}
