package bus

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/the-loop/bus/pkg/catalog"
)

// ConsumerSpec says which partitioned consumers a Runner works and how.
type ConsumerSpec struct {
	// Service is the consuming service, e.g. ServiceLedgerWriter; its
	// consumers are ConsumerName(Service, p). Required.
	Service string
	// Stream is StreamInbox or StreamEvents. Required.
	Stream string
	// Partitions is N, as provisioned (default catalog.DefaultPartitions).
	Partitions int
	// Group is the priority group (default DefaultGroup).
	Group string
	// Member names this replica among its service's replicas (default the
	// host name: a pod's name on Kubernetes, a container's id under
	// compose). It need not be unique: the member id adds the process id
	// and a sequence.
	Member string
	// Concurrency bounds the handlers this replica runs at once, over all
	// the partitions it owns (0: one per owned partition). With the
	// partition count it decides how many replicas add throughput: the
	// service handles at most Partitions messages at once, one replica at
	// most Concurrency.
	Concurrency int
	// FetchWait bounds one pull request. It must stay well below the
	// consumer's PinnedTTL: the pin is kept alive by the pull requests of
	// its replica. Default min(PinnedTTL/3, 5s). It also bounds how long a
	// shutdown waits for an idle fetch to end.
	FetchWait time.Duration
	// KeepAlive is the InProgress interval while a handler works (default
	// AckWait/3).
	KeepAlive time.Duration
	// DrainTimeout bounds how long an in-flight handler may keep running
	// after Run's ctx ends; then its ctx is cancelled (default 30s).
	DrainTimeout time.Duration
	// RetryBase and RetryMax shape the redelivery delay of a failed
	// delivery without a Retry delay: Backoff(n, RetryBase, RetryMax), a
	// random wait of at most RetryBase·2^(n-1) and RetryMax (defaults 1s
	// and 1m).
	RetryBase, RetryMax time.Duration
	// Logger (nil discards) and Metrics (nil records nothing).
	Logger  *slog.Logger
	Metrics *Metrics
	// DeadLettered, when set, is told of every message copied to the DLQ
	// (after the copy is stored), so the service can record it in its
	// event log.
	DeadLettered func(ctx context.Context, dl DeadLetter)
}

func (s *ConsumerSpec) setDefaults() error {
	if s.Service == "" {
		return errors.New("bus: ConsumerSpec.Service is required")
	}
	if _, err := streamPrefix(s.Stream); err != nil {
		return err
	}
	if s.Partitions <= 0 {
		s.Partitions = catalog.DefaultPartitions
	}
	if s.Group == "" {
		s.Group = DefaultGroup
	}
	if s.Member == "" {
		s.Member, _ = os.Hostname()
	}
	if s.Concurrency < 0 {
		return errors.New("bus: ConsumerSpec.Concurrency must not be negative")
	}
	if s.DrainTimeout <= 0 {
		s.DrainTimeout = 30 * time.Second
	}
	if s.RetryBase <= 0 {
		s.RetryBase = time.Second
	}
	if s.RetryMax <= 0 {
		s.RetryMax = time.Minute
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return nil
}
