package ingressslack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/webhook"
)

// countingBody is a request body that counts the reads of it.
type countingBody struct {
	io.Reader
	reads atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return b.Reader.Read(p)
}

func (b *countingBody) Close() error { return nil }

// slackRequest is a request to path carrying body, with the signature
// headers given ("" leaves one out).
func slackRequest(path string, body io.Reader, length int64, ts, sig string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, path, body)
	r.ContentLength = length
	r.Header.Set("Content-Type", "application/json")
	if ts != "" {
		r.Header.Set("X-Slack-Request-Timestamp", ts)
	}
	if sig != "" {
		r.Header.Set("X-Slack-Signature", sig)
	}
	return r
}

func rejected(s *svc, reason string) float64 {
	return testutil.ToFloat64(s.m.rejected.WithLabelValues(reason))
}

// TestEventsRefusedBeforeReadingBody: on both endpoints, a missing or
// malformed signature or timestamp, a timestamp outside the 5 minutes, or an
// announced size over the cap is refused before one byte of the body is
// read, and counted by reason. The whole body (up to 1 MiB) was read first.
func TestEventsRefusedBeforeReadingBody(t *testing.T) {
	e, s := started(t)
	body := messageBody("EvEarly", reply("UALICE", thread1, "hi"))
	now := strconv.FormatInt(time.Now().Unix(), 10)
	stale := strconv.FormatInt(time.Now().Add(-6*time.Minute).Unix(), 10)
	future := strconv.FormatInt(time.Now().Add(6*time.Minute).Unix(), 10)
	good := sign(testSecret, now, body)
	cases := []struct {
		name, ts, sig string
		length        int64
		status        int
		reason        string
	}{
		{"no signature", now, "", int64(len(body)), 401, refusedHeaders},
		{"no timestamp", "", good, int64(len(body)), 401, refusedHeaders},
		{"no headers", "", "", int64(len(body)), 401, refusedHeaders},
		{"not v0", now, "v1=" + good[3:], int64(len(body)), 401, refusedHeaders},
		{"not hex", now, "v0=" + strings.Repeat("z", 64), int64(len(body)), 401, refusedHeaders},
		{"short", now, good[:len(good)-1], int64(len(body)), 401, refusedHeaders},
		{"long", now, good + "0", int64(len(body)), 401, refusedHeaders},
		{"timestamp not a number", "1700000000.5", good, int64(len(body)), 401, refusedHeaders},
		{"stale timestamp", stale, sign(testSecret, stale, body), int64(len(body)), 401, refusedStale},
		{"future timestamp", future, sign(testSecret, future, body), int64(len(body)), 401, refusedStale},
		{"announced size over the cap", now, good, 1<<20 + 1, 413, refusedTooLarge},
	}
	for _, c := range cases {
		for _, path := range []string{PathEvents, PathInteractions} {
			before := rejected(s, c.reason)
			b := &countingBody{Reader: bytes.NewReader(body)}
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, slackRequest(path, b, c.length, c.ts, c.sig))
			if w.Code != c.status {
				t.Errorf("%s on %s: %d, want %d", c.name, path, w.Code, c.status)
			}
			if n := b.reads.Load(); n != 0 {
				t.Errorf("%s on %s: the body was read %d times before the refusal", c.name, path, n)
			}
			if got := rejected(s, c.reason) - before; got != 1 {
				t.Errorf("%s on %s: %v refusals counted as %s, want 1", c.name, path, got, c.reason)
			}
		}
	}
	// The same body, signed now, is Slack's.
	if r := e.post(s, PathEvents, body); r.status != 200 {
		t.Errorf("correctly signed: %d, want 200", r.status)
	}
}

// heldRequest is a signed request whose body the test feeds by hand: the
// handler holds its slot until release.
type heldRequest struct {
	w    *httptest.ResponseRecorder
	pw   *io.PipeWriter
	body []byte
	done chan struct{}
}

// holdRequest starts a signed request to path and returns once the handler
// has read the first byte of its body.
func holdRequest(t *testing.T, h http.Handler, path string, body []byte) *heldRequest {
	t.Helper()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	pr, pw := io.Pipe()
	r := slackRequest(path, pr, int64(len(body)), ts, sign(testSecret, ts, body))
	p := &heldRequest{w: httptest.NewRecorder(), pw: pw, body: body, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		h.ServeHTTP(p.w, r)
	}()
	// A pipe write returns only once the reader took the bytes.
	if _, err := pw.Write(body[:1]); err != nil {
		t.Fatalf("the handler never read the body: %v", err)
	}
	return p
}

// release sends the rest of the body and returns the status.
func (p *heldRequest) release(t *testing.T) int {
	t.Helper()
	if _, err := p.pw.Write(p.body[1:]); err != nil {
		t.Fatal(err)
	}
	p.pw.Close()
	<-p.done
	return p.w.Code
}

// TestEventsConcurrencyCap: with every slot held, one more signed request is
// answered 503 with Retry-After at once, before its body is read, and
// counted; once a slot frees, requests are served again. There was no cap.
func TestEventsConcurrencyCap(t *testing.T) {
	e := newEnv(t)
	s := e.start(func(_ *Config, o *Options) { o.MaxConcurrent = 2 })
	e.waitReady(s)
	h := s.Handler()
	a := holdRequest(t, h, PathEvents, messageBody("EvCap1", reply("UALICE", thread1, "one")))
	b := holdRequest(t, h, PathEvents, messageBody("EvCap2", reply("UALICE", thread1, "two")))
	if got := metric(t, s.m.inflight); got != 2 {
		t.Errorf("in flight %v, want 2", got)
	}
	third := messageBody("EvCap3", reply("UALICE", thread1, "three"))
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	cb := &countingBody{Reader: bytes.NewReader(third)}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, slackRequest(PathEvents, cb, int64(len(third)), ts, sign(testSecret, ts, third)))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("over the cap: %d (Retry-After %q), want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if n := cb.reads.Load(); n != 0 {
		t.Errorf("a request over the cap had its body read %d times", n)
	}
	if got := rejected(s, refusedOverloaded); got != 1 {
		t.Errorf("over-capacity refusals counted %v, want 1", got)
	}
	if code := a.release(t); code != http.StatusOK {
		t.Errorf("held request 1: %d, want 200", code)
	}
	if r := e.post(s, PathEvents, third); r.status != http.StatusOK {
		t.Errorf("after a slot freed: %d, want 200", r.status)
	}
	if code := b.release(t); code != http.StatusOK {
		t.Errorf("held request 2: %d, want 200", code)
	}
}

// TestEventsRefusalsCountedNotLogged (issue 26): a thousand refused requests
// — unsigned, wrongly signed, stale, oversized, malformed — are a thousand
// in loop_ingress_slack_rejected_total and one webhook.rejected record per
// reason, never a log line each; after the interval the records account for
// every refusal. Every refusal was a log line of its own.
func TestEventsRefusalsCountedNotLogged(t *testing.T) {
	clock := ghfake.NewManualClock(time.Now())
	e := newEnv(t)
	s := e.start(func(_ *Config, o *Options) { o.Now = clock.Now })
	e.waitReady(s)
	h := s.Handler()
	body := messageBody("EvRefused", reply("UALICE", thread1, "hi"))
	at := func() string { return strconv.FormatInt(clock.Now().Unix(), 10) }
	kinds := []struct {
		reason string
		req    func() *http.Request
	}{
		{refusedHeaders, func() *http.Request {
			return slackRequest(PathEvents, bytes.NewReader(body), int64(len(body)), at(), "")
		}},
		{refusedSignature, func() *http.Request {
			return slackRequest(PathEvents, bytes.NewReader(body), int64(len(body)), at(), sign("not-the-secret", at(), body))
		}},
		{refusedStale, func() *http.Request {
			old := strconv.FormatInt(clock.Now().Add(-time.Hour).Unix(), 10)
			return slackRequest(PathInteractions, bytes.NewReader(body), int64(len(body)), old, sign(testSecret, old, body))
		}},
		{refusedTooLarge, func() *http.Request {
			return slackRequest(PathEvents, bytes.NewReader(body), 2<<20, at(), sign(testSecret, at(), body))
		}},
		{refusedMalformed, func() *http.Request {
			junk := []byte("not json")
			return slackRequest(PathEvents, bytes.NewReader(junk), int64(len(junk)), at(), sign(testSecret, at(), junk))
		}},
	}
	mark := e.logs.Len()
	want := map[string]int{}
	for i := range 1000 {
		k := kinds[i%len(kinds)]
		w := httptest.NewRecorder()
		h.ServeHTTP(w, k.req())
		if w.Code < 400 {
			t.Fatalf("bad request %d (%s) answered %d", i, k.reason, w.Code)
		}
		want[k.reason]++
	}
	total := 0.0
	for reason, n := range want {
		if got := rejected(s, reason); got != float64(n) {
			t.Errorf("counter for %s = %v, want %d", reason, got, n)
		}
		total += rejected(s, reason)
	}
	if total != 1000 {
		t.Errorf("counters sum to %v, want 1000", total)
	}
	if n := len(e.logs.Since(mark, webhook.RecordType)); n != len(want) {
		t.Errorf("1000 refusals wrote %d webhook.rejected records, want %d (one per reason)", n, len(want))
	}
	for _, r := range e.logs.Since(mark) {
		if r["event"] != webhook.RecordType && r["reason"] != nil {
			t.Errorf("a refusal was logged on its own: %v", r)
		}
	}
	clock.Advance(time.Minute)
	h.ServeHTTP(httptest.NewRecorder(), kinds[0].req())
	want[refusedHeaders]++
	s.refusals.Flush(context.Background())
	counted := map[string]int{}
	recs := e.logs.Since(mark, webhook.RecordType)
	for _, r := range recs {
		if r["via"] != viaEvents {
			t.Errorf("a refusal wrote %v", r)
			continue
		}
		n, _ := strconv.Atoi(fmt.Sprint(r["count"]))
		counted[fmt.Sprint(r["reason"])] += n
	}
	if len(recs) > 2*len(want) {
		t.Errorf("1001 refusals wrote %d log records, want at most %d", len(recs), 2*len(want))
	}
	if fmt.Sprint(counted) != fmt.Sprint(want) {
		t.Errorf("records count %v, want %v", counted, want)
	}
	t.Logf("1001 refusals of %d reasons: %d log records", len(want), len(recs))
}

// TestUnsignedFloodCannotStarveSlack (issue 26): eight unsigned 1 MiB posts
// and eight posts with a fresh timestamp and a well-formed but wrong
// signature, announcing 1 MiB, sending 512 KiB, then a KiB every 100 ms, at
// once. The unsigned are refused before their bodies are read; the wrongly
// signed hold room only for what they sent; meanwhile a signed event is
// answered 200 and published; then the tricklers are cut off (408) and their
// room comes back. Every request was read whole (1 MiB) before its signature
// was looked at, and nothing capped how many.
func TestUnsignedFloodCannotStarveSlack(t *testing.T) {
	e := newEnv(t)
	// A floor of 5 s rather than 2 s, so that on a loaded machine the
	// eight are surely all inside while the event is sent.
	s := e.start(func(_ *Config, o *Options) { o.BodyPace.Floor = 5 * time.Second })
	e.waitReady(s)
	s.bodies.ResetPeak()
	start := time.Now()
	ts := strconv.FormatInt(time.Now().Unix(), 10)
	var tricklers []*testkit.SlowPost
	for i := range 8 {
		p, err := testkit.StartSlowPost(s.http.URL+PathEvents, http.Header{
			"Content-Type": {"application/json"}, "X-Slack-Request-Timestamp": {ts},
			"X-Slack-Signature": {sign("not-the-secret", ts, []byte(strconv.Itoa(i)))},
		}, 1<<20, 512<<10, 1<<10, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		tricklers = append(tricklers, p)
	}
	unsigned := make([]string, 8)
	var wg sync.WaitGroup
	for i := range unsigned {
		wg.Go(func() {
			req, err := http.NewRequest(http.MethodPost, s.http.URL+PathEvents, bytes.NewReader(make([]byte, 1<<20)))
			if err != nil {
				unsigned[i] = err.Error()
				return
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil { // refused while the client was still sending
				unsigned[i] = "closed"
				return
			}
			resp.Body.Close()
			unsigned[i] = strconv.Itoa(resp.StatusCode)
		})
	}
	testkit.WaitFor(t, "the eight tricklers to hold their first 512 KiB", func() bool {
		return metric(t, s.m.inflight) == 8 && s.bodies.Held() >= 8*(512<<10)
	})

	sent := time.Now()
	r := e.post(s, PathEvents, messageBody("EvFlood", reply("UALICE", thread1, "said during the flood")))
	answered := time.Since(sent)
	if r.status != http.StatusOK {
		t.Errorf("the signed event during the flood: %d %q, want 200", r.status, r.body)
	}
	if n := metric(t, s.m.inflight); n != 8 {
		t.Errorf("tricklers in flight when the event was answered: %v, want 8", n)
	}
	wg.Wait()
	for i, u := range unsigned {
		if u != "401" && u != "closed" {
			t.Errorf("unsigned post %d: %s, want 401", i, u)
		}
	}

	var cut []string
	for i, p := range tricklers {
		code, err := p.Wait(testkit.Patience)
		if err != nil && code == 0 && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Errorf("trickler %d: %v", i, err)
		} else if err == nil && code != http.StatusRequestTimeout {
			t.Errorf("trickler %d answered %d, want 408", i, code)
		}
		cut = append(cut, strconv.Itoa(code))
	}
	took := time.Since(start)
	testkit.WaitFor(t, "the tricklers' room to come back", func() bool { return s.bodies.Held() == 0 })
	if got := rejected(s, refusedSlow); got != 8 {
		t.Errorf("slow-body refusals counted %v, want 8", got)
	}
	if got := rejected(s, refusedHeaders); got != 8 {
		t.Errorf("bad-signature-headers refusals counted %v, want 8", got)
	}
	peak := s.bodies.Peak()
	t.Logf("signed event answered %d in %v during the flood; 8 unsigned 1 MiB posts %v; 8 tricklers held at most %d KiB of the %d MiB budget and were cut within %v: %v",
		r.status, answered.Round(time.Millisecond), unsigned, peak>>10, s.bodies.Size()>>20, took.Round(100*time.Millisecond), cut)
	if peak > 6<<20 {
		t.Errorf("the flood held %d KiB of the budget, want what the tricklers sent (about 4.5 MiB)", peak>>10)
	}
}
