package bus_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// authServer is a server with authorization on and the default topology
// provisioned by the ledger-writer's identity (any service may provision).
func authServer(t *testing.T) *bustest.Server {
	t.Helper()
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	c := srv.ConnectAs(t, bus.IdentityLedgerWriter, "provision")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Provision(ctx, bus.DefaultTopology()); err != nil {
		t.Fatalf("ledger-writer provisions: %v", err)
	}
	return srv
}

func TestAuthRefusesAClientWithoutCredential(t *testing.T) {
	srv := authServer(t)
	c, err := bus.Connect(context.Background(), bus.Options{URL: srv.URL(), Name: "agent-session", ReconnectWait: 20 * time.Millisecond})
	if err == nil {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err = c.WaitConnected(ctx)
	}
	var ae *bus.AuthError
	if !errors.As(err, &ae) {
		t.Fatalf("a client without a credential: err = %v, want an *AuthError", err)
	}
	if ae.Kind != "none" || !strings.Contains(err.Error(), "agent-session") || !strings.Contains(err.Error(), "requires a credential") {
		t.Errorf("error %q does not say which connection and that a credential is required", err)
	}
}

func TestAuthRefusesAnUnknownSeedNamingTheSetting(t *testing.T) {
	srv := authServer(t)
	seed, _, err := bus.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "stolen.nk")
	if err := os.WriteFile(file, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := bus.Connect(context.Background(), bus.Options{
		URL: srv.URL(), Name: "ledger-writer/pod-1", ReconnectWait: 20 * time.Millisecond,
		Credentials: bus.Credentials{SeedFile: file, Setting: "LOOP_NATS_NKEY_FILE"},
	})
	if err == nil {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err = c.WaitConnected(ctx); err == nil {
			err = c.Refused(ctx)
		}
	}
	var ae *bus.AuthError
	if !errors.As(err, &ae) {
		t.Fatalf("an unknown seed: err = %v, want an *AuthError", err)
	}
	for _, want := range []string{"ledger-writer/pod-1", "LOOP_NATS_NKEY_FILE", "nkey"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), string(seed)) {
		t.Error("the error carries the seed")
	}
}

func TestCredentialsValidateNamesTheSetting(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.nk")
	if err := os.WriteFile(bad, []byte("not a seed\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		c    bus.Credentials
		want string
	}{
		{"missing file", bus.Credentials{SeedFile: filepath.Join(dir, "nope.nk"), Setting: "LOOP_NATS_NKEY_FILE"}, "LOOP_NATS_NKEY_FILE"},
		{"not a seed", bus.Credentials{SeedFile: bad, Setting: "LOOP_NATS_NKEY_FILE"}, "not an NKey user seed"},
		{"two credentials", bus.Credentials{SeedFile: bad, User: "u", Setting: "LOOP_NATS_USER"}, "one NATS credential"},
		{"password alone", bus.Credentials{Password: "p", Setting: "LOOP_NATS_PASSWORD"}, "without a user"},
		{"cert without key", bus.Credentials{CertFile: bad, Setting: "LOOP_NATS_TLS_CERT"}, "both"},
	}
	for _, tc := range cases {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.c.Setting) {
			t.Errorf("%s: Validate() = %v, want an error naming %q and %s", tc.name, err, tc.want, tc.c.Setting)
		}
	}
}

// TestGrantsEncodeTheArchitecture publishes, as each identity, what the
// architecture allows it and what it does not, and checks the server's
// verdict: only the ingresses and the dispatcher publish to loop.in, each
// only its own types; only the ledger-writer publishes loop.ev; a bucket is
// written only by its owner, and the members bucket by each consuming
// service under its own name only.
func TestGrantsEncodeTheArchitecture(t *testing.T) {
	srv := authServer(t)
	conns := map[string]*bus.Conn{}
	for _, id := range bus.Identities() {
		conns[id] = srv.ConnectAs(t, id, id)
	}
	key := catalog.SubjectKey("github:octo/repo#1")
	pubs := []struct {
		id      string
		subject string
		allowed bool
	}{
		{bus.IdentityIngressGitHub, catalog.InboxSubject("github:octo/repo#1", catalog.CommentHuman), true},
		{bus.IdentityIngressGitHub, catalog.InboxSubject("github:octo/repo#1", catalog.GateFeedback), false},
		{bus.IdentityIngressSlack, catalog.InboxSubject("github:octo/repo#1", catalog.GateFeedback), true},
		{bus.IdentityIngressSlack, catalog.InboxSubject("github:octo/repo#1", catalog.CommentHuman), false},
		{bus.IdentityIngressSlack, "loop.ev." + key + ".gate.feedback", false},
		{bus.IdentityDispatcher, catalog.InboxSubject("github:octo/repo#1", catalog.SessionAwaitingInput), true},
		{bus.IdentityDispatcher, catalog.InboxSubject("github:octo/repo#1", catalog.GateFeedback), false},
		{bus.IdentityDispatcher, catalog.InboxSubject("github:octo/repo#1", catalog.ControlCommand), false},
		{bus.IdentityDispatcher, catalog.InboxSubject("github:octo/repo#1", catalog.WorkItemCreate), false},
		{bus.IdentityDispatcher, "loop.ev." + key + ".comment.human", false},
		{bus.IdentityLedgerWriter, "loop.ev." + key + ".comment.human", true},
		{bus.IdentityLedgerWriter, catalog.InboxSubject("github:octo/repo#1", catalog.GateFeedback), false},
		{bus.IdentitySlackRenderer, catalog.InboxSubject("github:octo/repo#1", catalog.WorkItemReply), false},
		{bus.IdentitySlackRenderer, "loop.ev." + key + ".comment.human", false},
		{bus.IdentityObserver, catalog.InboxSubject("github:octo/repo#1", catalog.ControlCommand), false},
		{bus.IdentityOperator, catalog.InboxSubject("github:octo/repo#1", catalog.ControlCommand), true},
		// A consuming service announces its own replicas only: it cannot
		// take or drop another service's partitions.
		{bus.IdentityLedgerWriter, "$KV." + bus.BucketMembers + ".ledger-writer.probe", true},
		{bus.IdentityLedgerWriter, "$KV." + bus.BucketMembers + ".dispatcher.probe", false},
		{bus.IdentityDispatcher, "$KV." + bus.BucketMembers + ".dispatcher.probe", true},
		{bus.IdentitySlackRenderer, "$KV." + bus.BucketMembers + ".ledger-writer.probe", false},
		{bus.IdentityIngressGitHub, "$KV." + bus.BucketMembers + ".ingress-github.probe", false},
		{bus.IdentityObserver, "$KV." + bus.BucketMembers + ".dispatcher.probe", false},
	}
	for i, p := range pubs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := conns[p.id].Publish(ctx, bus.Message{Subject: p.subject, MsgID: "authz-" + p.id + "-" + string(rune('a'+i)), Data: []byte("{}")})
		cancel()
		switch {
		case p.allowed && err != nil:
			t.Errorf("%s publishing %s: %v, want it stored", p.id, p.subject, err)
		case !p.allowed && !errors.Is(err, bus.ErrDenied):
			t.Errorf("%s publishing %s: err = %v, want bus.ErrDenied", p.id, p.subject, err)
		}
	}

	kvs := []struct {
		id, bucket string
		allowed    bool
	}{
		{bus.IdentityDispatcher, bus.BucketGraph, true},
		{bus.IdentityDispatcher, bus.BucketLedger, false},
		{bus.IdentityIngressSlack, bus.BucketGraph, false},
		{bus.IdentitySlackRenderer, bus.BucketGraph, false},
		{bus.IdentityLedgerWriter, bus.BucketLedger, true},
		{bus.IdentityLedgerWriter, bus.BucketSessions, false},
		{bus.IdentityObserver, bus.BucketSessions, false},
	}
	for _, k := range kvs {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		kv, err := conns[k.id].KV(ctx, k.bucket)
		if err == nil {
			_, err = kv.Put(ctx, "probe", []byte("x"))
		}
		cancel()
		if k.allowed != (err == nil) {
			t.Errorf("%s writing KV %s: err = %v, allowed = %v", k.id, k.bucket, err, k.allowed)
		}
	}
	// Everybody may read what it reads: the observer the sessions bucket,
	// ingress-slack the graph; and every service what the status page
	// shows (docs/decisions/075-status-page-reads.md), reads only: the
	// writes above stay refused; and the members bucket, whose writes each
	// consuming service has for its own keys only.
	for _, r := range []struct{ id, bucket string }{{bus.IdentityObserver, bus.BucketSessions}, {bus.IdentityIngressSlack, bus.BucketGraph},
		{bus.IdentitySlackRenderer, bus.BucketSessions}, {bus.IdentityLedgerWriter, bus.BucketGraph}, {bus.IdentityIngressGitHub, bus.BucketThreads},
		{bus.IdentityObserver, bus.BucketMembers}, {bus.IdentityIngressGitHub, bus.BucketMembers}} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		kv, err := conns[r.id].KV(ctx, r.bucket)
		if err == nil {
			_, err = kv.Get(ctx, "nothing-here")
		}
		cancel()
		if err != nil && !errors.Is(err, bus.ErrNotFound) {
			t.Errorf("%s reading KV %s: %v", r.id, r.bucket, err)
		}
	}
	for _, id := range []string{bus.IdentityIngressGitHub, bus.IdentitySlackRenderer} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := conns[id].ListDLQ(ctx, 10)
		if err == nil {
			_, err = conns[id].RecentMessages(ctx, bus.StreamEvents, 5)
		}
		cancel()
		if err != nil {
			t.Errorf("%s reading the DLQ and the events' recent messages (the status page): %v", id, err)
		}
	}
}

// TestEveryInboxTypeHasOnePublisher pins the grants to the catalog: every
// type that enters the inbox is raised by exactly one service identity.
func TestEveryInboxTypeHasOnePublisher(t *testing.T) {
	seen := map[catalog.Type]string{}
	for id, types := range bus.InboxTypes {
		for _, typ := range types {
			if other, dup := seen[typ]; dup {
				t.Errorf("%s is published by both %s and %s", typ, other, id)
			}
			seen[typ] = id
		}
	}
	for _, typ := range catalog.Types() {
		if _, ok := seen[typ]; !ok {
			t.Errorf("catalog type %s has no inbox publisher", typ)
		}
	}
}

// TestAuthorizationConfLoads renders the grants as nats.conf and reads them
// back with nats-server's own parser.
func TestAuthorizationConfLoads(t *testing.T) {
	_, users, err := bus.NewUsers(bus.DefaultTopology())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "auth.conf"), []byte(bus.AuthorizationConf(users, nil)), 0o600); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(dir, "nats.conf")
	if err := os.WriteFile(conf, []byte("listen: 127.0.0.1:-1\ninclude ./auth.conf\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(conf)
	if err != nil {
		t.Fatalf("nats-server refuses the generated authorization: %v", err)
	}
	if len(opts.Nkeys) != len(users) {
		t.Fatalf("%d nkey users loaded, want %d", len(opts.Nkeys), len(users))
	}
	for i, u := range users {
		got := opts.Nkeys[i]
		if got.Nkey != u.Public {
			t.Errorf("user %d: nkey %s, want %s", i, got.Nkey, u.Public)
			continue
		}
		if !slices.Equal(got.Permissions.Publish.Allow, u.Grant.Publish) || !slices.Equal(got.Permissions.Subscribe.Allow, u.Grant.Subscribe) {
			t.Errorf("user %d (%s): permissions differ after a round trip through nats.conf", i, u.Public)
		}
		if (got.Permissions.Response != nil) != u.Grant.Responses {
			t.Errorf("user %d: allow_responses %v, want %v", i, got.Permissions.Response != nil, u.Grant.Responses)
		}
	}
}
