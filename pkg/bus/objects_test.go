package bus_test

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
)

func TestObjects(t *testing.T) {
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(2))
	conn := srv.Connect(t, "objects")
	ctx := context.Background()
	big := bytes.Repeat([]byte("0123456789abcdef"), 256<<10) // 4 MiB: over the 1 MiB message limit
	ref, err := conn.PutObject(ctx, bus.ObjectPayloads, "sha-1", big)
	if err != nil {
		t.Fatal(err)
	}
	if ref != "payloads/sha-1" {
		t.Errorf("ref = %q", ref)
	}
	if _, err := conn.PutObject(ctx, bus.ObjectPayloads, "sha-1", big); err != nil {
		t.Fatalf("a second put of the same name: %v", err)
	}
	got, err := conn.GetObject(ctx, ref)
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GetObject: %d bytes, %v", len(got), err)
	}
	if _, err := conn.GetObject(ctx, "payloads/nope"); !errors.Is(err, bus.ErrNotFound) {
		t.Errorf("missing object: %v, want ErrNotFound", err)
	}
	if _, err := conn.GetObject(ctx, "no-slash"); err == nil {
		t.Error("a malformed reference was accepted")
	}
}
