// Package ingressslack is the ingress-slack service: Slack messages and
// button presses (Socket Mode, Events API, or polling) become granted,
// authorized catalog events on the inbox.
//
// This is the skeleton: it connects and reports ready. Intake lands with
// issue 5.
package ingressslack

import (
	"context"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/services/runtime"
)

// Name is the service name used for logs and `serve`.
const Name = "ingress-slack"

// Service is ingress-slack.
type Service struct{ deps runtime.Deps }

// New returns the service.
func New(deps runtime.Deps) (*Service, error) {
	if err := deps.Validate(); err != nil {
		return nil, err
	}
	return &Service{deps: deps}, nil
}

// Run waits for ctx.
func (s *Service) Run(ctx context.Context) error {
	s.deps.Log.InfoContext(ctx, "ingress-slack skeleton: Slack intake is not built yet", "stream", bus.StreamInbox)
	return runtime.WaitConnected(ctx, s.deps, Name)
}
