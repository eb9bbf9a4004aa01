package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/the-loop/bus/pkg/catalog"
)

// Stream names (docs/architecture.md#streams-and-state).
const (
	StreamInbox      = "LOOP_INBOX"
	StreamEvents     = "LOOP_EVENTS"
	StreamDLQ        = "LOOP_DLQ"
	StreamLog        = "LOOP_LOG"
	StreamAdvisories = "LOOP_ADVISORIES"
)

// ObjectPayloads is the object store of provider payloads too large for one
// message: an event carries a reference "<bucket>/<name>" instead.
const ObjectPayloads = "payloads"

// KV bucket names (docs/architecture.md#streams-and-state).
const (
	BucketLedger   = "ledger"
	BucketSeen     = "seen"
	BucketThreads  = "threads"
	BucketPosted   = "posted"
	BucketSessions = "sessions"
	BucketGraph    = "graph"
	BucketCursors  = "cursors"
	// BucketLinks holds the pull requests a session linked to its work
	// item (package pkg/links).
	BucketLinks = "links"
)

// Service names that consume a stream by default
// (docs/architecture.md#the-flow).
const (
	ServiceLedgerWriter  = "ledger-writer"
	ServiceSlackRenderer = "slack-renderer"
	ServiceDispatcher    = "dispatcher"
)

// membersMaxBytes caps BucketMembers: a record is a few hundred bytes, one per
// live replica.
const membersMaxBytes = 8 << 20

// signersMaxBytes caps BucketSigners: one public key per identity.
const signersMaxBytes = 1 << 20

// DefaultGroup is the priority group every partition consumer pins in.
const DefaultGroup = "loop"

// ConsumerGroup is one service consuming one partitioned stream: it gets one
// durable consumer per partition.
type ConsumerGroup struct {
	Service string // e.g. "ledger-writer"; a subject-safe token
	Stream  string // StreamInbox or StreamEvents
	// DeliverNew starts a newly created consumer at the end of the stream
	// instead of its beginning. Only matters the first time the consumer is
	// created (on LOOP_EVENTS, a service added later would otherwise replay
	// up to MaxAge of events). Must be false on the WorkQueue inbox.
	DeliverNew bool
}

// Bucket is one KV bucket or object store.
type Bucket struct {
	Name string
	// TTL expires keys this long after their last write; 0 keeps them.
	TTL time.Duration
	// MaxBytes caps the bucket (0: the topology's BucketMaxBytes, or
	// ObjectMaxBytes for an object store). A full bucket refuses writes
	// (JetStream's KV and object stores discard new): the writer sees an
	// error and retries, nothing stored is lost.
	MaxBytes int64
	// Async stores the bucket's writes without a sync each on a single
	// node (JetStream's async persist mode; a replicated bucket is written
	// through its Raft log and keeps the default). Only for a bucket whose
	// last writes, lost in a crash, cost a repeat that a later step drops
	// (docs/decisions/090-seen-marks-without-a-sync.md).
	Async bool
}

// Topology is everything Provision creates. Start from DefaultTopology and
// change what differs; zero fields take the defaults documented on each.
type Topology struct {
	// Partitions is N (default catalog.DefaultPartitions). Changing it remaps
	// keys to partitions, so Provision refuses to change it while a replica
	// runs with the old count or a consumer has anything pending
	// (docs/decisions/073-changing-the-partition-count.md).
	Partitions int
	// Replicas of every stream, consumer and bucket: 1 on a single node, 3
	// on a Kubernetes cluster (default 1).
	Replicas int
	// InboxMaxBytes caps LOOP_INBOX; beyond it publishes fail (Discard New:
	// back-pressure, never silent loss). Default 1 GiB.
	InboxMaxBytes int64
	// EventsMaxBytes caps LOOP_EVENTS (default 3 GiB). At the cap the oldest
	// events go (Discard Old): the fan-out never blocks, and what is lost is
	// replay history GitHub, the ledger, still holds (decision 035).
	EventsMaxBytes int64
	// DLQMaxBytes caps LOOP_DLQ (default 512 MiB). At the cap a new dead
	// letter is refused (Discard New), so the evidence an operator has not
	// replayed yet is never evicted; the message stays unacknowledged until
	// MaxDeliver, and LOOP_ADVISORIES records it.
	DLQMaxBytes int64
	// LogMaxBytes caps LOOP_LOG (default 512 MiB; Discard Old: the newest
	// records are the ones worth keeping).
	LogMaxBytes int64
	// AdvisoryMaxBytes caps LOOP_ADVISORIES (default 64 MiB; Discard Old).
	AdvisoryMaxBytes int64
	// BucketMaxBytes caps a KV bucket whose Bucket.MaxBytes is 0 (default
	// 128 MiB); ObjectMaxBytes likewise caps an object store (default
	// 1 GiB). On one server the caps are reserved up front and must fit
	// its max_file_store together: the defaults sum to about 7.2 GiB.
	BucketMaxBytes, ObjectMaxBytes int64
	// DuplicateWindow is the Nats-Msg-Id window of the inbox, the events and
	// the DLQ (default 2h; at least 1h).
	DuplicateWindow time.Duration
	// EventsMaxAge (default 7d), DLQMaxAge (default 30d), LogMaxAge (default
	// 7d) and AdvisoryMaxAge (default 30d) bound the Limits streams.
	EventsMaxAge, DLQMaxAge, LogMaxAge, AdvisoryMaxAge time.Duration
	// AckWait is how long a delivery may stay unacknowledged before it is
	// redelivered; the runner keeps it alive with InProgress while the
	// handler works (default 3m).
	AckWait time.Duration
	// MaxDeliver bounds deliveries of one message; the last one that fails
	// goes to the DLQ (default 10).
	MaxDeliver int
	// PinnedTTL is how long the server keeps a partition pinned to a replica
	// that sends no pull request; a replica that died without unpinning is
	// replaced after it (default 1m). Fetch waits are kept well below it.
	PinnedTTL time.Duration
	// MemberLease is how long a consuming replica's record in BucketMembers
	// lives without renewal: a replica that dies loses its partitions this
	// long after its last renewal (default 15s; renewed every third of it).
	MemberLease time.Duration
	// Group is the priority group name (default DefaultGroup).
	Group string
	// Consumers lists the partitioned consumers (default: ledger-writer on
	// the inbox, slack-renderer and dispatcher on the events).
	Consumers []ConsumerGroup
	// Buckets lists the KV buckets (default: the seven of
	// docs/architecture.md#streams-and-state, seen with a 72h TTL, which covers
	// GitHub's ≥3d and Slack's ≥10m at once).
	Buckets []Bucket
	// Objects are the object stores (default: ObjectPayloads, kept as long
	// as the event stream).
	Objects []Bucket
	// Signers, when set, are the public NKeys of the bus identities, by
	// identity: Provision writes them to BucketSigners, which then holds
	// exactly these (docs/decisions/099-signed-events.md). Only the
	// operator may write the bucket, so only the operator's provisioning
	// sets them; a service's leaves them empty.
	Signers map[string]string
}

// DefaultTopology is the topology of docs/architecture.md#streams-and-state for
// a single node.
func DefaultTopology() Topology {
	t := Topology{}
	t.setDefaults()
	return t
}

func (t *Topology) setDefaults() {
	t.setLimitDefaults()
	if t.Group == "" {
		t.Group = DefaultGroup
	}
	if t.Consumers == nil {
		t.Consumers = []ConsumerGroup{
			{Service: ServiceLedgerWriter, Stream: StreamInbox},
			{Service: ServiceSlackRenderer, Stream: StreamEvents},
			{Service: ServiceDispatcher, Stream: StreamEvents},
		}
	}
	if t.Objects == nil {
		t.Objects = []Bucket{{Name: ObjectPayloads, TTL: t.EventsMaxAge}}
	}
	if t.Buckets == nil {
		t.Buckets = []Bucket{
			// Claims outlive any redelivery of their event: the inbox is
			// drained in minutes, a GitHub outage is waited out in hours.
			// The two buckets written per event get twice the default cap.
			{Name: BucketLedger, TTL: 30 * 24 * time.Hour, MaxBytes: 2 * t.BucketMaxBytes},
			// Marks only spare the pipeline a repeat: a lost one lets
			// a redelivery past the duplicate window through to the
			// consumers' own checks.
			{Name: BucketSeen, TTL: 72 * time.Hour, MaxBytes: 2 * t.BucketMaxBytes, Async: true},
			{Name: BucketThreads},
			// Longer than LOOP_EVENTS keeps an event: a redelivery or a
			// replay of the stream must still find what was posted.
			{Name: BucketPosted, TTL: 8 * 24 * time.Hour},
			{Name: BucketSessions},
			{Name: BucketGraph},
			{Name: BucketCursors},
			{Name: BucketLinks},
			// A public key per identity: small.
			{Name: BucketSigners, MaxBytes: signersMaxBytes},
		}
	}
	t.Buckets = capped(t.Buckets, t.BucketMaxBytes)
	t.Objects = capped(t.Objects, t.ObjectMaxBytes)
}

// setLimitDefaults fills every unset (zero or negative) size, age and
// count with the single-node default of docs/architecture.md#streams-and-state.
func (t *Topology) setLimitDefaults() {
	setUnset(&t.Partitions, catalog.DefaultPartitions)
	setUnset(&t.Replicas, 1)
	setUnset(&t.InboxMaxBytes, 1<<30)
	setUnset(&t.EventsMaxBytes, 3<<30)
	setUnset(&t.DLQMaxBytes, 512<<20)
	setUnset(&t.LogMaxBytes, 512<<20)
	setUnset(&t.AdvisoryMaxBytes, 64<<20)
	setUnset(&t.BucketMaxBytes, 128<<20)
	setUnset(&t.ObjectMaxBytes, 1<<30)
	setUnset(&t.DuplicateWindow, 2*time.Hour)
	setUnset(&t.EventsMaxAge, 7*24*time.Hour)
	setUnset(&t.DLQMaxAge, 30*24*time.Hour)
	setUnset(&t.LogMaxAge, 7*24*time.Hour)
	setUnset(&t.AdvisoryMaxAge, 30*24*time.Hour)
	setUnset(&t.AckWait, 3*time.Minute)
	setUnset(&t.MaxDeliver, 10)
	setUnset(&t.PinnedTTL, time.Minute)
	setUnset(&t.MemberLease, 15*time.Second)
}

// setUnset sets *v to def when it is unset (zero or negative).
func setUnset[T ~int | ~int64](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// capped returns bs with every zero MaxBytes set to def, copying rather
// than writing through to a slice the caller may share.
func capped(bs []Bucket, def int64) []Bucket {
	out := make([]Bucket, len(bs))
	for i, b := range bs {
		if b.MaxBytes <= 0 {
			b.MaxBytes = def
		}
		out[i] = b
	}
	return out
}

// ConsumerName is the durable name of a service's consumer of partition p:
// "<service>-pNN".
func ConsumerName(service string, p int) string {
	return fmt.Sprintf("%s-p%02d", service, p)
}

// streamPrefix is the subject prefix of a partitioned stream.
func streamPrefix(stream string) (string, error) {
	switch stream {
	case StreamInbox:
		return catalog.InboxPrefix, nil
	case StreamEvents:
		return catalog.EventsPrefix, nil
	}
	return "", fmt.Errorf("bus: %q is not a partitioned stream", stream)
}

// partitionTransform inserts the partition token. The publisher writes
// <prefix>.<key>.<type...>; the type has one or more tokens (it keeps its
// dots), which the trailing ">" carries whole: checked on nats-server v2.15.2
// (TestProvisionPartitionTransform). The transform applies once, when a
// message enters the stream; stored subjects are never transformed again. A
// stored (partitioned) subject must therefore never be published again as
// such: it would match the source a second time and gain a second partition
// token. ReplayDLQ republishes the un-partitioned form for that reason.
func partitionTransform(prefix string, n int) *jetstream.SubjectTransformConfig {
	return &jetstream.SubjectTransformConfig{
		Source:      prefix + ".*.>",
		Destination: fmt.Sprintf("%s.{{partition(%d,1)}}.{{wildcard(1)}}.>", prefix, n),
	}
}

// advisorySubjects are the advisories kept as the DLQ's safety net: a message
// that hit MaxDeliver or was terminated, on either partitioned stream.
func advisorySubjects() []string {
	var s []string
	for _, kind := range []string{"MAX_DELIVERIES", "MSG_TERMINATED"} {
		for _, stream := range []string{StreamInbox, StreamEvents} {
			s = append(s, "$JS.EVENT.ADVISORY.CONSUMER."+kind+"."+stream+".*")
		}
	}
	return s
}

func (t Topology) streamConfigs() []jetstream.StreamConfig {
	r := t.Replicas
	return []jetstream.StreamConfig{
		{
			Name:        StreamInbox,
			Description: "the-loop inbox: off-ledger events for the ledger-writer",
			// Subjects need a key and a type token: a one-token subject would
			// escape the transform and sit unconsumed forever, so it is
			// refused at publish time (no responders) instead.
			Subjects:         []string{catalog.InboxPrefix + ".*.>"},
			Retention:        jetstream.WorkQueuePolicy,
			Storage:          jetstream.FileStorage,
			Discard:          jetstream.DiscardNew,
			MaxBytes:         t.InboxMaxBytes,
			Duplicates:       t.DuplicateWindow,
			Replicas:         r,
			SubjectTransform: partitionTransform(catalog.InboxPrefix, t.Partitions),
		},
		{
			Name:             StreamEvents,
			Description:      "the-loop events: recorded events fanned out to channels and the loop",
			Subjects:         []string{catalog.EventsPrefix + ".*.>"},
			Retention:        jetstream.LimitsPolicy,
			Storage:          jetstream.FileStorage,
			Discard:          jetstream.DiscardOld,
			MaxBytes:         t.EventsMaxBytes,
			MaxAge:           t.EventsMaxAge,
			Duplicates:       t.DuplicateWindow,
			Replicas:         r,
			SubjectTransform: partitionTransform(catalog.EventsPrefix, t.Partitions),
		},
		{
			Name:        StreamDLQ,
			Description: "the-loop dead letters: events that exhausted MaxDeliver or failed permanently",
			Subjects:    []string{catalog.DLQPrefix + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardNew,
			MaxBytes:    t.DLQMaxBytes,
			MaxAge:      t.DLQMaxAge,
			Duplicates:  t.DuplicateWindow,
			Replicas:    r,
		},
		{
			Name:        StreamLog,
			Description: "the-loop event log",
			Subjects:    []string{catalog.LogPrefix + ".>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardOld,
			MaxBytes:    t.LogMaxBytes,
			MaxAge:      t.LogMaxAge,
			Replicas:    r,
			PersistMode: unsyncedPersistMode(r),
		},
		{
			Name:        StreamAdvisories,
			Description: "the-loop safety net: max-deliveries and terminated advisories",
			Subjects:    advisorySubjects(),
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Discard:     jetstream.DiscardOld,
			MaxBytes:    t.AdvisoryMaxBytes,
			MaxAge:      t.AdvisoryMaxAge,
			Replicas:    r,
		},
	}
}

// unsyncedPersistMode is the persist mode of a store written without a sync
// per write, for the stores whose lost last writes cost nothing a later step
// does not cover: the event log, written with core publishes nobody waits
// for, so a record lost in a host crash is already possible and harmless
// (decision 051), and the seen marks (decision 090). On one node that is
// JetStream's async persist mode, sparing the syncs the server otherwise
// does for every write (sync_interval: always) at the cost of the streams
// that hold the loop's state. A replicated stream is written by its Raft
// log and syncs on its own terms; JetStream refuses the mode there.
func unsyncedPersistMode(replicas int) jetstream.PersistModeType {
	if replicas > 1 {
		return jetstream.DefaultPersistMode
	}
	return jetstream.AsyncPersistMode
}

func (t Topology) consumerConfig(g ConsumerGroup, p int) (jetstream.ConsumerConfig, error) {
	prefix, err := streamPrefix(g.Stream)
	if err != nil {
		return jetstream.ConsumerConfig{}, err
	}
	deliver := jetstream.DeliverAllPolicy
	if g.DeliverNew {
		if g.Stream == StreamInbox {
			return jetstream.ConsumerConfig{}, errors.New("bus: DeliverNew is not allowed on the WorkQueue inbox")
		}
		deliver = jetstream.DeliverNewPolicy
	}
	name := ConsumerName(g.Service, p)
	return jetstream.ConsumerConfig{
		Durable:       name,
		Description:   fmt.Sprintf("%s, partition %d of %d", g.Service, p, t.Partitions),
		DeliverPolicy: deliver,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    t.MaxDeliver,
		// One message in flight per partition: this, not the client, is what
		// keeps a work item's events in order across replicas.
		MaxAckPending:  1,
		FilterSubject:  fmt.Sprintf("%s.%d.>", prefix, p),
		ReplayPolicy:   jetstream.ReplayInstantPolicy,
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      t.PinnedTTL,
		PriorityGroups: []string{t.Group},
		Replicas:       t.Replicas,
	}, nil
}

// Provision creates or updates every stream, consumer and KV bucket of t. Only
// the operator identity is granted it: services wait for it with
// CheckTopology (docs/decisions/098-provisioning-is-the-operators.md). It is
// idempotent and safe to run several times at once with identical t (a
// provisioning step retried, `up` restarted): each call converges on the same
// configuration.
func (c *Conn) Provision(ctx context.Context, t Topology) error {
	t.setDefaults()
	if err := c.WaitConnected(ctx); err != nil {
		return err
	}
	if err := c.checkPartitionChange(ctx, t); err != nil {
		return err
	}
	for _, cfg := range t.streamConfigs() {
		if err := c.upsertStream(ctx, cfg); err != nil {
			return err
		}
	}
	if err := c.provisionStores(ctx, t); err != nil {
		return err
	}
	if len(t.Signers) > 0 {
		return c.putSigners(ctx, t.Signers)
	}
	return nil
}

// provisionStores creates or updates the consumers, object stores and KV
// buckets of t, eight requests at a time.
func (c *Conn) provisionStores(ctx context.Context, t Topology) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, cg := range t.Consumers {
		for p := 0; p < t.Partitions; p++ {
			cfg, err := t.consumerConfig(cg, p)
			if err != nil {
				return err
			}
			g.Go(func() error {
				if _, err := c.js.CreateOrUpdateConsumer(gctx, cg.Stream, cfg); err != nil {
					return fmt.Errorf("bus: provision consumer %s/%s: %w", cg.Stream, cfg.Durable, err)
				}
				return nil
			})
		}
	}
	for _, b := range t.Objects {
		g.Go(func() error {
			_, err := c.js.CreateOrUpdateObjectStore(gctx, jetstream.ObjectStoreConfig{
				Bucket:   b.Name,
				TTL:      b.TTL,
				MaxBytes: b.MaxBytes,
				Storage:  jetstream.FileStorage,
				Replicas: t.Replicas,
			})
			if err != nil {
				return fmt.Errorf("bus: provision object store %s: %w", b.Name, err)
			}
			return nil
		})
	}
	for _, cfg := range t.bucketConfigs() {
		g.Go(func() error {
			if t.asyncBucket(cfg.Bucket) {
				return c.upsertStream(gctx, kvStreamConfig(cfg))
			}
			if _, err := c.js.CreateOrUpdateKeyValue(gctx, cfg); err != nil {
				return fmt.Errorf("bus: provision bucket %s: %w", cfg.Bucket, err)
			}
			return nil
		})
	}
	return g.Wait()
}

// checkPartitionChange refuses a topology whose partition count differs from
// the streams' while that would break a work item's order: a live replica
// still runs with another count (it would work partitions nobody else
// agrees on), or a consumer has a message not yet delivered or acknowledged
// (it would be handled after the work item's next events, which land in
// another partition). Otherwise the change goes ahead: keys move between
// partitions, and every consumer starts on its partition's new messages.
// Consumers of partitions above a lowered count stay, idle: raising the count
// again resumes them after what they last acknowledged.
func (c *Conn) checkPartitionChange(ctx context.Context, t Topology) error {
	var problems []string
	changing := false
	for _, stream := range []string{StreamInbox, StreamEvents} {
		n, err := c.StreamPartitions(ctx, stream)
		if errors.Is(err, ErrNotFound) || err == nil && (n == 0 || n == t.Partitions) {
			continue
		}
		if err != nil {
			return err
		}
		changing = true
		for _, g := range t.Consumers {
			if g.Stream != stream {
				continue
			}
			pending, err := c.pending(ctx, g, n)
			if err != nil {
				return err
			}
			if pending > 0 {
				problems = append(problems, fmt.Sprintf("%s has %d message(s) pending on %s", g.Service, pending, stream))
			}
		}
		if len(problems) == 0 {
			c.log.Warn("bus: changing the partition count", "stream", stream, "from", n, "to", t.Partitions)
		}
	}
	if !changing {
		return nil
	}
	members, err := c.Members(ctx, "")
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return err
	}
	for _, m := range members {
		if m.Partitions != t.Partitions {
			problems = append(problems, fmt.Sprintf("replica %s of %s runs with %d", m.ID, m.Service, m.Partitions))
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: the partition count would change to %d, but %s; stop the ingresses, let the consumers drain, "+
			"stop every replica, then start them all with the new count (README, Operations)",
			ErrPartitionChange, t.Partitions, strings.Join(problems, "; "))
	}
	return nil
}

// upsertStream creates or updates a stream. CreateOrUpdate is update-then-
// create, so two replicas racing on a new stream can both see "not found"
// and both create; the loser's identical create is accepted by the server,
// but a different one would fail, so retry the update once to converge.
func (c *Conn) upsertStream(ctx context.Context, cfg jetstream.StreamConfig) error {
	_, err := c.js.CreateOrUpdateStream(ctx, cfg)
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		_, err = c.js.UpdateStream(ctx, cfg)
	}
	if err != nil && strings.Contains(err.Error(), "can not change persist mode") {
		// A stream's persist mode is fixed when it is created (a store
		// provisioned before the mode was chosen keeps its own); the rest
		// of the configuration still converges.
		var s jetstream.Stream
		if s, err = c.js.Stream(ctx, cfg.Name); err == nil {
			cfg.PersistMode = s.CachedInfo().Config.PersistMode
			_, err = c.js.UpdateStream(ctx, cfg)
		}
	}
	if err != nil {
		return fmt.Errorf("bus: provision stream %s: %w", cfg.Name, err)
	}
	return nil
}
