package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Request/reply endpoints. A service answers requests on plain NATS subjects
// through the NATS services framework (nats.go/micro): every replica joins
// one queue group per endpoint, so exactly one of them answers each request,
// and the framework's $SRV.PING|INFO|STATS subjects let `nats micro ls` find
// it. Requests are not events: they travel outside the streams, so a request
// subject must never be one a stream captures (catalog.ServicePrefix is kept
// apart from the stream prefixes for that reason).

// Error codes of a service's answer, after HTTP's, as the micro framework
// suggests.
const (
	CodeBadRequest  = "400"
	CodeNotFound    = "404"
	CodeConflict    = "409"
	CodeInternal    = "500"
	CodeUnavailable = "503"
)

// ServiceError is an error answer: the handler's refusal, carried back to
// the requester in the framework's error headers.
type ServiceError struct {
	Code        string
	Description string
	// Err is the error answered, when there is one (FailWith): what a
	// caller in the same process may test with errors.Is.
	Err error
}

func (e *ServiceError) Error() string { return e.Description + " (" + e.Code + ")" }

func (e *ServiceError) Unwrap() error { return e.Err }

// FailWith is Fail answering err's text, keeping err for errors.Is.
func FailWith(code string, err error) error {
	return &ServiceError{Code: code, Description: err.Error(), Err: err}
}

// Fail is the error a RequestHandler returns to answer with code and description.
// Any other error is answered as CodeInternal with the error's text, so a
// handler's errors must never carry a secret (SECURITY.md).
func Fail(code, format string, args ...any) error {
	return &ServiceError{Code: code, Description: fmt.Sprintf(format, args...)}
}

// ErrNoResponders: nothing subscribes to the request's subject — the
// service that answers it is not running.
var ErrNoResponders = errors.New("bus: no service answers on this subject")

// ErrRequestTimeout: a service subscribes but did not answer in time.
var ErrRequestTimeout = errors.New("bus: request timed out")

// RequestHandler answers one request: the response body, or an error (see Fail).
// ctx ends after the endpoint's timeout; it is not cancelled when the
// service stops, so a request in hand is finished rather than cut halfway.
type RequestHandler func(ctx context.Context, data []byte) ([]byte, error)

// Endpoint is one request/reply endpoint of a service.
type Endpoint struct {
	// Name identifies the endpoint in the framework's info and stats
	// (letters, digits, '-' and '_').
	Name string
	// Subject is the subject it answers on.
	Subject string
	// Handler answers.
	Handler RequestHandler
}

// ServiceSpec describes a service's endpoints.
type ServiceSpec struct {
	// Name is the service's name (letters, digits, '-' and '_'); it is also
	// the queue group of its endpoints.
	Name string
	// Version is the SemVer of the endpoints' contract.
	Version     string
	Description string
	Endpoints   []Endpoint
	// Timeout bounds one request's handling (default 30s).
	Timeout time.Duration
	// Logger receives answers that could not be sent and subscription
	// errors; nil: the connection's logger.
	Logger *slog.Logger
}

// Service is a running set of endpoints; Stop ends it.
type Service struct {
	svc     micro.Service
	nc      *nats.Conn
	timeout time.Duration

	mu       sync.Mutex
	stopping bool
	inflight sync.WaitGroup
}

// AddService starts answering spec's endpoints on c. The endpoints answer
// from the moment it returns (from when the connection is up, if it is not
// yet) until Stop.
func (c *Conn) AddService(spec ServiceSpec) (*Service, error) {
	if len(spec.Endpoints) == 0 {
		return nil, fmt.Errorf("bus: service %s: no endpoints", spec.Name)
	}
	s := &Service{nc: c.nc, timeout: spec.Timeout}
	if s.timeout <= 0 {
		s.timeout = 30 * time.Second
	}
	log := c.log
	if spec.Logger != nil {
		log = spec.Logger
	}
	svc, err := micro.AddService(c.nc, micro.Config{
		Name:        spec.Name,
		Version:     spec.Version,
		Description: spec.Description,
		QueueGroup:  spec.Name,
		ErrorHandler: func(_ micro.Service, e *micro.NATSError) {
			log.Warn("bus: service subscription error", "service", spec.Name, "subject", e.Subject, "err", e.Description)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("bus: service %s: %w", spec.Name, err)
	}
	for _, ep := range spec.Endpoints {
		h := micro.HandlerFunc(func(req micro.Request) { s.serve(req, ep.Handler, spec.Name, log) })
		if err := svc.AddEndpoint(ep.Name, h, micro.WithEndpointSubject(ep.Subject)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("bus: service %s: endpoint %s on %s: %w", spec.Name, ep.Name, ep.Subject, err)
		}
	}
	// The subscriptions reach the server with the next flush; make that now,
	// so a request sent once AddService returns finds them. A connection
	// still (re)connecting sends them when it connects.
	if c.nc.IsConnected() {
		if err := c.nc.FlushTimeout(c.opts.PublishTimeout); err != nil {
			log.Warn("bus: service subscriptions not yet confirmed by the server", "service", spec.Name, "err", err)
		}
	}
	s.svc = svc
	return s, nil
}

// serve runs one request through h and answers it.
func (s *Service) serve(req micro.Request, h RequestHandler, name string, log *slog.Logger) {
	s.mu.Lock()
	if s.stopping {
		s.mu.Unlock()
		// Delivered while the subscription drains: another replica (or
		// this one, restarted) answers a retry.
		_ = req.Error(CodeUnavailable, "the "+name+" service is stopping; try again", nil)
		return
	}
	s.inflight.Add(1)
	s.mu.Unlock()
	defer s.inflight.Done()

	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	out, err := h(ctx, req.Data())
	var rerr error
	if err != nil {
		var se *ServiceError
		if !errors.As(err, &se) {
			se = &ServiceError{Code: CodeInternal, Description: err.Error()}
		}
		rerr = req.Error(se.Code, se.Description, nil)
	} else {
		rerr = req.Respond(out)
	}
	if rerr != nil {
		log.Warn("bus: service answer not sent", "service", name, "subject", req.Subject(), "err", rerr)
	}
}

// Stop stops answering (the endpoints' subscriptions are drained, and what
// they still deliver is answered CodeUnavailable) and waits until the
// requests in hand are answered or ctx ends.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	s.stopping = true
	s.mu.Unlock()
	err := s.svc.Stop()
	if err == nil && s.nc.IsConnected() {
		// The unsubscriptions reach the server with the next flush; until
		// then it keeps routing requests here, to be refused.
		fctx, cancel := ctx, context.CancelFunc(func() {})
		if _, ok := ctx.Deadline(); !ok {
			fctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		}
		err = s.nc.FlushWithContext(fctx)
		cancel()
	}
	done := make(chan struct{})
	go func() { s.inflight.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("bus: service stop: %w", ctx.Err()))
	}
	if err != nil {
		return fmt.Errorf("bus: service stop: %w", err)
	}
	return nil
}

// DefaultRequestTimeout bounds a Request whose ctx has no deadline.
const DefaultRequestTimeout = 30 * time.Second

// Request sends data to the service answering on subject and returns its
// answer. An error answer is a *ServiceError; nobody subscribed is
// ErrNoResponders (at once, not after a timeout); no answer before ctx's
// deadline (DefaultRequestTimeout when it has none) is ErrRequestTimeout.
func (c *Conn) Request(ctx context.Context, subject string, data []byte) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultRequestTimeout)
		defer cancel()
	}
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("%w: %s", ErrNoResponders, subject)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return nil, fmt.Errorf("%w: %s", ErrRequestTimeout, subject)
	case errors.Is(err, nats.ErrConnectionClosed):
		return nil, fmt.Errorf("bus: request %s: %w", subject, ErrClosed)
	case err != nil:
		return nil, fmt.Errorf("bus: request %s: %w", subject, err)
	}
	if code := msg.Header.Get(micro.ErrorCodeHeader); code != "" {
		return nil, &ServiceError{Code: code, Description: msg.Header.Get(micro.ErrorHeader)}
	}
	return msg.Data, nil
}
