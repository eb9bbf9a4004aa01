// Package ingressgithub is the ingress-github service: verified GitHub
// webhooks (POST /gh-webhook) and GitHub polling become catalog events on the
// inbox and the event stream.
//
// This is the skeleton: it connects and reports ready. Intake lands with
// issue 4.
package ingressgithub

import (
	"context"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/services/runtime"
)

// Name is the service name used for logs and `serve`.
const Name = "ingress-github"

// Service is ingress-github.
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
	s.deps.Log.InfoContext(ctx, "ingress-github skeleton: webhook intake is not built yet", "stream", bus.StreamInbox)
	return runtime.WaitConnected(ctx, s.deps, Name)
}
