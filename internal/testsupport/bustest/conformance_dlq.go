package bustest

// Dead letters: a poison message after MaxDeliver, a permanent failure at
// once, each with its reason.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/bus"
)

func dlqHarness(t TB, opts ConformanceOptions) (*harness, *recorder, func(d *bus.Delivery) error) {
	h := newHarness(t, opts, Options{}, nil)
	var rc recorder
	fail := func(d *bus.Delivery) error {
		switch key, _ := parseData(d.Data); key {
		case "poison":
			return errors.New("boom\nsecond line")
		case "permanent":
			return bus.Permanent(errors.New("422 unprocessable"))
		}
		return nil
	}
	return h, &rc, fail
}

func findDLQ(t TB, c *bus.Conn, ceID string) (bus.DLQEntry, bool) {
	t.Helper()
	es, err := c.ListDLQ(context.Background(), 0)
	if err != nil {
		t.Fatalf("list dlq: %v", err)
	}
	for _, e := range es {
		if e.CEID == ceID {
			return e, true
		}
	}
	return bus.DLQEntry{}, false
}

func checkDLQEntry(t TB, h *harness, e bus.DLQEntry, id, key string, deliveries uint64, reason string) {
	t.Helper()
	if e.MsgID != id || e.Deliveries != deliveries || !strings.Contains(e.Reason, reason) ||
		e.Stream != h.opts.Stream || !strings.HasPrefix(e.Consumer, h.opts.Service+"-p") ||
		e.PublishSubject != h.subject(key) || e.Header.Get("traceparent") != "00-"+id ||
		e.StreamSeq == 0 || strings.ContainsAny(e.Reason, "\r\n") {
		t.Fatalf("dlq entry %+v; want id %s, %d deliveries, reason containing %q, subject %s",
			e, id, deliveries, reason, h.subject(key))
	}
}

func testPoison(t TB, opts ConformanceOptions) {
	h, rc, fail := dlqHarness(t, opts)
	h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", fail))
	h.publish("poison", 0, "gh:poison")
	h.publish("poison", 1, "gh:poison-next") // same key: must not wait forever behind it
	var e bus.DLQEntry
	testkit.WaitWithin(t, 20*time.Second, "poison message in the DLQ", func() bool {
		var found bool
		e, found = findDLQ(t, h.pub, "gh:poison")
		return found
	})
	max := uint64(h.topo.MaxDeliver)
	checkDLQEntry(t, h, e, "gh:poison", "poison", max, fmt.Sprintf("max deliveries (%d): boom", max))
	if n := rc.count(func(r record) bool { return r.msgID == "gh:poison" }); n != int(max) {
		t.Fatalf("poison handled %d times, want MaxDeliver=%d", n, max)
	}
	// The next message of the same key was delivered after the poison one,
	// also failed MaxDeliver times, and is dead-lettered too: the partition
	// moved on.
	testkit.WaitWithin(t, 20*time.Second, "the following message processed", func() bool {
		_, found := findDLQ(t, h.pub, "gh:poison-next")
		return found
	})
	if opts.Stream == bus.StreamInbox {
		testkit.WaitWithin(t, 5*time.Second, "dead letters removed from the inbox", func() bool {
			st, err := h.pub.StreamStats(context.Background(), opts.Stream)
			return err == nil && st.Msgs == 0
		})
	}
	testkit.WaitWithin(t, 5*time.Second, "terminated advisories kept as the safety net", func() bool {
		st, err := h.pub.StreamStats(context.Background(), bus.StreamAdvisories)
		return err == nil && st.Msgs >= 2
	})
}

func testPermanent(t TB, opts ConformanceOptions) {
	h, rc, fail := dlqHarness(t, opts)
	h.start(h.srv.Connect(t, "r1"), h.spec(), rc.handler("r1", fail))
	h.publish("permanent", 0, "gh:perm")
	h.publish("permanent-ok", 0, "gh:after")
	var e bus.DLQEntry
	testkit.WaitWithin(t, 10*time.Second, "permanent failure in the DLQ", func() bool {
		var found bool
		e, found = findDLQ(t, h.pub, "gh:perm")
		return found
	})
	checkDLQEntry(t, h, e, "gh:perm", "permanent", 1, "permanent: 422 unprocessable")
	testkit.WaitWithin(t, 10*time.Second, "the other message handled", func() bool { return rc.count(ok) == 1 })
	if n := rc.count(func(r record) bool { return r.msgID == "gh:perm" }); n != 1 {
		t.Fatalf("permanent failure handled %d times, want 1", n)
	}
}
