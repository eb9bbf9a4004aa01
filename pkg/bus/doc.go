// Package bus is the-loop's event bus: the one package of the module that
// imports nats.go and nats-server (README.md#repository-map). Everything else
// talks to NATS JetStream through it, with plain types of its own (Message,
// Header, Delivery, KVEntry) so that callers never import nats.
//
// It provides:
//   - Connect, a client connection that reconnects forever, and StartEmbedded,
//     an in-process nats-server for `the-loop up` and tests;
//   - Provision, the idempotent creation of the streams, consumers and KV
//     buckets of docs/architecture.md#streams-and-state (Topology), which only
//     the operator identity may do, and CheckTopology, with which a service
//     waits for it (docs/decisions/098-provisioning-is-the-operators.md);
//   - Publish with Nats-Msg-Id deduplication and PubAck, retried under the
//     same id when the outcome is ambiguous; on loop.in and loop.ev signed by
//     the connection's identity (Signer), with an authenticator for each
//     consumer of the stream, which consumers check against the operator's
//     signers bucket (Signers, WatchSigners, Conn.CheckDelivery;
//     docs/decisions/099-signed-events.md,
//     docs/decisions/110-readers-authenticators.md);
//   - Runner, the partitioned, pinned consumer loop: one message in flight per
//     partition; a service's replicas divide the partitions between them
//     (BucketMembers), each pulling only its own, and hand them over when a
//     replica joins, leaves or dies;
//   - KV, the compare-and-set key/value wrapper the ledger claims with;
//   - the dead-letter queue (ListDLQ, ReplayDLQ) and the event-log tail
//     (TailLog);
//   - request/reply endpoints (Conn.AddService, Conn.Request) on the NATS
//     services framework, for the operator verbs that ask a service a
//     question instead of reading its state behind its back.
//
// Package bustest holds the in-process JetStream test server and the
// conformance suite every consumer of this package relies on.
package bus
