// Package slackrenderer is the slack-renderer service: it consumes the
// recorded events (loop.ev.>) a Slack channel subscribes to and renders each
// natively in Slack, once (seed 001 R4).
//
// This is the skeleton: it consumes its partitions and logs what it would
// render. Rendering lands with issue 6.
package slackrenderer

import (
	"context"
	"log/slog"

	"github.com/the-loop/bus/pkg/bus"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
	"github.com/the-loop/bus/services/runtime"
)

// Name is the service name used for consumers, logs and `serve`.
const Name = bus.ServiceSlackRenderer

// Service is the slack-renderer.
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
		s.deps.Log.LogAttrs(ctx, slog.LevelInfo, "slack-renderer would render", runtime.EventAttrs(ev, d)...)
		return nil
	})
}
