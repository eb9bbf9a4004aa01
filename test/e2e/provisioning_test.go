//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// adminClient is a plain JetStream client holding one identity's seed, as an
// attacker who stole it would use it, and the server's permission errors it
// received.
type adminClient struct {
	js jetstream.JetStream

	mu       sync.Mutex
	denials  []string
	watchers map[string]func()
}

func newAdminClient(t *testing.T, srv *bustest.Server, identity string) *adminClient {
	t.Helper()
	kp, err := nkeys.FromSeed(srv.Seed(identity))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	a := &adminClient{watchers: map[string]func(){}}
	nc, err := nats.Connect(srv.URL(), nats.Nkey(pub, kp.Sign), nats.Name("stolen-"+identity),
		nats.CustomInboxPrefix(bus.InboxPrefix(identity)),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			if !errors.Is(err, nats.ErrPermissionViolation) {
				return
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			a.denials = append(a.denials, err.Error())
			for prefix, cancel := range a.watchers {
				if deniedPublish(err.Error(), prefix) {
					cancel()
				}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if a.js, err = jetstream.New(nc); err != nil {
		t.Fatal(err)
	}
	return a
}

// try runs do, which sends a JetStream API request to a subject starting
// with subject, and returns the server's permission error for it ("" when
// none came). It does not wait out a refused request: the error ends it.
func (a *adminClient) try(subject string, do func(ctx context.Context) error) (denial string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a.mu.Lock()
	a.watchers[subject] = cancel
	a.mu.Unlock()
	err = do(ctx)
	// The error may trail the answer of a request the server did let
	// through: give it a moment.
	time.Sleep(20 * time.Millisecond)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.watchers, subject)
	for _, d := range a.denials {
		if deniedPublish(d, subject) {
			return d, err
		}
	}
	return "", err
}

// deniedPublish reports whether the server's permission error e denies a
// publish to a subject starting with prefix (`Permissions Violation for
// Publish to "<subject>"`).
func deniedPublish(e, prefix string) bool {
	return strings.Contains(strings.ToLower(e), `publish to "`+strings.ToLower(prefix))
}

// TestServiceSeedsCannotAdministerTheBus: with each service identity's
// seed, against a server with the real grants, an attacker tries to change
// what the bus is — republish stored messages as a person's gate answer,
// re-route the inbox with a subject transform, add a consumer or widen one,
// seal or shrink the DLQ, purge, delete — and to read the inbox's messages.
// The server refuses each with a permission error, which the test logs;
// afterwards the streams and consumers are as the operator provisioned them
// (docs/decisions/098-provisioning-is-the-operators.md).
func TestServiceSeedsCannotAdministerTheBus(t *testing.T) {
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	topo := bus.DefaultTopology()
	srv.Provision(t, topo)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ref = "github:octo/repo#1"
	key := catalog.SubjectKey(ref)
	feedback := catalog.InboxSubject(ref, catalog.GateFeedback)
	slack := srv.ConnectAs(t, bus.IdentityIngressSlack, "slack")
	if _, err := slack.Publish(ctx, bus.Message{Subject: feedback, MsgID: "slack:C1/1700000000.000100", Data: []byte(`{"text":"approved"}`)}); err != nil {
		t.Fatal(err)
	}
	op := newAdminClient(t, srv, bus.IdentityOperator)
	streamConfig := func(name string) jetstream.StreamConfig {
		s, err := op.js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config
	}
	inbox, events, dlq := streamConfig(bus.StreamInbox), streamConfig(bus.StreamEvents), streamConfig(bus.StreamDLQ)
	lw0 := bus.ConsumerName(bus.ServiceLedgerWriter, 0)
	cons, err := op.js.Consumer(ctx, bus.StreamInbox, lw0)
	if err != nil {
		t.Fatal(err)
	}
	lwConfig := cons.CachedInfo().Config
	inboxSeq := uint64(0)
	if s, err := op.js.Stream(ctx, bus.StreamInbox); err == nil {
		inboxSeq = s.CachedInfo().State.LastSeq
	}
	if inboxSeq == 0 {
		t.Fatal("the inbox holds no message to read")
	}

	api := func(op, stream string) string { return "$JS.API." + op + "." + stream }
	type attempt struct {
		name, subject string
		do            func(ctx context.Context, js jetstream.JetStream) error
	}
	attempts := []attempt{
		{"republish the events as a person's gate answer (RePublish to " + "loop.in." + key + ".gate.feedback)", api("STREAM.UPDATE", bus.StreamEvents),
			func(ctx context.Context, js jetstream.JetStream) error {
				cfg := events
				cfg.RePublish = &jetstream.RePublish{Source: catalog.EventsPrefix + ".>", Destination: catalog.InboxPrefix + "." + key + ".gate.feedback"}
				_, err := js.UpdateStream(ctx, cfg)
				return err
			}},
		{"a subject transform on LOOP_INBOX (every key into partition 0)", api("STREAM.UPDATE", bus.StreamInbox),
			func(ctx context.Context, js jetstream.JetStream) error {
				cfg := inbox
				cfg.SubjectTransform = &jetstream.SubjectTransformConfig{Source: catalog.InboxPrefix + ".*.>", Destination: catalog.InboxPrefix + ".0.{{wildcard(1)}}.>"}
				_, err := js.UpdateStream(ctx, cfg)
				return err
			}},
		{"create a consumer of LOOP_INBOX", api("CONSUMER.CREATE", bus.StreamInbox),
			func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.CreateOrUpdateConsumer(ctx, bus.StreamInbox, jetstream.ConsumerConfig{Durable: "attacker", FilterSubject: catalog.InboxPrefix + ".>", AckPolicy: jetstream.AckExplicitPolicy})
				return err
			}},
		{"create a durable consumer of LOOP_EVENTS (the old API)", api("CONSUMER.DURABLE.CREATE", bus.StreamEvents),
			func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.Conn().RequestWithContext(ctx, api("CONSUMER.DURABLE.CREATE", bus.StreamEvents)+".attacker",
					[]byte(`{"stream_name":"LOOP_EVENTS","config":{"durable_name":"attacker","ack_policy":"explicit"}}`))
				return err
			}},
		{"create a consumer of LOOP_DLQ", api("CONSUMER.CREATE", bus.StreamDLQ),
			func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.CreateOrUpdateConsumer(ctx, bus.StreamDLQ, jetstream.ConsumerConfig{Durable: "attacker", AckPolicy: jetstream.AckExplicitPolicy})
				return err
			}},
		{"widen the filter of " + lw0 + " to the whole inbox", api("CONSUMER.CREATE", bus.StreamInbox) + "." + lw0,
			func(ctx context.Context, js jetstream.JetStream) error {
				cfg := lwConfig
				cfg.FilterSubject = catalog.InboxPrefix + ".>"
				_, err := js.UpdateConsumer(ctx, bus.StreamInbox, cfg)
				return err
			}},
		{"delete the consumer " + lw0, api("CONSUMER.DELETE", bus.StreamInbox),
			func(ctx context.Context, js jetstream.JetStream) error {
				return js.DeleteConsumer(ctx, bus.StreamInbox, lw0)
			}},
		{"seal LOOP_DLQ", api("STREAM.UPDATE", bus.StreamDLQ),
			func(ctx context.Context, js jetstream.JetStream) error {
				cfg := dlq
				cfg.Sealed = true
				_, err := js.UpdateStream(ctx, cfg)
				return err
			}},
		{"shrink LOOP_DLQ (MaxMsgs 1, MaxBytes 1 KiB)", api("STREAM.UPDATE", bus.StreamDLQ),
			func(ctx context.Context, js jetstream.JetStream) error {
				cfg := dlq
				cfg.MaxMsgs, cfg.MaxBytes = 1, 1024
				_, err := js.UpdateStream(ctx, cfg)
				return err
			}},
		{"create LOOP_DLQ anew", api("STREAM.CREATE", bus.StreamDLQ),
			func(ctx context.Context, js jetstream.JetStream) error {
				cfg := dlq
				cfg.MaxBytes = 1024
				_, err := js.CreateStream(ctx, cfg)
				return err
			}},
		{"purge LOOP_INBOX", api("STREAM.PURGE", bus.StreamInbox),
			func(ctx context.Context, js jetstream.JetStream) error {
				s, err := js.Stream(ctx, bus.StreamInbox)
				if err == nil {
					err = s.Purge(ctx)
				}
				return err
			}},
		{"purge LOOP_DLQ", api("STREAM.PURGE", bus.StreamDLQ),
			func(ctx context.Context, js jetstream.JetStream) error {
				s, err := js.Stream(ctx, bus.StreamDLQ)
				if err == nil {
					err = s.Purge(ctx)
				}
				return err
			}},
		{"delete LOOP_LOG", api("STREAM.DELETE", bus.StreamLog),
			func(ctx context.Context, js jetstream.JetStream) error { return js.DeleteStream(ctx, bus.StreamLog) }},
		{"delete a message of LOOP_INBOX", api("STREAM.MSG.DELETE", bus.StreamInbox),
			func(ctx context.Context, js jetstream.JetStream) error {
				s, err := js.Stream(ctx, bus.StreamInbox)
				if err == nil {
					err = s.DeleteMsg(ctx, inboxSeq)
				}
				return err
			}},
	}
	readInbox := []attempt{
		{"read an inbox message (a person's Slack text) by sequence", api("STREAM.MSG.GET", bus.StreamInbox),
			func(ctx context.Context, js jetstream.JetStream) error {
				s, err := js.Stream(ctx, bus.StreamInbox)
				if err == nil {
					_, err = s.GetMsg(ctx, inboxSeq)
				}
				return err
			}},
		{"read an inbox message by direct get", api("DIRECT.GET", bus.StreamInbox),
			func(ctx context.Context, js jetstream.JetStream) error {
				_, err := js.Conn().RequestWithContext(ctx, api("DIRECT.GET", bus.StreamInbox), []byte(fmt.Sprintf(`{"seq":%d}`, inboxSeq)))
				return err
			}},
	}
	services := []string{bus.IdentityIngressGitHub, bus.IdentityIngressSlack, bus.IdentityLedgerWriter, bus.IdentitySlackRenderer, bus.IdentityDispatcher}
	for _, id := range services {
		t.Run(id, func(t *testing.T) {
			a := newAdminClient(t, srv, id)
			tries := attempts
			if id != bus.IdentityLedgerWriter {
				// The ledger-writer consumes the inbox; nobody else
				// reads its messages.
				tries = append(slices.Clone(attempts), readInbox...)
			}
			for _, at := range tries {
				denial, err := a.try(at.subject, func(ctx context.Context) error { return at.do(ctx, a.js) })
				switch {
				case err == nil:
					t.Errorf("%s: %s: let through", id, at.name)
				case denial == "":
					t.Errorf("%s: %s: failed (%v) without the server's permission error for %s", id, at.name, err, at.subject)
				default:
					t.Logf("%s: %s: refused: %s", id, at.name, denial)
				}
			}
		})
	}

	// The controls: the same reads and changes are let through where they
	// are granted, so a refusal above is the grant's.
	lw := newAdminClient(t, srv, bus.IdentityLedgerWriter)
	if denial, err := lw.try(api("STREAM.MSG.GET", bus.StreamInbox), func(ctx context.Context) error { return readInbox[0].do(ctx, lw.js) }); err != nil || denial != "" {
		t.Errorf("the ledger-writer reading the inbox it consumes: %v %s", err, denial)
	}

	// Nothing changed.
	if got := streamConfig(bus.StreamEvents); got.RePublish != nil {
		t.Errorf("LOOP_EVENTS republishes: %+v", got.RePublish)
	}
	if got := streamConfig(bus.StreamInbox); got.RePublish != nil || *got.SubjectTransform != *inbox.SubjectTransform {
		t.Errorf("LOOP_INBOX changed: transform %+v, republish %+v", got.SubjectTransform, got.RePublish)
	}
	if got := streamConfig(bus.StreamDLQ); got.Sealed || got.MaxMsgs != dlq.MaxMsgs || got.MaxBytes != dlq.MaxBytes {
		t.Errorf("LOOP_DLQ changed: sealed %v, MaxMsgs %d, MaxBytes %d", got.Sealed, got.MaxMsgs, got.MaxBytes)
	}
	streamConfig(bus.StreamLog) // still there
	for _, stream := range []string{bus.StreamInbox, bus.StreamEvents, bus.StreamDLQ} {
		st, err := op.js.Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range st.ConsumerNames(ctx).Name() {
			names = append(names, n)
		}
		if slices.Contains(names, "attacker") {
			t.Errorf("%s has the attacker's consumer", stream)
		}
		if stream == bus.StreamInbox && len(names) != topo.Partitions {
			t.Errorf("LOOP_INBOX has %d consumers, want %d", len(names), topo.Partitions)
		}
	}
	if c, err := op.js.Consumer(ctx, bus.StreamInbox, lw0); err != nil || c.CachedInfo().Config.FilterSubject != lwConfig.FilterSubject {
		t.Errorf("%s changed or gone: %v", lw0, err)
	}
	if s, err := op.js.Stream(ctx, bus.StreamInbox); err != nil || s.CachedInfo().State.Msgs != 1 {
		t.Errorf("LOOP_INBOX lost its message: %v", err)
	}
	// The operator may: shrinking the DLQ is an act of provisioning.
	shrunk := dlq
	shrunk.MaxMsgs = 1
	if _, err := op.js.UpdateStream(ctx, shrunk); err != nil {
		t.Errorf("the operator shrinking LOOP_DLQ: %v", err)
	}
}
