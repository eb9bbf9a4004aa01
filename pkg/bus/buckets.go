package bus

import (
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The KV buckets as Provision creates them: each through nats.go's
// CreateOrUpdateKeyValue, except a bucket written in async persist mode, whose
// stream is provisioned directly (decision 090).

// bucketConfigs are the KV buckets of t: the members bucket when services
// consume, then t.Buckets.
func (t Topology) bucketConfigs() []jetstream.KeyValueConfig {
	var out []jetstream.KeyValueConfig
	if len(t.Consumers) > 0 {
		// Records expire a lease after their last renewal, and the expiry
		// leaves a marker so that watchers see it at once.
		out = append(out, jetstream.KeyValueConfig{
			Bucket:         BucketMembers,
			Description:    "the-loop: live replicas of the consuming services",
			History:        1,
			TTL:            t.MemberLease,
			LimitMarkerTTL: max(t.MemberLease, time.Second),
			MaxBytes:       membersMaxBytes,
			Storage:        jetstream.FileStorage,
			Replicas:       t.Replicas,
		})
	}
	for _, b := range t.Buckets {
		out = append(out, jetstream.KeyValueConfig{
			Bucket:   b.Name,
			History:  1,
			TTL:      b.TTL,
			MaxBytes: b.MaxBytes,
			Storage:  jetstream.FileStorage,
			Replicas: t.Replicas,
		})
	}
	return out
}

// asyncBucket reports whether the bucket called name is written without a
// sync each: Bucket.Async, where the topology allows it (unsyncedPersistMode).
func (t Topology) asyncBucket(name string) bool {
	return unsyncedPersistMode(t.Replicas) == jetstream.AsyncPersistMode &&
		slices.ContainsFunc(t.Buckets, func(b Bucket) bool { return b.Name == name && b.Async })
}

// kvStreamConfig is the stream behind the KV bucket cfg as nats.go creates
// it (CreateKeyValue), in async persist mode: the client's KeyValueConfig
// has no persist mode, and a stream's mode is fixed when it is created.
func kvStreamConfig(cfg jetstream.KeyValueConfig) jetstream.StreamConfig {
	dup := 2 * time.Minute
	if cfg.TTL > 0 && cfg.TTL < dup {
		dup = cfg.TTL
	}
	return jetstream.StreamConfig{
		Name:              "KV_" + cfg.Bucket,
		Description:       cfg.Description,
		Subjects:          []string{"$KV." + cfg.Bucket + ".>"},
		MaxMsgsPerSubject: int64(max(cfg.History, 1)),
		MaxBytes:          cfg.MaxBytes,
		MaxAge:            cfg.TTL,
		MaxMsgSize:        -1,
		MaxMsgs:           -1,
		MaxConsumers:      -1,
		Storage:           cfg.Storage,
		Replicas:          cfg.Replicas,
		AllowRollup:       true,
		DenyDelete:        true,
		AllowDirect:       true,
		Duplicates:        dup,
		Discard:           jetstream.DiscardNew,
		PersistMode:       jetstream.AsyncPersistMode,
	}
}
