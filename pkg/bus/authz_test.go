package bus_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// authServer is a server with authorization on and the default topology
// provisioned by the operator's identity, the only one that may.
func authServer(t *testing.T) *bustest.Server {
	t.Helper()
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	c := srv.ConnectAs(t, bus.IdentityOperator, "provision")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Provision(ctx, bus.DefaultTopology()); err != nil {
		t.Fatalf("the operator provisions: %v", err)
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
		// The operator's move of a graph by hand: no service raises it,
		// least of all the dispatcher that serves the agent sessions
		// (docs/decisions/111-operator-escape-hatch.md).
		{bus.IdentityOperator, catalog.InboxSubject("github:octo/repo#1", catalog.GraphOverride), true},
		{bus.IdentityDispatcher, catalog.InboxSubject("github:octo/repo#1", catalog.GraphOverride), false},
		{bus.IdentityIngressSlack, catalog.InboxSubject("github:octo/repo#1", catalog.GraphOverride), false},
		{bus.IdentityIngressGitHub, catalog.InboxSubject("github:octo/repo#1", catalog.GraphOverride), false},
		{bus.IdentityObserver, catalog.InboxSubject("github:octo/repo#1", catalog.GraphOverride), false},
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
	// Each reads what it uses: the observer the sessions bucket,
	// ingress-slack the graph, ingress-github the links, a consuming
	// service the members bucket; a service reads no bucket it does not use
	// (docs/decisions/098-provisioning-is-the-operators.md).
	for _, r := range []struct {
		id, bucket string
		allowed    bool
	}{
		{bus.IdentityObserver, bus.BucketSessions, true}, {bus.IdentityIngressSlack, bus.BucketGraph, true},
		{bus.IdentityIngressGitHub, bus.BucketLinks, true}, {bus.IdentityLedgerWriter, bus.BucketMembers, true},
		{bus.IdentityObserver, bus.BucketMembers, true},
		{bus.IdentitySlackRenderer, bus.BucketSessions, false}, {bus.IdentityLedgerWriter, bus.BucketGraph, false},
		{bus.IdentityIngressGitHub, bus.BucketThreads, false}, {bus.IdentityIngressGitHub, bus.BucketMembers, false},
		{bus.IdentityIngressSlack, bus.BucketLedger, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		kv, err := conns[r.id].KV(ctx, r.bucket)
		if err == nil {
			_, err = kv.Get(ctx, "nothing-here")
		}
		cancel()
		if read := err == nil || errors.Is(err, bus.ErrNotFound); read != r.allowed {
			t.Errorf("%s reading KV %s: err = %v, allowed = %v", r.id, r.bucket, err, r.allowed)
		}
	}
	// The dead letters are the observer's to read; the events' messages
	// their consumers' and the observer's.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	_, err := conns[bus.IdentityOperator].Publish(ctx, bus.Message{Subject: catalog.DLQPrefix + ".ledger-writer-p00.loop.in.0.k.t", MsgID: "authz-dlq", Data: []byte("{}")})
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		id      string
		dlq, ev bool
	}{
		{bus.IdentityObserver, true, true}, {bus.IdentitySlackRenderer, false, true}, {bus.IdentityDispatcher, false, true},
		{bus.IdentityIngressGitHub, false, false}, {bus.IdentityLedgerWriter, false, false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := conns[r.id].ListDLQ(ctx, 10)
		cancel()
		if (err == nil) != r.dlq {
			t.Errorf("%s reading the DLQ: err = %v, allowed = %v", r.id, err, r.dlq)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 3*time.Second)
		recent, err := conns[r.id].RecentMessages(ctx, bus.StreamEvents, 2)
		cancel()
		if read := err == nil && len(recent) > 0; read != r.ev {
			t.Errorf("%s reading the events' messages: %d read, err = %v, allowed = %v", r.id, len(recent), err, r.ev)
		}
	}
}

// TestEveryInboxTypeHasOnePublisher pins the grants to the catalog: every
// type that enters the inbox is raised by exactly one identity (a service,
// or the operator alone for the types no service may raise), and the
// signature policy of loop.in agrees.
func TestEveryInboxTypeHasOnePublisher(t *testing.T) {
	for _, id := range bus.Identities() {
		err := bus.InboxPolicy(id, catalog.GraphOverride)
		if (err == nil) != (id == bus.IdentityOperator) {
			t.Errorf("%s raising %s: policy says %v", id, catalog.GraphOverride, err)
		}
	}
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

// matches reports whether subject matches the NATS subject pattern (with
// "*" and ">" wildcards): what the server does with a grant.
func matches(pattern, subject string) bool {
	p, s := strings.Split(pattern, "."), strings.Split(subject, ".")
	for i, tok := range p {
		if tok == ">" {
			return len(s) > i
		}
		if i >= len(s) || tok != "*" && tok != s[i] {
			return false
		}
	}
	return len(p) == len(s)
}

func allowed(g bus.Grant, subject string) bool {
	return slices.ContainsFunc(g.Publish, func(p string) bool { return matches(p, subject) })
}

// TestServiceGrantsAdministerNothing reads the grants themselves: no service
// identity may create, change, seal, purge or delete a stream, nor create a
// consumer of a partitioned stream, the DLQ or the event log
// (docs/decisions/098-provisioning-is-the-operators.md); a service reads
// messages only of the stream it consumes; the observer and the operator
// keep their reads.
func TestServiceGrantsAdministerNothing(t *testing.T) {
	if !matches("$JS.API.STREAM.INFO.*", "$JS.API.STREAM.INFO.LOOP_DLQ") || matches("$JS.API.STREAM.INFO.*", "$JS.API.STREAM.INFO") ||
		!matches("a.>", "a.b.c") || matches("a.>", "a") || matches("a.b", "a.b.c") {
		t.Fatal("the test's subject matcher is wrong")
	}
	topo := bus.DefaultTopology()
	streams := []string{bus.StreamInbox, bus.StreamEvents, bus.StreamDLQ, bus.StreamLog, bus.StreamAdvisories}
	var admin []string
	for _, s := range streams {
		for _, op := range []string{"STREAM.CREATE", "STREAM.UPDATE", "STREAM.DELETE", "STREAM.PURGE", "STREAM.MSG.DELETE"} {
			admin = append(admin, "$JS.API."+op+"."+s)
		}
		admin = append(admin, "$JS.API.CONSUMER.CREATE."+s+".x", "$JS.API.CONSUMER.CREATE."+s+".x.loop.in.>",
			"$JS.API.CONSUMER.DURABLE.CREATE."+s+".x", "$JS.API.CONSUMER.DELETE."+s+".ledger-writer-p00",
			"$JS.API.CONSUMER.PAUSE."+s+".ledger-writer-p00")
	}
	for _, b := range []string{"KV_" + bus.BucketLedger, "KV_" + bus.BucketMembers, "OBJ_" + bus.ObjectPayloads} {
		admin = append(admin, "$JS.API.STREAM.UPDATE."+b, "$JS.API.STREAM.CREATE."+b, "$JS.API.STREAM.DELETE."+b)
	}
	consumed := map[string]string{bus.IdentityLedgerWriter: bus.StreamInbox, bus.IdentitySlackRenderer: bus.StreamEvents, bus.IdentityDispatcher: bus.StreamEvents}
	for _, id := range []string{bus.IdentityIngressGitHub, bus.IdentityIngressSlack, bus.IdentityLedgerWriter, bus.IdentitySlackRenderer, bus.IdentityDispatcher} {
		g, err := bus.GrantFor(id, topo)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range admin {
			if allowed(g, s) {
				t.Errorf("%s may publish %s", id, s)
			}
		}
		for _, s := range streams {
			for _, read := range []string{"$JS.API.STREAM.MSG.GET." + s, "$JS.API.DIRECT.GET." + s, "$JS.API.DIRECT.GET." + s + ".loop.in.0.k.t"} {
				if got, want := allowed(g, read), consumed[id] == s; got != want {
					t.Errorf("%s reading %s: %v, want %v", id, read, got, want)
				}
			}
			if !allowed(g, "$JS.API.STREAM.INFO."+s) || !allowed(g, "$JS.API.CONSUMER.INFO."+s+".dispatcher-p00") {
				t.Errorf("%s cannot read %s's state, which it waits on at start", id, s)
			}
		}
		if s, ok := consumed[id]; ok {
			for _, need := range []string{"$JS.API.CONSUMER.MSG.NEXT." + s + ".x-p01", "$JS.API.CONSUMER.UNPIN." + s + ".x-p01", "$JS.ACK." + s + ".x-p01.1.2.3.4.5"} {
				if !allowed(g, need) {
					t.Errorf("%s cannot consume: %s refused", id, need)
				}
			}
		}
	}
	obs, _ := bus.GrantFor(bus.IdentityObserver, topo)
	for _, s := range streams {
		if !allowed(obs, "$JS.API.STREAM.MSG.GET."+s) || allowed(obs, "$JS.API.STREAM.UPDATE."+s) {
			t.Errorf("observer on %s: reads %v, updates %v", s, allowed(obs, "$JS.API.STREAM.MSG.GET."+s), allowed(obs, "$JS.API.STREAM.UPDATE."+s))
		}
	}
	op, _ := bus.GrantFor(bus.IdentityOperator, topo)
	for _, s := range admin {
		if !allowed(op, s) {
			t.Errorf("the operator may not publish %s", s)
		}
	}
}

// TestOnlyTheOperatorProvisions runs Provision, with a smaller DLQ, as each
// service identity against the real grants: the server refuses each, and
// LOOP_DLQ keeps its size. What each service does at start instead — check
// that the topology is in place — works within its grant.
func TestOnlyTheOperatorProvisions(t *testing.T) {
	srv := authServer(t)
	shrunk := bus.DefaultTopology()
	shrunk.DLQMaxBytes = 1 << 20
	groups := map[string][]bus.ConsumerGroup{}
	for _, g := range bus.DefaultTopology().Consumers {
		groups[g.Service] = append(groups[g.Service], g)
	}
	for _, id := range []string{bus.IdentityIngressGitHub, bus.IdentityIngressSlack, bus.IdentityLedgerWriter, bus.IdentitySlackRenderer, bus.IdentityDispatcher} {
		c := srv.ConnectAs(t, id, id)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := c.Provision(ctx, shrunk)
		cancel()
		if err == nil {
			t.Errorf("%s provisioned", id)
		}
		ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
		err = c.CheckTopology(ctx, bus.DefaultTopology(), groups[id])
		cancel()
		if err != nil {
			t.Errorf("%s checking the topology: %v", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	js := rawJetStream(t, srv, bus.IdentityOperator)
	dlqMax := func() int64 {
		s, err := js.Stream(ctx, bus.StreamDLQ)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxBytes
	}
	if got := dlqMax(); got != bus.DefaultTopology().DLQMaxBytes {
		t.Errorf("LOOP_DLQ MaxBytes %d, want it unchanged at %d", got, bus.DefaultTopology().DLQMaxBytes)
	}
	if err := srv.ConnectAs(t, bus.IdentityOperator, "provision").Provision(ctx, shrunk); err != nil {
		t.Fatalf("the operator provisions: %v", err)
	}
	if got := dlqMax(); got != shrunk.DLQMaxBytes {
		t.Errorf("LOOP_DLQ MaxBytes %d after the operator's provisioning, want %d", got, shrunk.DLQMaxBytes)
	}
}

// rawJetStream is a plain JetStream client of srv as identity.
func rawJetStream(t *testing.T, srv *bustest.Server, identity string) jetstream.JetStream {
	t.Helper()
	opt, err := nkeyOption(srv.Seed(identity))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL(), opt, nats.CustomInboxPrefix(bus.InboxPrefix(identity)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

func nkeyOption(seed []byte) (nats.Option, error) {
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, err
	}
	return nats.Nkey(pub, kp.Sign), nil
}

// TestPartitionsSharedWithinTheGrant: two replicas of the ledger-writer, each
// on its own connection as the ledger-writer's identity, share the inbox's
// partitions (the members bucket under its own keys, pinned consumers), and
// when one stops the other takes its partitions over (unpinning them) and
// goes on consuming: partition sharing needs no right to shape a stream or a
// consumer.
func TestPartitionsSharedWithinTheGrant(t *testing.T) {
	const n = 4
	topo := bustest.FastTopology(n)
	srv := bustest.StartServer(t, bustest.Options{Auth: true, Topology: &topo})
	srv.Provision(t, topo)
	var got delivered
	start := func(name string) (*bus.Runner, context.CancelFunc, chan error) {
		spec := fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, n)
		spec.Member = name
		r, err := srv.ConnectAs(t, bus.IdentityLedgerWriter, name).NewRunner(spec, got.handler())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		t.Cleanup(cancel)
		return r, cancel, done
	}
	r1, stop1, done1 := start("replica-1")
	r2, _, _ := start("replica-2")
	testkit.WaitWithin(t, 20*time.Second, "the replicas to share the partitions", func() bool {
		return len(r1.Owned()) == n/2 && len(r2.Owned()) == n/2 && r1.Ready() && r2.Ready()
	})
	op := srv.Connect(t, "publisher")
	publish := func(from, to int) {
		for i := from; i < to; i++ {
			ref := fmt.Sprintf("github:octo/repo#%d", i)
			if _, err := op.Publish(context.Background(), bus.Message{Subject: catalog.InboxSubject(ref, catalog.CommentHuman), MsgID: fmt.Sprintf("share-%d", i), Data: []byte(ref)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish(0, 20)
	testkit.WaitWithin(t, 20*time.Second, "20 deliveries", func() bool { return len(got.get()) == 20 })
	stop1()
	if err := <-done1; err != nil {
		t.Fatalf("replica-1: %v", err)
	}
	testkit.WaitWithin(t, 20*time.Second, "replica-2 to take every partition over", func() bool { return len(r2.Owned()) == n && r2.Ready() })
	publish(20, 40)
	testkit.WaitWithin(t, 20*time.Second, "40 deliveries", func() bool { return len(got.get()) == 40 })
}
