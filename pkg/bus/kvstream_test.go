package bus

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestKVStreamConfigAsTheClientMakesIt: the stream an async bucket is
// provisioned as is the one nats.go's CreateKeyValue makes for the same
// bucket, but for its persist mode — so the client binds it as a bucket,
// and a nats.go that changes its buckets shows here first.
func TestKVStreamConfigAsTheClientMakesIt(t *testing.T) {
	t.Parallel()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	defer ns.Shutdown()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, b := range []Bucket{
		{Name: "marks", TTL: 72 * time.Hour, MaxBytes: 1 << 20, Async: true},
		{Name: "short", TTL: 30 * time.Second, MaxBytes: 1 << 20, Async: true},
	} {
		topo := Topology{Buckets: []Bucket{b}, Replicas: 1}
		cfg := topo.bucketConfigs()[0]
		kv, err := js.CreateKeyValue(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		s, err := js.Stream(ctx, "KV_"+kv.Bucket())
		if err != nil {
			t.Fatal(err)
		}
		made := s.CachedInfo().Config
		ours := kvStreamConfig(cfg, b)
		if ours.PersistMode != jetstream.AsyncPersistMode {
			t.Errorf("%s: persist mode %v, want async", b.Name, ours.PersistMode)
		}
		ours.PersistMode = made.PersistMode
		// What the server fills in on its own.
		ours.Retention, ours.NoAck = made.Retention, made.NoAck
		ours.Compression, ours.FirstSeq = made.Compression, made.FirstSeq
		ours.ConsumerLimits, ours.Metadata = made.ConsumerLimits, made.Metadata
		if got, want := fmt.Sprintf("%+v", ours), fmt.Sprintf("%+v", made); got != want {
			t.Errorf("%s: stream as provisioned\n%s\nas nats.go makes it\n%s", b.Name, got, want)
		}
		if topo.asyncBucket(b.Name) == nil {
			t.Errorf("%s: not written async on one node", b.Name)
		}
		if (Topology{Buckets: []Bucket{b}, Replicas: 3}).asyncBucket(b.Name) != nil {
			t.Errorf("%s: written async on three nodes, where JetStream refuses it", b.Name)
		}
	}
}
