// Package httpserver runs an HTTP server under a context with a bounded
// shutdown, and builds the admin mux every service exposes: /healthz (the
// process is alive; never depends on NATS, so a NATS outage is not a restart
// storm), /readyz (connected and consuming) and /metrics (Prometheus, the
// service's own registry).
package httpserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"syscall"
	"time"
)

// ShutdownTimeout bounds how long Serve waits for in-flight requests once ctx
// is done. Ingress handlers answer only after a PubAck, which takes
// milliseconds; ten seconds leaves room for a slow one.
const ShutdownTimeout = 10 * time.Second

// Listen opens addr. It is separate from Serve so a caller can learn the
// bound address (port 0) before serving, and fail fast on a busy port.
// setting names the variable addr came from, so that a busy port names what
// to change.
func Listen(setting, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return nil, fmt.Errorf("%s=%s: the address is in use by another process; stop it or set %s to another address: %w",
			setting, addr, setting, syscall.EADDRINUSE)
	case err != nil:
		return nil, fmt.Errorf("%s=%s: %w", setting, addr, err)
	}
	return ln, nil
}

type closingKey struct{}

// Closing returns a channel closed when the server that serves the request
// of ctx shuts down: a long-lived answer (a server-sent event stream) ends
// on it, as Shutdown does not cancel requests in flight. Nil (never
// closed) outside Serve.
func Closing(ctx context.Context) <-chan struct{} {
	c, _ := ctx.Value(closingKey{}).(<-chan struct{})
	return c
}

// Serve serves h on ln until ctx is done, then shuts down gracefully within
// ShutdownTimeout. It returns nil after a clean shutdown.
func Serve(ctx context.Context, ln net.Listener, h http.Handler, log *slog.Logger) error {
	closing := make(chan struct{})
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context {
			return context.WithValue(context.WithoutCancel(ctx), closingKey{}, (<-chan struct{})(closing))
		},
	}
	srv.RegisterOnShutdown(func() { close(closing) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ShutdownTimeout)
	defer cancel()
	var errs []error
	if err := srv.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown %s: %w", ln.Addr(), err))
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve %s: %w", ln.Addr(), err))
	}
	return errors.Join(errs...)
}
