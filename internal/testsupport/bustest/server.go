// Package bustest runs a real JetStream server for tests and holds the bus
// conformance suite (RunConformance) that every consumer of package bus relies
// on. It never mocks the bus: every helper talks to an in-process nats-server
// (or, with LOOP_TEST_NATS_URL, to an external one).
//
// Like package bus it may import nats; nothing else in the module does.
package bustest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// EnvURL names the variable that points the helpers at an external server
// instead of an in-process one. The external server is wiped of the-loop's
// streams and buckets before every test that uses it, so never point it at
// anything but a scratch server, and do not run such tests in parallel.
const EnvURL = "LOOP_TEST_NATS_URL"

// Options configures StartServer.
type Options struct {
	// StoreDir is the JetStream store (default t.TempDir()).
	StoreDir string
	// Port is the TCP port (default -1: a free one).
	Port int
	// InProcessOnly ignores LOOP_TEST_NATS_URL (tests that restart the
	// server need one they own).
	InProcessOnly bool
	// Auth turns authorization on: every bus identity (bus.Identities) gets
	// an NKey user with its grant for Topology, and a client without a
	// credential is refused. Connect then connects as the operator;
	// ConnectAs as any identity. Implies InProcessOnly.
	Auth bool
	// Topology is what the grants name (default bus.DefaultTopology()).
	Topology *bus.Topology
	// SyncInterval syncs the store on an interval instead of on every
	// write (bus.EmbeddedOptions.SyncInterval): for benchmarks whose
	// subject is not the disk. Implies InProcessOnly.
	SyncInterval time.Duration
	// MaxStore caps JetStream's file storage (bus.EmbeddedOptions.MaxStore;
	// default 0: the server's own, three quarters of the free disk). The
	// topology's caps are reserved up front against it, so a test that
	// adds streams of its own beside them on a nearly full disk sets it.
	MaxStore int64
}

// Server is a JetStream server for one test.
type Server struct {
	mu       sync.Mutex
	emb      *bus.Embedded
	url      string
	storeDir string
	port     int
	external bool
	// seeds holds each identity's NKey seed when authorization is on.
	seeds    map[string][]byte
	users    []bus.User
	sync     time.Duration
	maxStore int64
}

// NewServer starts an in-process server (or uses LOOP_TEST_NATS_URL) that is
// shut down when t ends.
func NewServer(t TB) *Server {
	t.Helper()
	return StartServer(t, Options{})
}

// StartServer is NewServer with options.
func StartServer(t TB, opts Options) *Server {
	t.Helper()
	if u := os.Getenv(EnvURL); u != "" && !opts.InProcessOnly && !opts.Auth && opts.SyncInterval <= 0 {
		s := &Server{url: u, external: true}
		s.wipe(t)
		return s
	}
	if opts.StoreDir == "" {
		opts.StoreDir = t.TempDir()
	}
	if opts.Port == 0 {
		opts.Port = -1
	}
	s := &Server{storeDir: opts.StoreDir, port: opts.Port, sync: opts.SyncInterval, maxStore: opts.MaxStore}
	if opts.Auth {
		topo := bus.DefaultTopology()
		if opts.Topology != nil {
			topo = *opts.Topology
		}
		var err error
		if s.seeds, s.users, err = bus.NewUsers(topo); err != nil {
			t.Fatal(err)
		}
	}
	s.start(t)
	t.Cleanup(s.Shutdown)
	return s
}

func (s *Server) start(t TB) {
	t.Helper()
	emb, err := bus.StartEmbedded(context.Background(), bus.EmbeddedOptions{
		StoreDir:     s.storeDir,
		SyncInterval: s.sync,
		MaxStore:     s.maxStore,
		Port:         s.port,
		Users:        s.users,
	})
	if err != nil {
		t.Fatalf("bustest: start server: %v", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emb = emb
	s.url = emb.ClientURL()
	// Restarts must come back on the same port, or clients could not
	// reconnect to it.
	s.port = emb.Port()
}

// External reports whether the server is the external LOOP_TEST_NATS_URL.
func (s *Server) External() bool { return s.external }

// URL is the server's client URL.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// StoreDir is the in-process server's store ("" when external).
func (s *Server) StoreDir() string { return s.storeDir }

// Shutdown stops the in-process server (a no-op when external or stopped).
func (s *Server) Shutdown() {
	s.mu.Lock()
	emb := s.emb
	s.emb = nil
	s.mu.Unlock()
	if emb != nil {
		emb.Shutdown()
	}
}

// Restart shuts the in-process server down and starts it again on the same
// store dir and port, as after a crash-free restart of `the-loop up`.
// It skips the test when the server is external.
func (s *Server) Restart(t TB) {
	t.Helper()
	if s.external {
		t.Skip("bustest: cannot restart an external server")
	}
	s.Shutdown()
	s.start(t)
}

// Connect opens a TCP connection named name that reconnects quickly and is
// closed when t ends. TCP, not an in-process pipe, so that it survives
// Restart. With authorization on it connects as the operator.
func (s *Server) Connect(t TB, name string) *bus.Conn {
	t.Helper()
	return s.ConnectAs(t, bus.IdentityOperator, name)
}

// Auth reports whether the server runs with authorization on.
func (s *Server) Auth() bool { return s.seeds != nil }

// Seed is identity's NKey seed (nil without authorization).
func (s *Server) Seed(identity string) []byte { return s.seeds[identity] }

// Credentials is identity's credential (none without authorization).
func (s *Server) Credentials(identity string) bus.Credentials {
	if s.seeds == nil {
		return bus.Credentials{}
	}
	return bus.Credentials{Seed: s.seeds[identity], Setting: "bustest " + identity}
}

// ConnectAs is Connect with identity's credential (with authorization on).
func (s *Server) ConnectAs(t TB, identity, name string) *bus.Conn {
	t.Helper()
	o := bus.Options{
		URL:            s.URL(),
		Name:           name,
		ReconnectWait:  50 * time.Millisecond,
		PublishTimeout: 2 * time.Second,
	}
	if s.seeds != nil {
		o.Credentials, o.Identity = s.Credentials(identity), identity
	}
	c, err := bus.Connect(context.Background(), o)
	if err != nil {
		t.Fatalf("bustest: connect: %v", err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.WaitConnected(ctx); err != nil {
		t.Fatalf("bustest: connect: %v", err)
	}
	return c
}

// Signers are the identities' public keys (nil without authorization): what
// the operator's provisioning writes to the signers bucket.
func (s *Server) Signers(t TB) map[string]string {
	t.Helper()
	if s.seeds == nil {
		return nil
	}
	pubs := map[string]string{}
	for id, seed := range s.seeds {
		pub, err := bus.PublicKey(seed)
		if err != nil {
			t.Fatal(err)
		}
		pubs[id] = pub
	}
	return pubs
}

// Provision provisions topo through a short-lived connection. With
// authorization on it provisions as the operator does, the identities'
// public keys included (bus.Topology.Signers).
func (s *Server) Provision(t TB, topo bus.Topology) {
	t.Helper()
	if topo.Signers == nil {
		topo.Signers = s.Signers(t)
	}
	c := s.Connect(t, "bustest-provision")
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Provision(ctx, topo); err != nil {
		t.Fatalf("bustest: provision: %v", err)
	}
}

// FastTopology is a topology with timings short enough for tests: AckWait
// 2s, PinnedTTL 1s, MemberLease 3s, MaxDeliver 3, and n partitions.
func FastTopology(n int) bus.Topology {
	t := bus.DefaultTopology()
	t.Partitions = n
	t.AckWait = 2 * time.Second
	t.PinnedTTL = time.Second
	t.MemberLease = 3 * time.Second
	t.MaxDeliver = 3
	return t
}

// wipe deletes the-loop's streams and KV buckets from an external server.
func (s *Server) wipe(t TB) {
	t.Helper()
	nc, err := nats.Connect(s.url, nats.Name("bustest-wipe"))
	if err != nil {
		t.Fatalf("bustest: %s: %v", EnvURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("bustest: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	buckets := []string{bus.BucketMembers}
	for _, b := range bus.DefaultTopology().Buckets {
		buckets = append(buckets, b.Name)
	}
	names := js.StreamNames(ctx)
	var del []string
	for n := range names.Name() {
		if strings.HasPrefix(n, "LOOP_") || slices.Contains(buckets, strings.TrimPrefix(n, "KV_")) {
			del = append(del, n)
		}
	}
	if err := names.Err(); err != nil {
		t.Fatalf("bustest: list streams: %v", err)
	}
	for _, n := range del {
		if err := js.DeleteStream(ctx, n); err != nil {
			t.Fatalf("bustest: delete stream %s: %v", n, err)
		}
	}
}

// StartFromConfig starts an in-process nats-server from a nats.conf file, as
// a deployment runs it, with what cannot run in a test replaced: a free
// port, no monitoring port, the JetStream store in a temporary directory, no
// cluster routes (a cluster's peers are not there). What the test is about —
// authorization, limits, JetStream settings — stays as the file says. The
// server stops when t ends.
func StartFromConfig(t TB, confPath string) *Server {
	t.Helper()
	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		t.Fatalf("bustest: %s: %v", confPath, err)
	}
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.StoreDir = t.TempDir()
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.NoSigs, opts.NoLog = true, true
	opts.PidFile = ""
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("bustest: %s: %v", confPath, err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatalf("bustest: the server of %s did not start", confPath)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return &Server{url: srv.ClientURL(), external: true}
}

// Spread returns the first numbers i (from 1) whose work item ref(i) lands
// perPart in each of n partitions (bus.PartitionOf), ordered so that
// consecutive ones are in different partitions. Benchmarks use it to give
// every partition the same load: a partition with more work items than the
// others bounds any number of replicas.
func Spread(n, perPart int, ref func(i int) string) []int {
	byPart := make([][]int, n)
	for i, filled := 1, 0; filled < n; i++ {
		p := bus.PartitionOf(catalog.SubjectKey(ref(i)), n)
		if len(byPart[p]) < perPart {
			byPart[p] = append(byPart[p], i)
			if len(byPart[p]) == perPart {
				filled++
			}
		}
	}
	var out []int
	for r := range perPart {
		for p := range n {
			out = append(out, byPart[p][r])
		}
	}
	return out
}

// benchProbe reports whether a benchmark run of n iterations is the
// one-iteration run the testing package makes before a run with a fixed
// count (-benchtime=Nx, N > 1). A benchmark whose every round is costly to
// set up returns at once from it: the counted run follows, and only its
// figures are reported.
func benchProbe(n int) bool {
	if n != 1 {
		return false
	}
	f := flag.Lookup("test.benchtime")
	if f == nil {
		return false
	}
	v := f.Value.String()
	return strings.HasSuffix(v, "x") && v != "1x"
}

// ReplicaScaling runs round with 1 to 4 replicas as sub-benchmarks
// "replicas=N" and reports each one's events/s, its ratio to one replica
// measured in the same run (x-1-replica, which make bench checks) and the
// busiest replica's share (max-share). round returns events/s and that
// share for n replicas. iterations returns a benchmark's b.N (a field, which
// no interface can name).
func ReplicaScaling[B Bench[B]](b B, iterations func(B) int, round func(b B, n int) (rate, share float64)) {
	var one float64 // events/s with one replica, this run
	for n := 1; n <= 4; n++ {
		b.Run(fmt.Sprintf("replicas=%d", n), func(b B) {
			if benchProbe(iterations(b)) {
				return
			}
			rate, share := round(b, n)
			if n == 1 {
				one = rate
			}
			b.ReportMetric(rate, "events/s")
			if one > 0 {
				b.ReportMetric(rate/one, "x-1-replica")
			}
			b.ReportMetric(share, "max-share")
		})
	}
}

// Shared reports whether the k replicas listed in ms work the n partitions
// as their division gives them out: each partition worked by exactly one,
// each replica ⌊n/k⌋ or ⌈n/k⌉ of them — none still waiting for its share,
// none still handing one over. A replica that just joined already counts
// in ms while the others still work its share, which a check of the
// partitions alone would take for settled.
func Shared(ms []bus.Member, n, k int) bool {
	if len(ms) != k || k == 0 {
		return false
	}
	seen := make([]bool, n)
	for _, m := range ms {
		if len(m.Working) < n/k || len(m.Working) > (n+k-1)/k {
			return false
		}
		for _, p := range m.Working {
			if p < 0 || p >= n || seen[p] {
				return false
			}
			seen[p] = true
		}
	}
	return !slices.Contains(seen, false)
}
