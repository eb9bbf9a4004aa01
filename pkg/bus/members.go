package bus

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// BucketMembers is the KV bucket of the consuming services' live replicas:
// one key per replica, "<service>.<member id>", kept alive by the replica
// and expiring one Topology.MemberLease after its last renewal. It is
// provisioned with every topology that has partitioned consumers
// (docs/decisions/071-replicas-share-the-partitions.md).
const BucketMembers = "members"

// ErrPartitionChange: Provision refused to change the partition count (see
// Topology.Partitions); the error says what stands in the way.
var ErrPartitionChange = errors.New("bus: partition count change refused")

// Member is one live replica of a consuming service, as it announces itself
// in BucketMembers.
type Member struct {
	// ID is unique among the service's live replicas: the replica's name,
	// its process id and a per-process sequence. In a container the process
	// id and the sequence repeat across restarts, so a restarted container
	// is the same member and takes its partitions back at once.
	ID      string `json:"id"`
	Service string `json:"service"`
	// Name is the replica's name: ConsumerSpec.Member, by default the host
	// name (a pod's name on Kubernetes, a container's id under compose).
	Name string `json:"name"`
	// Since is when the replica joined; the longest-standing replicas get
	// the extra partitions when they do not divide evenly.
	Since time.Time `json:"since"`
	// Partitions is the partition count the replica runs with.
	Partitions int `json:"partitions"`
	// Concurrency is how many handlers the replica runs at once (0: one per
	// partition it works).
	Concurrency int `json:"concurrency,omitempty"`
	// Working lists the partitions the replica pulls now: those it owns,
	// and those it is still handing over.
	Working []int `json:"working"`
	// Incarnation tells two processes announcing the same ID apart.
	Incarnation string `json:"incarnation"`
}

// memberKey is m's key in BucketMembers.
func memberKey(service, id string) string { return service + "." + id }

var memberUnsafe = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// memberSeq counts the runners of each service in this process.
var (
	memberSeqMu sync.Mutex
	memberSeq   = map[string]int{}
)

// newMemberID names a new runner of service: name, process id and the
// runner's sequence among the process's runners of that service.
func newMemberID(service, name string) string {
	memberSeqMu.Lock()
	memberSeq[service]++
	seq := memberSeq[service]
	memberSeqMu.Unlock()
	name = strings.Trim(memberUnsafe.ReplaceAllString(name, "-"), "-")
	if name == "" {
		name = "replica"
	}
	if len(name) > 64 {
		name = name[:64]
	}
	return fmt.Sprintf("%s-%d-%d", name, os.Getpid(), seq)
}

// PartitionOf is the partition a subject key lands in with n partitions: the
// streams' subject transform partition(n,1) hashes the key token with
// FNV-1a 32 (TestPartitionOfMatchesTheServer).
func PartitionOf(key string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}

// assign divides partitions 0..n-1 between members: each partition to
// exactly one member, each member ⌊n/len⌋ or ⌈n/len⌉ of them (the ⌈⌉ to the
// longest-standing), and within those shares each partition to the member
// its rendezvous score ranks highest, so that a member joining or leaving
// moves few partitions. Every replica computes it from the same member list
// and so agrees on it without talking. It returns the partitions of each
// member ID, ascending.
func assign(service string, n int, members []Member) map[string][]int {
	out := make(map[string][]int, len(members))
	if len(members) == 0 || n <= 0 {
		return out
	}
	ms := slices.Clone(members)
	slices.SortFunc(ms, func(a, b Member) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	ms = slices.CompactFunc(ms, func(a, b Member) bool { return a.ID == b.ID })
	k := len(ms)
	keys := rankKeys(ms)
	capacity := make([]int, k)
	for i := range capacity {
		capacity[i] = n / k
		if i < n%k {
			capacity[i]++
		}
	}
	type pair struct {
		score uint64
		p, m  int
	}
	pairs := make([]pair, 0, n*k)
	for p := range n {
		for i := range ms {
			pairs = append(pairs, pair{rendezvous(service, p, keys[i]), p, i})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.p, b.p); c != 0 {
			return c
		}
		return cmp.Compare(a.m, b.m)
	})
	owner := make([]int, n)
	for p := range owner {
		owner[p] = -1
	}
	load := make([]int, k)
	for _, pr := range pairs {
		if owner[pr.p] >= 0 || load[pr.m] >= capacity[pr.m] {
			continue
		}
		owner[pr.p] = pr.m
		load[pr.m]++
	}
	for p, i := range owner {
		out[ms[i].ID] = append(out[ms[i].ID], p)
	}
	return out
}

// rankKeys names each member of ms (oldest first) for the rendezvous
// scores: by its Name, so that a replica restarted under the same name — a
// dispatcher's fixed host, a process under a supervisor — ranks the
// partitions as before and gets the same ones back once its previous
// record has expired (a dispatcher's sessions then stay on their host).
// Where several records share a name (the previous record of a restarted
// replica, not yet expired, or replicas on one host), only the newest is
// ranked by the name and the others by their ids.
func rankKeys(ms []Member) []string {
	newest := map[string]int{}
	for i, m := range ms {
		if m.Name != "" {
			newest[m.Name] = i
		}
	}
	keys := make([]string, len(ms))
	for i, m := range ms {
		keys[i] = "id:" + m.ID
		if m.Name != "" && newest[m.Name] == i {
			keys[i] = "name:" + m.Name
		}
	}
	return keys
}

// rendezvous scores member key id for partition p of service.
func rendezvous(service string, p int, id string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(service))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(p))
	_, _ = h.Write(b[:])
	_, _ = h.Write([]byte(id))
	// FNV's low bits mix poorly for inputs that differ only at the end;
	// finish with splitmix64's mixer.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Members lists the live replicas of service ("" for every service) from
// BucketMembers, oldest first.
func (c *Conn) Members(ctx context.Context, service string) ([]Member, error) {
	kv, err := c.js.KeyValue(ctx, BucketMembers)
	if err != nil {
		return nil, fmt.Errorf("bus: kv %s: %w", BucketMembers, err)
	}
	return readMembers(ctx, kv, service)
}

func readMembers(ctx context.Context, kv jetstream.KeyValue, service string) ([]Member, error) {
	filter := ">"
	if service != "" {
		filter = service + ".*"
	}
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("bus: read %s: %w", BucketMembers, err)
	}
	defer func() { _ = w.Stop() }()
	var out []Member
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: read %s: %w", BucketMembers, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("bus: read %s: watcher closed", BucketMembers)
			}
			if e == nil {
				sortMembers(out)
				return out, nil
			}
			var m Member
			if json.Unmarshal(e.Value(), &m) == nil && m.ID != "" {
				out = append(out, m)
			}
		}
	}
}

func sortMembers(ms []Member) {
	slices.SortFunc(ms, func(a, b Member) int {
		if c := cmp.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}

// membership is one runner's presence in BucketMembers: it announces the
// replica, renews the announcement every lease/3, follows the other
// replicas of its service, and reports each change of that view.
type membership struct {
	kv    jetstream.KeyValue
	lease time.Duration
	log   *slog.Logger

	mu   sync.Mutex
	self Member
	// views carries the latest view (self included); a newer one replaces
	// one not yet taken.
	views chan []Member
}

func newMembership(kv jetstream.KeyValue, lease time.Duration, self Member, log *slog.Logger) *membership {
	return &membership{kv: kv, lease: lease, self: self, log: log, views: make(chan []Member, 1)}
}

func (m *membership) record() (string, []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, _ := json.Marshal(m.self)
	return memberKey(m.self.Service, m.self.ID), b
}

// announce writes the replica's record now.
func (m *membership) announce(ctx context.Context) error {
	key, val := m.record()
	actx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := m.kv.Put(actx, key, val); err != nil {
		return fmt.Errorf("bus: announce %s: %w", key, err)
	}
	return nil
}

// setWorking records the partitions the replica pulls now.
func (m *membership) setWorking(ctx context.Context, working []int) {
	m.mu.Lock()
	m.self.Working = working
	m.mu.Unlock()
	if err := m.announce(ctx); err != nil {
		m.log.Warn("membership: announcing the partitions worked failed; the next renewal retries", "err", err)
	}
}

// leave removes the replica's record: the others take its partitions over
// at once.
func (m *membership) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	key, _ := m.record()
	if err := m.kv.Delete(ctx, key); err != nil {
		m.log.Warn("membership: leaving failed; the others take over when the lease ends", "err", err)
	}
}

// run announces the replica, renews it every lease/3 and follows the
// service's records until ctx ends. The view is read by a KV watch (joins,
// clean leaves and, through the bucket's expiry markers, leases ending),
// started afresh every lease so that nothing a watch missed outlives one
// lease.
func (m *membership) run(ctx context.Context) {
	renew := time.NewTicker(max(m.lease/3, 100*time.Millisecond))
	defer renew.Stop()
	failing := false
	for ctx.Err() == nil {
		if err := m.announce(ctx); err != nil {
			if !failing {
				m.log.Warn("membership: announcing this replica failed; retrying", "err", err)
				failing = true
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		failing = false
		m.watch(ctx, renew.C)
	}
}

// watch follows the records for one lease, renewing on every tick.
func (m *membership) watch(ctx context.Context, renew <-chan time.Time) {
	wctx, cancel := context.WithTimeout(ctx, m.lease)
	defer cancel()
	w, err := m.kv.Watch(wctx, m.self.Service+".*")
	if err != nil {
		m.log.Warn("membership: watch failed; retrying", "err", err)
		select {
		case <-wctx.Done():
		case <-time.After(time.Second):
		}
		return
	}
	defer func() { _ = w.Stop() }()
	view := map[string]Member{}
	live := false // the initial values have all arrived
	for {
		select {
		case <-wctx.Done():
			return
		case <-renew:
			if err := m.announce(ctx); err != nil {
				m.log.Warn("membership: renewal failed", "err", err)
			}
		case e, ok := <-w.Updates():
			if !ok {
				return
			}
			if e == nil {
				live = true
				m.publish(view)
				continue
			}
			id := strings.TrimPrefix(e.Key(), m.self.Service+".")
			switch e.Operation() {
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				delete(view, id)
			default:
				var rec Member
				if json.Unmarshal(e.Value(), &rec) != nil || rec.ID != id {
					continue
				}
				m.mu.Lock()
				mine := m.self.Incarnation
				m.mu.Unlock()
				if id == m.self.ID && rec.Incarnation != mine {
					m.log.Error("membership: another process announces this replica's id; give each replica its own name",
						"member", id)
				}
				view[id] = rec
			}
			if live {
				m.publish(view)
			}
		}
	}
}

// publish hands the runner the view, this replica always in it: a record
// that expired while this replica lives (it could not renew) does not make
// it give up its own partitions; the next renewal brings it back.
func (m *membership) publish(view map[string]Member) {
	ms := make([]Member, 0, len(view)+1)
	m.mu.Lock()
	self := m.self
	m.mu.Unlock()
	for id, rec := range view {
		if id != self.ID {
			ms = append(ms, rec)
		}
	}
	ms = append(ms, self)
	sortMembers(ms)
	select {
	case <-m.views:
	default:
	}
	m.views <- ms
}

// transformPartitions reads N from a partitioned stream's subject transform
// ({{partition(N,1)}}); 0 when there is none.
func transformPartitions(tr *jetstream.SubjectTransformConfig) int {
	if tr == nil {
		return 0
	}
	_, rest, ok := strings.Cut(tr.Destination, "{{partition(")
	if !ok {
		return 0
	}
	num, _, ok := strings.Cut(rest, ",")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(num))
	if err != nil {
		return 0
	}
	return n
}

// StreamPartitions is the partition count stream was provisioned with, or
// ErrNotFound when it does not exist.
func (c *Conn) StreamPartitions(ctx context.Context, stream string) (int, error) {
	s, err := c.js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("bus: stream %s: %w", stream, err)
	}
	return transformPartitions(s.CachedInfo().Config.SubjectTransform), nil
}

// ServicePartitions is how one consuming service works its stream.
type ServicePartitions struct {
	Service string
	Stream  string
	// Partitions is the stream's partition count (0: not provisioned).
	Partitions int
	// Pending counts the service's messages not yet delivered or not yet
	// acknowledged, over its partitions' consumers.
	Pending uint64
	// Members are its live replicas, oldest first.
	Members []Member
}

// PartitionStatus reports, per consumer group of t, the stream's partition
// count, what is pending and which replica works which partition.
func (c *Conn) PartitionStatus(ctx context.Context, t Topology) ([]ServicePartitions, error) {
	t.setDefaults()
	all, err := c.Members(ctx, "")
	if err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, err
	}
	var out []ServicePartitions
	for _, g := range t.Consumers {
		sp := ServicePartitions{Service: g.Service, Stream: g.Stream}
		n, err := c.StreamPartitions(ctx, g.Stream)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		sp.Partitions = n
		if sp.Pending, err = c.pending(ctx, g, n); err != nil {
			return nil, err
		}
		for _, m := range all {
			if m.Service == g.Service {
				sp.Members = append(sp.Members, m)
			}
		}
		out = append(out, sp)
	}
	return out, nil
}

// pending sums undelivered and unacknowledged messages over g's consumers of
// partitions 0..n-1.
func (c *Conn) pending(ctx context.Context, g ConsumerGroup, n int) (uint64, error) {
	var sum uint64
	for p := range n {
		cons, err := c.js.Consumer(ctx, g.Stream, ConsumerName(g.Service, p))
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			continue
		}
		if err != nil {
			return 0, fmt.Errorf("bus: consumer %s: %w", ConsumerName(g.Service, p), err)
		}
		info := cons.CachedInfo()
		sum += info.NumPending + uint64(info.NumAckPending)
	}
	return sum, nil
}
