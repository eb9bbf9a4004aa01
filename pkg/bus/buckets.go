package bus

import (
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

// asyncBucket returns the bucket called name when it is written in async
// persist mode (Bucket.Async on a single node), nil otherwise.
func (t Topology) asyncBucket(name string) *Bucket {
	if t.Replicas > 1 {
		return nil
	}
	for _, b := range t.Buckets {
		if b.Name == name && b.Async {
			return &b
		}
	}
	return nil
}

// kvStreamConfig is the stream behind the KV bucket cfg as nats.go creates
// it (CreateKeyValue), in async persist mode: the client's KeyValueConfig
// has no persist mode, and a stream's mode is fixed when it is created.
func kvStreamConfig(cfg jetstream.KeyValueConfig, b Bucket) jetstream.StreamConfig {
	dup := 2 * time.Minute
	if b.TTL > 0 && b.TTL < dup {
		dup = b.TTL
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
