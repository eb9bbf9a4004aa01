package ingressslack

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log"
	"time"

	"github.com/slack-go/slack/socketmode"
)

// runSocket reads Socket Mode until ctx ends. slack-go's client opens the
// connection (apps.connections.open with the app token), answers Slack's
// pings, and reconnects on a disconnect frame, a dropped socket or a ping
// timeout; it gives up only on a refused token, which ends this reader (the
// supervisor restarts it with back-off, and /readyz says why).
//
// Envelopes are handled one at a time, in arrival order, so two replies in
// one thread reach the inbox in the order Slack sent them. Each is acked once
// its message is settled; settling is bounded by ProcessTimeout (2 s), so an
// ack leaves within Slack's 3 s unless the bus is failing, in which case the
// envelope is deliberately left unacked and Slack redelivers it
// (retry_attempt), which publishes once by its event id.
func (s *Service) runSocket(ctx context.Context) error {
	api := s.api()
	s.learnOwnID(ctx, api)
	client := socketmode.New(api,
		// slack-go logs through the standard logger; nothing of it is
		// needed, and its debug output would carry message content.
		socketmode.OptionLog(log.New(io.Discard, "", 0)),
		socketmode.OptionPingInterval(s.opts.PingInterval),
	)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	runErr := make(chan error, 1)
	go func() { runErr <- client.RunContext(cctx) }()
	s.setStatus("socket mode: connecting to Slack")
	for {
		select {
		case <-ctx.Done():
			cancel()
			select {
			case <-runErr:
			case <-time.After(5 * time.Second):
			}
			return nil
		case err := <-runErr:
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				err = errors.New("socket mode client stopped")
			}
			return err
		case evt := <-client.Events:
			s.socketEvent(cctx, client, evt)
		}
	}
}

func (s *Service) socketEvent(ctx context.Context, client *socketmode.Client, evt socketmode.Event) {
	switch evt.Type {
	case socketmode.EventTypeConnecting:
		s.setStatus("socket mode: connecting to Slack")
	case socketmode.EventTypeConnected, socketmode.EventTypeHello:
		s.setStatus("")
	case socketmode.EventTypeConnectionError, socketmode.EventTypeInvalidAuth:
		s.setStatus("socket mode: cannot connect to Slack (retrying)")
		s.deps.Log.Warn("ingress-slack: socket mode connection failed; retrying", "type", string(evt.Type))
	case socketmode.EventTypeEventsAPI:
		if evt.Request != nil {
			s.envelope(ctx, client, evt.Request, func(b []byte) (*inbound, error) {
				in, _, err := decodeEvents(b, viaSocket)
				return in, err
			})
		}
	case socketmode.EventTypeInteractive:
		if evt.Request != nil {
			s.envelope(ctx, client, evt.Request, func(b []byte) (*inbound, error) { return decodeInteraction(b, viaSocket) })
		}
	case socketmode.EventTypeSlashCommand:
		// The-loop registers no slash command: acknowledged, ignored.
		if evt.Request != nil {
			s.envelope(ctx, client, evt.Request, func([]byte) (*inbound, error) {
				return &inbound{via: viaSocket, ignore: "slash-command"}, nil
			})
		}
	case socketmode.EventTypeErrorBadMessage:
		// slack-go could not parse the envelope (an event type it does not
		// know, say), so it never reaches a handler; acknowledge it from
		// the raw frame, or Slack would redeliver it forever.
		if bad, ok := evt.Data.(*socketmode.ErrorBadMessage); ok {
			var req socketmode.Request
			if json.Unmarshal(bad.Message, &req) == nil && req.EnvelopeID != "" {
				s.envelope(ctx, client, &req, func([]byte) (*inbound, error) {
					return &inbound{via: viaSocket, ignore: "unparsed-envelope:" + safeLabel(req.Type)}, nil
				})
			}
		}
	}
}

// envelope settles one envelope and acks it; see runSocket.
func (s *Service) envelope(ctx context.Context, client *socketmode.Client, req *socketmode.Request, decode func([]byte) (*inbound, error)) {
	in, err := decode(req.Payload)
	if err != nil {
		// Malformed can never become well-formed: ack, and say so.
		s.deps.Log.Warn("ingress-slack: malformed socket mode payload acknowledged and dropped", "type", safeLabel(req.Type), "err", err)
		s.ack(ctx, client, req)
		return
	}
	pctx, cancel := context.WithTimeout(ctx, s.opts.ProcessTimeout)
	defer cancel()
	if _, err := s.process(pctx, in); err != nil {
		s.m.retried.WithLabelValues(viaSocket).Inc()
		s.deps.Log.Warn("ingress-slack: envelope not settled; left unacknowledged for Slack to redeliver",
			"event_id", in.id, "retry_attempt", req.RetryAttempt, "err", err)
		return
	}
	s.ack(ctx, client, req)
	s.markRead(pctx, in)
}

func (s *Service) ack(ctx context.Context, client *socketmode.Client, req *socketmode.Request) {
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := client.AckCtx(actx, req.EnvelopeID, nil); err != nil {
		s.deps.Log.Warn("ingress-slack: socket mode ack not sent", "err", err)
		return
	}
	s.m.acks.Inc()
}
