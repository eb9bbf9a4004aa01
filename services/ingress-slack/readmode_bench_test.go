package ingressslack

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/socketfake"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// BenchmarkReadModes is what each reading mode costs a Slack reply on its
// way to the inbox, one message at a time: from Slack handing it over until
// it is stored in LOOP_INBOX — Socket Mode, the envelope sent until its ack
// (which leaves after the PubAck); the Events API, the signed POST until its
// 200 (likewise) — against a raw baseline, the same event published to the
// inbox by a plain client waiting for its PubAck. ns/op is the mean; p50-ms
// and p99-ms the percentiles. Poll mode is not measured: a message waits for
// the next read, up to channels.slack.read.intervalSeconds (30 s by
// default), which dwarfs what the read itself costs.
func BenchmarkReadModes(b *testing.B) {
	e := newEnv(b)
	s := e.start()
	e.sock.WaitConnected(b, 1, waitFor)
	e.waitReady(s)
	timed := func(b *testing.B, send func(i int)) {
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			start := time.Now()
			send(i)
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		slices.Sort(lat)
		pct := func(p float64) float64 {
			i := max(0, min(int(p*float64(len(lat))+0.5)-1, len(lat)-1))
			return float64(lat[i]) / float64(time.Millisecond)
		}
		b.ReportMetric(pct(0.50), "p50-ms")
		b.ReportMetric(pct(0.99), "p99-ms")
	}
	b.Run("socket", func(b *testing.B) {
		timed(b, func(int) {
			id := e.sock.Send(b, "events_api", socketfake.MessageEvent(testChannel, "UALICE", "over the socket", nextTS(), thread1))
			e.sock.WaitAck(b, id, waitFor)
		})
	})
	b.Run("events", func(b *testing.B) {
		timed(b, func(int) {
			if r := e.post(s, PathEvents, messageBody(fmt.Sprintf("EvBench%d", seq), reply("UALICE", thread1, "over HTTP"))); r.status != 200 {
				b.Fatalf("POST %s = %d %s", PathEvents, r.status, r.body)
			}
		})
	})
	b.Run("raw", func(b *testing.B) {
		timed(b, func(int) {
			ts := nextTS()
			ev := &loopv1.Event{Id: envelope.SlackMessageID(testChannel, ts), Source: source, Type: string(catalog.WorkItemReply),
				Subject: refOne, Time: envelope.NewTime(time.Now()), Actor: &loopv1.Actor{Github: "alice", Slack: "UALICE"},
				Conversation: &loopv1.Conversation{Channel: testChannel, ThreadTs: thread1, MessageTs: ts},
				Body:         &loopv1.Event_Reply{Reply: &loopv1.Reply{Text: "published"}}}
			m, err := envelope.ToMessage(ev, envelope.Inbox, "")
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), waitFor)
			defer cancel()
			if _, err := e.conn.Publish(ctx, bus.FromEnvelope(m)); err != nil {
				b.Fatal(err)
			}
		})
	})
}
