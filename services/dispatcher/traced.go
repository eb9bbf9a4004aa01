package dispatcher

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/the-loop/bus/pkg/tracing"
)

// tracedTerminal marks the last hop of an event's trace: the prompt typed
// into its session, or the session spawned with it. Spans carry the
// session's target, never the prompt.
type tracedTerminal struct{ terminal }

func (t tracedTerminal) Deliver(ctx context.Context, target, prompt string) (err error) {
	ctx, span := tracing.Start(ctx, "session prompt", trace.SpanKindClient, attribute.String("loop.session.target", target),
		attribute.Int("loop.prompt.bytes", len(prompt)))
	defer func() { tracing.End(span, err) }()
	return t.terminal.Deliver(ctx, target, prompt)
}

func (t tracedTerminal) Spawn(ctx context.Context, target, cwd string, env map[string]string, argv []string) (err error) {
	ctx, span := tracing.Start(ctx, "session spawn", trace.SpanKindClient, attribute.String("loop.session.target", target))
	defer func() { tracing.End(span, err) }()
	return t.terminal.Spawn(ctx, target, cwd, env, argv)
}
