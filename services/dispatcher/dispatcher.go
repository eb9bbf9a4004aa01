// Package dispatcher is the dispatcher service, "the loop": it consumes the
// recorded events (loop.ev.>) meant for the loop and turns them into work for
// agent sessions; its own events go back to the inbox.
//
// This is the skeleton: it consumes its partitions and logs what it would
// dispatch. Dispatching lands with issue 7.
package dispatcher

import (
	"context"
	"log/slog"

	"github.com/the-loop/bus/pkg/bus"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/runtime"
)

// Name is the service name used for consumers, logs and `serve`.
const Name = bus.ServiceDispatcher

// Service is the dispatcher.
type Service struct{ deps runtime.Deps }

// New returns the service.
func New(deps runtime.Deps) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	return &Service{deps: deps}, nil
}

// Run consumes the event stream until ctx is done, then drains.
func (s *Service) Run(ctx context.Context) error {
	return runtime.Consume(ctx, s.deps, Name, bus.StreamEvents, func(ctx context.Context, ev *loopv1.Event, d *bus.Delivery) error {
		s.deps.Log.LogAttrs(ctx, slog.LevelInfo, "dispatcher would dispatch", runtime.EventAttrs(ev, d)...)
		return nil
	})
}
