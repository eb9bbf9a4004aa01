package bus_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

func TestDLQReplay(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(4))
	c := srv.Connect(t, "dlq")
	ctx := context.Background()

	var fixed atomic.Bool
	var got delivered
	h := bus.HandlerFunc(func(ctx context.Context, d *bus.Delivery) error {
		if !fixed.Load() {
			return bus.Permanent(errors.New("404 not found"))
		}
		return got.handler().Handle(ctx, d)
	})
	runRunner(t, c, fastSpec(bus.ServiceLedgerWriter, bus.StreamInbox, 4), h)

	subject := catalog.InboxSubject("github:octo/repo#15", catalog.WorkItemReply)
	if _, err := c.Publish(ctx, bus.Message{
		Subject: subject, MsgID: "slack:Ev1",
		Header: bus.Header{"ce-id": {"slack:Ev1"}, "ce-type": {"work-item.reply"}},
		Data:   []byte("body"),
	}); err != nil {
		t.Fatal(err)
	}
	var entries []bus.DLQEntry
	testkit.WaitWithin(t, 10*time.Second, "dead letter", func() bool {
		var err error
		entries, err = c.ListDLQ(ctx, 0)
		return err == nil && len(entries) == 1
	})
	e := entries[0]
	if e.CEID != "slack:Ev1" || e.MsgID != "slack:Ev1" || e.PublishSubject != subject ||
		e.Reason != "permanent: 404 not found" || e.Time.IsZero() || string(e.Data) != "body" {
		t.Fatalf("entry %+v", e)
	}

	fixed.Store(true)
	res, err := c.ReplayDLQ(ctx, e.Seq)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if res.MsgID != "slack:Ev1:replay:"+strconv.FormatUint(e.Seq, 10) || res.Subject != subject || res.PubAck.Duplicate {
		t.Fatalf("replay = %+v", res)
	}
	testkit.WaitWithin(t, 10*time.Second, "replayed message handled", func() bool { return len(got.get()) == 1 })
	d := got.get()[0]
	if d.MsgID != res.MsgID || d.Header.Get("ce-id") != "slack:Ev1" || string(d.Data) != "body" ||
		d.Header.Get(bus.HeaderDLQReason) != "" || d.Key != catalog.SubjectKey("github:octo/repo#15") {
		t.Fatalf("replayed delivery %+v", d)
	}
	if left, err := c.ListDLQ(ctx, 0); err != nil || len(left) != 0 {
		t.Fatalf("DLQ after replay: %d entries, %v", len(left), err)
	}
	if _, err := c.ReplayDLQ(ctx, e.Seq); !errors.Is(err, bus.ErrNoSuchDeadLetter) {
		t.Fatalf("second replay: %v, want ErrNoSuchDeadLetter", err)
	}
}
