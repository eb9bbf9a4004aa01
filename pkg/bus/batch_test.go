package bus_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
)

// TestPublishAll: messages published together are each stored once and
// acknowledged in order; one already stored is reported a duplicate (its
// Nats-Msg-Id), and a full stream is ErrStreamFull as for Publish.
func TestPublishAll(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	topo := bustest.FastTopology(2)
	topo.InboxMaxBytes = 8 << 10
	srv.Provision(t, topo)
	c := srv.Connect(t, "pub-all")
	ctx := context.Background()
	if _, err := c.Publish(ctx, bus.Message{Subject: "loop.in.k1.t", MsgID: "a2", Data: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	var msgs []bus.Message
	for i := range 4 {
		msgs = append(msgs, bus.Message{Subject: fmt.Sprintf("loop.in.k%d.t", i), MsgID: fmt.Sprintf("a%d", i), Data: []byte("x")})
	}
	acks, err := c.PublishAll(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range acks {
		if a.Stream != bus.StreamInbox || a.Duplicate != (i == 2) {
			t.Errorf("ack %d = %+v, want stored in %s (a duplicate only for a2)", i, a, bus.StreamInbox)
		}
	}
	st, err := c.StreamStats(ctx, bus.StreamInbox)
	if err != nil {
		t.Fatal(err)
	}
	if st.Msgs != 4 {
		t.Errorf("inbox holds %d messages, want 4", st.Msgs)
	}
	if _, err := c.PublishAll(ctx, []bus.Message{{Subject: "loop.in.k.t", Data: []byte("x")}, msgs[0]}); !errors.Is(err, bus.ErrNoMsgID) {
		t.Errorf("a message without MsgID: %v, want ErrNoMsgID", err)
	}
	big := make([]byte, 3<<10)
	_, err = c.PublishAll(ctx, []bus.Message{
		{Subject: "loop.in.k.t", MsgID: "b1", Data: big}, {Subject: "loop.in.k.t", MsgID: "b2", Data: big},
		{Subject: "loop.in.k.t", MsgID: "b3", Data: big}, {Subject: "loop.in.k.t", MsgID: "b4", Data: big},
	})
	if !errors.Is(err, bus.ErrStreamFull) {
		t.Errorf("publishing past InboxMaxBytes: %v, want ErrStreamFull", err)
	}
}

// TestKVPutAllAndHas: keys written together are all there; Has reads any
// number of keys, present or not, in one call.
func TestKVPutAllAndHas(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	c := srv.Connect(t, "kv-all")
	ctx := context.Background()
	kv, err := c.KV(ctx, bus.BucketSeen)
	if err != nil {
		t.Fatal(err)
	}
	var entries []bus.KVEntry
	for i := range 20 {
		entries = append(entries, bus.KVEntry{Key: fmt.Sprintf("gh:issue-comment:%d", i), Value: []byte(fmt.Sprint(i))})
	}
	if failed, err := kv.PutAll(ctx, entries); err != nil || len(failed) != 0 {
		t.Fatalf("PutAll: %v (%d failed)", err, len(failed))
	}
	got, err := kv.Has(ctx, "gh:issue-comment:3", "gh:issue-comment:99", "gh:issue-comment:19")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "[true false true]" {
		t.Errorf("Has = %v, want [true false true]", got)
	}
	e, err := kv.Get(ctx, "gh:issue-comment:7")
	if err != nil || string(e.Value) != "7" {
		t.Errorf("Get after PutAll: %q, %v", e.Value, err)
	}
	if got, err := kv.Has(ctx); err != nil || len(got) != 0 {
		t.Errorf("Has of no key: %v, %v", got, err)
	}
}
