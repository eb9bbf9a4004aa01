// Package ledgerwriter is the ledger-writer service: the sole consumer of the
// inbox (loop.in.>). It records every off-ledger event on GitHub, then fans it
// out on loop.ev.> — exactly once (DESIGN §7).
//
// This is the skeleton: it consumes its partitions and logs what it would
// record. Recording lands with issue 3.
package ledgerwriter

import (
	"context"
	"log/slog"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/runtime"
)

// Name is the service name used for consumers, logs and `serve`.
const Name = bus.ServiceLedgerWriter

// Service is the ledger-writer.
type Service struct{ deps runtime.Deps }

// New returns the service.
func New(deps runtime.Deps) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	return &Service{deps: deps}, nil
}

// Run consumes the inbox until ctx is done, then drains.
func (s *Service) Run(ctx context.Context) error {
	return runtime.Consume(ctx, s.deps, Name, bus.StreamInbox, s.handle)
}

func (s *Service) handle(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) error {
	e, known := catalog.Lookup(catalog.Type(ev.GetType()))
	attrs := append(runtime.EventAttrs(ev, d), slog.Bool("known_type", known), slog.String("record", e.Record.String()))
	s.deps.Log.LogAttrs(ctx, slog.LevelInfo, "ledger-writer would record, then fan out", attrs...)
	return nil
}
