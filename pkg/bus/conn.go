package bus

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Options configures a client connection.
type Options struct {
	// URL is the server URL (LOOP_NATS_URL); a comma-separated list is
	// allowed. Credentials may be embedded in it; they are never logged.
	// Ignored by (*Embedded).Connect.
	URL string
	// Name identifies the connection in the server's /connz, e.g.
	// "ledger-writer/pod-7". Required.
	Name string
	// Logger receives connection events. nil discards them.
	Logger *slog.Logger
	// ReconnectWait is the pause between reconnect attempts (default 2s).
	ReconnectWait time.Duration
	// PublishTimeout bounds one publish attempt waiting for its PubAck
	// (default 5s).
	PublishTimeout time.Duration
	// PublishAttempts bounds how often an ambiguous publish is retried under
	// the same Nats-Msg-Id (default 5).
	PublishAttempts int
	// Credentials prove the connection's identity; see Credentials.
	Credentials Credentials
	// Identity is the bus identity the credential belongs to (IdentityOperator,
	// a service name…). It sets the connection's reply-subject prefix
	// (InboxPrefix), the only replies its permissions let it read. Empty:
	// the default "_INBOX" of a server without authorization.
	Identity string
}

func (o *Options) setDefaults() {
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = 2 * time.Second
	}
	if o.PublishTimeout <= 0 {
		o.PublishTimeout = 5 * time.Second
	}
	if o.PublishAttempts <= 0 {
		o.PublishAttempts = 5
	}
}

// Conn is a connection to the bus. It reconnects forever; Close ends it.
// A Conn is safe for concurrent use.
type Conn struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	log  *slog.Logger
	opts Options
	// closed is closed when the connection is closed for good (Close,
	// Drain, or the server refusing the credential twice).
	closed  chan struct{}
	denials *denials
	// otherIdentity is closed when the server denies the connection its
	// own reply subjects: the credential is another identity's.
	otherIdentity chan struct{}
	// signer signs what the connection publishes on loop.in and loop.ev;
	// nil on a bus without identities (no credential).
	signer *Signer
	// signers is the signers set, watched once per connection from the
	// first signed publication or the first consumer's check on: what the
	// signer authenticates its publications for and what its consumers
	// check against (sharedSigners). signersLoaded is closed when it has
	// loaded or failed (signersErr).
	signersOnce   sync.Once
	signersLoaded chan struct{}
	signers       atomic.Pointer[Signers]
	signersErr    error
}

// ErrClosed is returned by operations on a connection that was closed.
var ErrClosed = errors.New("bus: connection closed")

// Connect opens a connection to opts.URL. It does not wait for the server:
// with RetryOnFailedConnect a service can start before NATS does, and stays
// not ready (Connected reports false) until the first connect succeeds. Use
// WaitConnected to block until then.
func Connect(ctx context.Context, opts Options) (*Conn, error) {
	if opts.URL == "" {
		return nil, errors.New("bus: connect: URL is required")
	}
	return connect(ctx, opts)
}

func connect(ctx context.Context, opts Options, extra ...nats.Option) (*Conn, error) {
	if opts.Name == "" {
		return nil, errors.New("bus: connect: Name is required")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	if err := opts.Credentials.Validate(); err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", opts.Name, err)
	}
	credOpts, err := opts.Credentials.options()
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", opts.Name, err)
	}
	signer, err := newConnSigner(opts)
	if err != nil {
		return nil, fmt.Errorf("bus: connect %s: %w", opts.Name, err)
	}
	log := opts.Logger.With("component", "bus", "conn", opts.Name)
	closed := make(chan struct{})
	denied := newDenials()
	otherIdentity := make(chan struct{})
	nopts := connHandlers(opts, log, closed, denied, otherIdentity)
	if opts.Identity != "" {
		nopts = append(nopts, nats.CustomInboxPrefix(InboxPrefix(opts.Identity)))
	}
	nopts = append(nopts, credOpts...)
	nopts = append(nopts, extra...)
	nc, err := nats.Connect(opts.URL, nopts...)
	if err != nil {
		if isAuthErr(err) {
			return nil, opts.authError(err)
		}
		return nil, fmt.Errorf("bus: connect %s: %w", RedactURL(opts.URL), err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bus: jetstream: %w", err)
	}
	return &Conn{nc: nc, js: js, log: log, opts: opts, closed: closed, denials: denied, otherIdentity: otherIdentity, signer: signer}, nil
}

// newConnSigner is the signer of a connection as opts.Identity: with its
// credential's key, when it has both (signingDisabled aside).
func newConnSigner(opts Options) (*Signer, error) {
	if opts.Identity == "" || signingDisabled {
		return nil, nil
	}
	kp, err := opts.Credentials.signingKey()
	if err != nil || kp == nil {
		return nil, err
	}
	return newSigner(opts.Identity, kp)
}

// Signing reports whether the connection signs what it publishes on
// loop.in and loop.ev, and so whether its consumers verify: it is a bus
// identity with a key. A bus without authorization has no identities, and
// nothing to sign as or check against.
func (c *Conn) Signing() bool { return c.signer != nil }

// CheckDelivery is the check of a delivery the connection consumes, against
// signers: its own authenticator, or else its signer's signature
// (Signers.Check).
func (c *Conn) CheckDelivery(signers *Signers, d *Delivery, may Policy) (string, error) {
	return signers.CheckDelivery(c.signer, d, may)
}

// watchSigners starts, once, the connection's own watch of BucketSigners,
// which lives as long as the connection.
func (c *Conn) watchSigners() {
	c.signersOnce.Do(func() {
		c.signersLoaded = make(chan struct{})
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			<-c.closed
			cancel()
		}()
		go func() {
			defer close(c.signersLoaded)
			s, err := c.WatchSigners(ctx)
			if err != nil {
				c.signersErr = err
				return
			}
			c.signers.Store(s)
		}()
	})
}

// readerKeys is the signers set the connection's publications carry
// authenticators for, never waited for: until it has loaded, publications
// are signed only, and their readers check the signature.
func (c *Conn) readerKeys() *Signers {
	c.watchSigners()
	return c.signers.Load()
}

// SharedSigners waits for the signers set the connection watches (the one
// its publications use too: one watch per connection, not one per user),
// until ctx ends.
func (c *Conn) SharedSigners(ctx context.Context) (*Signers, error) {
	c.watchSigners()
	select {
	case <-c.signersLoaded:
		if c.signersErr != nil {
			return nil, c.signersErr
		}
		return c.signers.Load(), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("bus: signers: %w", ctx.Err())
	}
}

// Identity is the bus identity the connection is (Options.Identity).
func (c *Conn) Identity() string { return c.opts.Identity }

// connHandlers are the connection's options and callbacks: reconnect for
// ever, log its life, close closed when it is closed for good, record the
// publishes the server denies in denied, and close otherIdentity when the
// server denies the connection its own reply subjects.
func connHandlers(opts Options, log *slog.Logger, closed chan<- struct{}, denied *denials, otherIdentity chan<- struct{}) []nats.Option {
	var otherOnce sync.Once
	return []nats.Option{
		nats.Name(opts.Name),
		// The nats.go default gives up after 60 attempts (about 2 minutes):
		// a NATS outage must never turn into a dead service.
		nats.MaxReconnects(-1),
		nats.RetryOnFailedConnect(true),
		nats.ReconnectWait(opts.ReconnectWait),
		nats.ReconnectJitter(opts.ReconnectWait/10, opts.ReconnectWait/10),
		nats.ConnectHandler(func(nc *nats.Conn) {
			log.Info("nats connected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			if err == nil && (nc.IsClosed() || nc.IsDraining()) {
				// Our own drain or close at a clean stop: nothing
				// to warn about.
				log.Debug("nats disconnected", "reason", "closed")
				return
			}
			log.Warn("nats disconnected", "err", err)
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			log.Info("nats reconnected", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ClosedHandler(func(nc *nats.Conn) {
			if err := nc.LastError(); isAuthErr(err) {
				// Refused and WaitConnected return it as an *AuthError
				// naming the setting, which the host says once as it
				// exits: logged as an error here too, it would print twice.
				log.Debug("nats connection closed: the server refused the credential",
					"credential", opts.Credentials.Kind(), "setting", opts.Credentials.Setting, "err", err)
			} else {
				log.Info("nats connection closed")
			}
			close(closed)
		}),
		nats.LameDuckModeHandler(func(nc *nats.Conn) {
			log.Warn("nats server entering lame-duck mode", "url", nc.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
			if subject, ok := denied.report(err); ok {
				log.Error("nats: publish denied by the connection's permissions", "subject", subject, "identity", opts.Identity)
				return
			}
			if inboxDenied(err, opts.Identity) {
				otherOnce.Do(func() {
					// Refused returns it (ErrOtherIdentity): said once, there.
					log.Debug("nats: the server denies this connection its own reply subjects: the credential is another identity's",
						"identity", opts.Identity, "credential", opts.Credentials.Kind(), "setting", opts.Credentials.Setting)
					close(otherIdentity)
				})
				return
			}
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Warn("nats async error", "subject", subj, "err", err)
		}),
	}
}

func (o Options) authError(err error) *AuthError {
	setting := o.Credentials.Setting
	if setting == "" {
		setting = "a NATS credential"
	}
	return &AuthError{Conn: o.Name, Setting: setting, Kind: o.Credentials.Kind(), Err: err}
}

// ErrOtherIdentity: the server admits the credential but denies the
// connection the reply subjects of the identity it connects as, so the
// credential is another identity's (two services' secrets swapped).
var ErrOtherIdentity = errors.New("the credential is not this identity's: the server denies it the identity's reply subjects")

// Refused blocks until ctx ends (nil) or the server refuses the
// connection's credential: it closed the connection for it, or denied it
// the reply subjects of its identity (ErrOtherIdentity). Either is an
// *AuthError naming the connection and the setting. A host runs it beside
// its services so that a wrong or missing credential stops the process with
// a clear error rather than leaving it unready forever, or every request
// timing out.
func (c *Conn) Refused(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return nil
	case <-c.otherIdentity:
		return c.opts.authError(fmt.Errorf("%w (%s)", ErrOtherIdentity, c.opts.Identity))
	case <-c.closed:
	}
	if err := c.nc.LastError(); isAuthErr(err) {
		return c.opts.authError(err)
	}
	return nil
}

// inboxDenied reports whether err is the server denying a subscription to
// identity's own reply subjects.
func inboxDenied(err error, identity string) bool {
	return identity != "" && errors.Is(err, nats.ErrPermissionViolation) &&
		strings.Contains(err.Error(), `Subscription to "`+InboxPrefix(identity)+".")
}

// RedactURL strips user info (user, password, token) from every URL of a
// comma-separated list, so that it can be logged or shown.
func RedactURL(s string) string {
	parts := strings.Split(s, ",")
	for i, p := range parts {
		p = strings.TrimSpace(p)
		u, err := url.Parse(p)
		if err != nil || u.Host == "" {
			// Not a URL we can parse: drop anything before an '@' anyway.
			if j := strings.LastIndexByte(p, '@'); j >= 0 {
				k := strings.Index(p, "://")
				if k >= 0 && k < j {
					p = p[:k+3] + "redacted@" + p[j+1:]
				} else {
					p = "redacted@" + p[j+1:]
				}
			}
			parts[i] = p
			continue
		}
		if u.User != nil {
			u.User = url.User("redacted")
		}
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}

// Connected reports whether the connection is up right now.
func (c *Conn) Connected() bool { return c.nc.IsConnected() }

// Ready is Connected: a connection is ready when it can reach the server.
// Runner.Ready adds "and consuming".
func (c *Conn) Ready() bool { return c.Connected() }

// WaitConnected blocks until the connection is up, ctx ends or the
// connection is closed.
func (c *Conn) WaitConnected(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if c.nc.IsConnected() {
			return nil
		}
		if c.nc.IsClosed() {
			if err := c.nc.LastError(); isAuthErr(err) {
				return c.opts.authError(err)
			}
			return ErrClosed
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bus: wait for connection: %w", ctx.Err())
		case <-t.C:
		}
	}
}

// Drain flushes pending publishes, drains subscriptions and closes the
// connection, waiting at most until ctx ends.
func (c *Conn) Drain(ctx context.Context) error {
	if c.nc.IsClosed() {
		return nil
	}
	if err := c.nc.Drain(); err != nil {
		c.nc.Close()
		return fmt.Errorf("bus: drain: %w", err)
	}
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for !c.nc.IsClosed() {
		select {
		case <-ctx.Done():
			c.nc.Close()
			return fmt.Errorf("bus: drain: %w", ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// Close closes the connection at once. In-flight publishes fail.
func (c *Conn) Close() { c.nc.Close() }

// Name is the connection name given in Options.
func (c *Conn) Name() string { return c.opts.Name }
