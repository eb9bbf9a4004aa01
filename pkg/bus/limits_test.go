package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
)

// TestProvisionCapsEveryStream: every stream Provision creates — the five
// of the loop and the ones behind the KV buckets and the object store — has
// a byte cap, with the discard policy decision 035 gives it. Before the
// caps, only LOOP_INBOX had one: a flood of refusals written to LOOP_LOG
// could fill the disk the inbox shares.
func TestProvisionCapsEveryStream(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, bustest.Options{InProcessOnly: true})
	topo := bustest.FastTopology(2)
	srv.Provision(t, topo)
	def := bus.DefaultTopology()

	nc, err := nats.Connect(srv.URL())
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
	want := map[string]struct {
		max     int64
		discard jetstream.DiscardPolicy
	}{
		bus.StreamInbox:      {def.InboxMaxBytes, jetstream.DiscardNew},
		bus.StreamEvents:     {def.EventsMaxBytes, jetstream.DiscardOld},
		bus.StreamDLQ:        {def.DLQMaxBytes, jetstream.DiscardNew},
		bus.StreamLog:        {def.LogMaxBytes, jetstream.DiscardOld},
		bus.StreamAdvisories: {def.AdvisoryMaxBytes, jetstream.DiscardOld},
	}
	var reserved int64
	seen := map[string]bool{}
	streams := js.ListStreams(ctx)
	for info := range streams.Info() {
		cfg := info.Config
		seen[cfg.Name] = true
		reserved += cfg.MaxBytes
		if cfg.MaxBytes <= 0 {
			t.Errorf("stream %s has no byte cap (MaxBytes %d)", cfg.Name, cfg.MaxBytes)
		}
		if w, ok := want[cfg.Name]; ok {
			if cfg.MaxBytes != w.max || cfg.Discard != w.discard {
				t.Errorf("stream %s: MaxBytes %d discard %v, want %d %v", cfg.Name, cfg.MaxBytes, cfg.Discard, w.max, w.discard)
			}
		}
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("stream %s not provisioned", name)
		}
	}
	for _, b := range topo.Buckets {
		if !seen["KV_"+b.Name] {
			t.Errorf("bucket %s not provisioned", b.Name)
		}
	}
	for _, o := range topo.Objects {
		if !seen["OBJ_"+o.Name] {
			t.Errorf("object store %s not provisioned", o.Name)
		}
	}
	// On a single server every cap is reserved up front: the defaults must
	// fit a 10 GB max_file_store (deploy/nats/nats.conf) with room to spare.
	if limit := int64(10e9) * 8 / 10; reserved > limit {
		t.Errorf("the caps reserve %d bytes, more than 80%% of a 10 GB store", reserved)
	}
}

// TestTopologyCapsDefaultsDoNotAlias: a caller's bucket list is copied when
// its zero caps are filled in, never written through.
func TestTopologyCapsDefaultsDoNotAlias(t *testing.T) {
	mine := []bus.Bucket{{Name: "x"}}
	srv := bustest.StartServer(t, bustest.Options{InProcessOnly: true})
	topo := bustest.FastTopology(1)
	topo.Buckets = mine
	topo.BucketMaxBytes = 64 << 10
	srv.Provision(t, topo)
	if mine[0].MaxBytes != 0 {
		t.Errorf("Provision wrote %d into the caller's bucket list", mine[0].MaxBytes)
	}
	c := srv.Connect(t, "caps")
	kv, err := c.KV(context.Background(), "x")
	if err != nil {
		t.Fatal(err)
	}
	// A value within the cap is stored, one over it refused.
	if _, err := kv.Put(context.Background(), "small", []byte(strings.Repeat("x", 1<<10))); err != nil {
		t.Fatalf("a 1 KiB value in a 64 KiB bucket: %v", err)
	}
	if _, err := kv.Put(context.Background(), "big", []byte(strings.Repeat("x", 100<<10))); err == nil {
		t.Error("a 100 KiB value was stored in a bucket capped at 64 KiB")
	}
}

// TestWrittenWithoutASyncEach: on one node LOOP_LOG and the seen bucket
// are the two stores written without a sync per write (decisions 051, 090)
// — every other stream keeps the server's sync_interval — and one
// provisioned before that (persist mode is fixed at creation) keeps its mode
// while the rest of its configuration still converges.
func TestWrittenWithoutASyncEach(t *testing.T) {
	t.Parallel()
	srv := bustest.StartServer(t, bustest.Options{InProcessOnly: true})
	nc, err := nats.Connect(srv.URL())
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
	// An older store: LOOP_LOG and the seen bucket as they used to be created.
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: bus.StreamLog, Subjects: []string{"loop.log.>"},
		Storage: jetstream.FileStorage, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketSeen, MaxBytes: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	topo := bustest.FastTopology(2)
	srv.Provision(t, topo)
	wantBytes := map[string]int64{bus.StreamLog: bus.DefaultTopology().LogMaxBytes, "KV_" + bus.BucketSeen: 2 * bus.DefaultTopology().BucketMaxBytes}
	for name, capBytes := range wantBytes {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if cfg := s.CachedInfo().Config; cfg.PersistMode != jetstream.DefaultPersistMode || cfg.MaxBytes != capBytes {
			t.Errorf("%s provisioned before: persist mode %v, max bytes %d; want its own mode kept and the cap (%d) converged", name, cfg.PersistMode, cfg.MaxBytes, capBytes)
		}
		if err := js.DeleteStream(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	srv.Provision(t, topo)
	for info := range js.ListStreams(ctx).Info() {
		want := jetstream.DefaultPersistMode
		if _, ok := wantBytes[info.Config.Name]; ok {
			want = jetstream.AsyncPersistMode
		}
		if info.Config.PersistMode != want {
			t.Errorf("stream %s: persist mode %v, want %v", info.Config.Name, info.Config.PersistMode, want)
		}
	}
	// Still a bucket to the client: a mark is stored, read and refused twice.
	kv, err := js.KeyValue(ctx, bus.BucketSeen)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "mark-1", []byte("m")); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "mark-1", []byte("m")); !errors.Is(err, jetstream.ErrKeyExists) {
		t.Errorf("second create of a mark: %v, want ErrKeyExists", err)
	}
	if e, err := kv.Get(ctx, "mark-1"); err != nil || string(e.Value()) != "m" {
		t.Errorf("mark read back: %v, %v", e, err)
	}
	// The stream is the one nats.go makes for the same bucket but for its
	// persist mode, so a nats.go that changes its buckets shows here first.
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "as-the-client-makes-it", TTL: 72 * time.Hour,
		MaxBytes: 2 * bus.DefaultTopology().BucketMaxBytes, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	made, err := js.Stream(ctx, "KV_as-the-client-makes-it")
	if err != nil {
		t.Fatal(err)
	}
	seen, err := js.Stream(ctx, "KV_"+bus.BucketSeen)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := seen.CachedInfo().Config, made.CachedInfo().Config
	ours.Name, ours.Subjects, ours.PersistMode = theirs.Name, theirs.Subjects, theirs.PersistMode
	ours.Metadata = theirs.Metadata // the server's: the API level each needs
	if got, want := fmt.Sprintf("%+v", ours), fmt.Sprintf("%+v", theirs); got != want {
		t.Errorf("seen bucket's stream\n%s\nas nats.go makes it\n%s", got, want)
	}
}
