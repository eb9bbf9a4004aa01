package bus

import (
	"fmt"
	"slices"

	"github.com/the-loop/bus/pkg/catalog"
)

// Bus identities: one per service, plus the two an operator uses. Each
// connects as its own NATS user whose subject permissions are the
// architecture written down (docs/architecture.md, "Trust boundaries"): only
// the two ingresses and the dispatcher publish to loop.in, each only the
// types it raises; only the ledger-writer consumes the inbox and publishes
// loop.ev; the slack-renderer and the dispatcher only read loop.ev; a KV
// bucket is written only by its owner; no service shapes a stream or a
// consumer, nor reads a message it does not consume (the operator
// provisions: docs/decisions/098-provisioning-is-the-operators.md). Agent
// sessions have no identity at all: they reach the loop through the
// dispatcher's session endpoint.
const (
	IdentityIngressGitHub = "ingress-github"
	IdentityIngressSlack  = "ingress-slack"
	IdentityLedgerWriter  = ServiceLedgerWriter
	IdentitySlackRenderer = ServiceSlackRenderer
	IdentityDispatcher    = ServiceDispatcher
	// IdentityObserver reads: the event log, the DLQ, streams' and
	// consumers' state, KV buckets, and asks the dispatcher's graph status.
	// It publishes nothing that any service acts on.
	IdentityObserver = "observer"
	// IdentityOperator is the administrator: everything (provisioning, DLQ
	// replay, session controls, graph complete, stream maintenance).
	IdentityOperator = "operator"
)

// Identities lists every bus identity: the five services, then the observer
// and the operator.
func Identities() []string {
	return []string{
		IdentityIngressGitHub, IdentityIngressSlack, IdentityLedgerWriter,
		IdentitySlackRenderer, IdentityDispatcher, IdentityObserver, IdentityOperator,
	}
}

// InboxTypes lists, per identity, the catalog types (and notices) it may
// publish to loop.in. Nobody else publishes to the inbox but the operator
// (a DLQ replay, a session control), which may publish any type; the types
// listed under it are the ones no service may raise: an operator's move of a
// graph by hand, which an agent session must never reach through the
// dispatcher that serves it (docs/decisions/111-operator-escape-hatch.md).
var InboxTypes = map[string][]catalog.Type{
	IdentityIngressGitHub: {catalog.CommentHuman, catalog.CommentAgent, catalog.WorkItemActivity, catalog.LedgerRecord},
	IdentityIngressSlack:  {catalog.WorkItemReply, catalog.GateFeedback, catalog.ControlCommand, catalog.WorkItemCreate},
	IdentityDispatcher: {
		catalog.SessionAwaitingInput, catalog.DecisionPending, catalog.PhaseApprovalPending, catalog.PRReviewPending,
		catalog.SecuritySignOffPending, catalog.ConflictEscalated, catalog.WorkItemComplete, catalog.GatePaused,
		catalog.GateMoved, catalog.Alert, catalog.Reaction, catalog.PhaseLabel, catalog.Announcement, catalog.CriticFindings,
	},
	IdentityOperator: {catalog.GraphOverride},
}

// access is what an identity does with a KV bucket or object store.
type access int

const (
	readOnly access = iota + 1
	readWrite
)

// buckets says who uses which KV bucket and object store, and how. The owner
// (readWrite) is the service whose state it is. Every service reads the
// signers, which only the operator writes
// (docs/decisions/099-signed-events.md).
var buckets = map[string]map[string]access{
	// ingress-github reads the pull requests sessions linked to their work
	// items, to route a linked pull request's events to them.
	IdentityIngressGitHub: {BucketSeen: readWrite, BucketCursors: readWrite, ObjectPayloads: readWrite, BucketLinks: readOnly, BucketSigners: readOnly},
	IdentityIngressSlack:  {BucketCursors: readWrite, BucketThreads: readOnly, BucketGraph: readOnly, BucketSigners: readOnly},
	// Thread bindings are written by the two services that learn them: the
	// renderer when it starts a work item's thread, the ledger-writer when a
	// kickoff's new issue takes over the thread it came from.
	IdentityLedgerWriter:  {BucketLedger: readWrite, BucketThreads: readWrite, BucketSigners: readOnly},
	IdentitySlackRenderer: {BucketPosted: readWrite, BucketThreads: readWrite, BucketSigners: readOnly},
	// The dispatcher reads the ledger's claims (a session's question waits
	// for its record) and the payloads too large for an event.
	IdentityDispatcher: {BucketSessions: readWrite, BucketGraph: readWrite, BucketLedger: readOnly, ObjectPayloads: readOnly,
		BucketLinks: readWrite, BucketSigners: readOnly},
}

// consumes says which partitioned stream each consuming identity reads.
var consumes = map[string]string{
	IdentityLedgerWriter:  StreamInbox,
	IdentitySlackRenderer: StreamEvents,
	IdentityDispatcher:    StreamEvents,
}

// Grant is what one identity may do on the bus, as NATS subject permissions.
type Grant struct {
	// Publish and Subscribe are the subjects allowed; everything else is
	// denied.
	Publish, Subscribe []string
	// Responses lets the identity answer requests it received (one reply
	// each), whatever the requester's reply subject is.
	Responses bool
}

// InboxPrefix is the reply-subject prefix of an identity's connection: every
// identity reads only its own replies.
func InboxPrefix(identity string) string { return "_INBOX_" + identity }

// GrantFor returns identity's permissions for topology t (the stream and
// bucket names it lists).
func GrantFor(identity string, t Topology) (Grant, error) {
	t.setDefaults()
	switch identity {
	case IdentityOperator:
		return Grant{Publish: []string{">"}, Subscribe: []string{">"}, Responses: true}, nil
	case IdentityObserver:
		return observerGrant(t), nil
	case IdentityIngressGitHub, IdentityIngressSlack, IdentityLedgerWriter, IdentitySlackRenderer, IdentityDispatcher:
	default:
		return Grant{}, fmt.Errorf("bus: unknown identity %q", identity)
	}
	g := Grant{Subscribe: []string{InboxPrefix(identity) + ".>"}}
	pub := func(subjects ...string) {
		for _, s := range subjects {
			if !slices.Contains(g.Publish, s) {
				g.Publish = append(g.Publish, s)
			}
		}
	}
	// No stream or consumer administration: provisioning is the
	// operator's (docs/decisions/098-provisioning-is-the-operators.md). A
	// service reads the topology's state, to wait for it, and nothing of a
	// message it does not consume.
	pub(metadataReads(t)...)
	pub(catalog.LogPrefix + "." + catalog.SubjectKey(identity) + ".>")
	for _, typ := range InboxTypes[identity] {
		pub(catalog.InboxPrefix + ".*." + string(typ))
	}
	if stream, ok := consumes[identity]; ok {
		pub(api("CONSUMER.MSG.NEXT", stream, "*"), api("CONSUMER.UNPIN", stream, "*"),
			"$JS.ACK."+stream+".>", catalog.DLQPrefix+".>")
		pub(messageReads(stream)...)
		// Its replicas announce themselves in the members bucket, each
		// under the service's own keys only: no service can move another's
		// partitions.
		pub(storeSubjects(BucketMembers, false)...)
		pub("$KV." + BucketMembers + "." + identity + ".>")
	}
	if identity == IdentityLedgerWriter {
		pub(catalog.EventsPrefix + ".>")
	}
	names := make([]string, 0, len(buckets[identity]))
	for name := range buckets[identity] {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		pub(storeSubjects(name, buckets[identity][name] == readWrite)...)
	}
	if identity == IdentityDispatcher {
		// The graph endpoint (nats.go/micro): its own subjects and the
		// framework's discovery subjects, answered with one reply each.
		g.Subscribe = append(g.Subscribe, catalog.ServicePrefix+"."+catalog.SubjectKey(identity)+".>", "$SRV.>")
		g.Responses = true
	}
	return g, nil
}

// metadataReads are the state of every stream and consumer of t: what a
// service checks before it starts (the topology is provisioned, with its
// partition count), what its metrics and the status page's bus section show.
// They reveal no message and change nothing.
func metadataReads(t Topology) []string {
	s := []string{"$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST"}
	for _, name := range streamNames(t) {
		s = append(s, api("STREAM.INFO", name), api("CONSUMER.LIST", name), api("CONSUMER.NAMES", name),
			api("CONSUMER.INFO", name, "*"))
	}
	return s
}

// messageReads read one stored message of stream by sequence or subject.
func messageReads(stream string) []string {
	return []string{api("STREAM.MSG.GET", stream), api("DIRECT.GET", stream), api("DIRECT.GET", stream, ">")}
}

// storeSubjects are the subjects of reading (and, with write, writing) one KV
// bucket or object store: gets, watches (an ordered consumer of its stream,
// with flow control) and writes.
func storeSubjects(name string, write bool) []string {
	stream, data := "KV_"+name, "$KV."+name+".>"
	if name == ObjectPayloads {
		stream, data = "OBJ_"+name, "$O."+name+".>"
	}
	s := append(messageReads(stream),
		api("CONSUMER.CREATE", stream, ">"), api("CONSUMER.INFO", stream, "*"), api("CONSUMER.DELETE", stream, "*"),
		api("CONSUMER.MSG.NEXT", stream, "*"), "$JS.ACK."+stream+".>", "$JS.FC."+stream+".>")
	if write {
		s = append(s, data)
		if name == ObjectPayloads {
			// Putting an object again replaces its chunks with a purge.
			s = append(s, api("STREAM.PURGE", stream))
		}
	}
	return s
}

// observerGrant reads everything a status page or `the-loop events` shows,
// and can take nothing: it may not fetch from the partitioned streams'
// consumers (that would hold back a service's message), only from its own
// ordered consumers of the other streams.
func observerGrant(t Topology) Grant {
	s := observerReads(t)
	// graph status (not complete), a session's transcript (what its
	// terminal shows, secrets masked: the control plane's reads), and the
	// services framework's discovery.
	s = append(s, catalog.ServiceSubject(ServiceDispatcher, "graph.status"), catalog.ServiceSubject(ServiceDispatcher, "transcript.*"), "$SRV.PING", "$SRV.PING.>",
		"$SRV.INFO", "$SRV.INFO.>", "$SRV.STATS", "$SRV.STATS.>")
	return Grant{Publish: s, Subscribe: []string{InboxPrefix(IdentityObserver) + ".>"}}
}

// observerReads are the reads of the status page and of `the-loop` reading
// verbs: every stream's, bucket's and consumer's state, any stored message
// by sequence, and ordered consumers of the streams that are not
// partitioned (the DLQ, the event log, buckets). Only the observer has them
// (docs/decisions/102-status-page-reads-as-the-observer.md); they change
// nothing and take no message from a service.
func observerReads(t Topology) []string {
	s := metadataReads(t)
	for _, name := range streamNames(t) {
		s = append(s, messageReads(name)...)
		if name == StreamInbox || name == StreamEvents {
			continue
		}
		s = append(s, api("CONSUMER.CREATE", name, ">"), api("CONSUMER.DELETE", name, "*"),
			api("CONSUMER.MSG.NEXT", name, "*"), "$JS.ACK."+name+".>", "$JS.FC."+name+".>")
	}
	return s
}

// streamNames are the streams of t, KV buckets' and object stores' included.
func streamNames(t Topology) []string {
	var names []string
	for _, cfg := range t.streamConfigs() {
		names = append(names, cfg.Name)
	}
	names = append(names, "KV_"+BucketMembers)
	for _, b := range t.Buckets {
		names = append(names, "KV_"+b.Name)
	}
	for _, o := range t.Objects {
		names = append(names, "OBJ_"+o.Name)
	}
	return names
}

// api is a JetStream API subject: "$JS.API." + op + "." + tokens.
func api(op string, tokens ...string) string {
	s := "$JS.API." + op
	for _, t := range tokens {
		s += "." + t
	}
	return s
}

// UserFor is the server's user of identity holding seed: its public key and
// its grant for t.
func UserFor(identity string, seed []byte, t Topology) (User, error) {
	pub, err := PublicKey(seed)
	if err != nil {
		return User{}, fmt.Errorf("bus: identity %s: %w", identity, err)
	}
	g, err := GrantFor(identity, t)
	if err != nil {
		return User{}, err
	}
	return User{Public: pub, Grant: g}, nil
}

// NewUsers issues a new NKey for every bus identity (Identities): the seeds,
// by identity, and the users a server admits for topology t, in the same
// order.
func NewUsers(t Topology) (map[string][]byte, []User, error) {
	seeds := map[string][]byte{}
	var users []User
	for _, id := range Identities() {
		seed, _, err := NewIdentityKey()
		if err != nil {
			return nil, nil, err
		}
		u, err := UserFor(id, seed, t)
		if err != nil {
			return nil, nil, err
		}
		seeds[id] = seed
		users = append(users, u)
	}
	return seeds, users, nil
}
