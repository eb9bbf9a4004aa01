package ingressgithub

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/the-loop/bus/internal/testsupport/testkit"

	"github.com/the-loop/bus/pkg/eventlog"
	service "github.com/the-loop/bus/pkg/service"
	"github.com/the-loop/bus/pkg/webhook"
)

// unsignedPosts sends n concurrent requests of body with a well-formed but
// wrong signature straight to the handler and returns the bytes the process
// allocated meanwhile and the statuses.
func unsignedPosts(t testing.TB, h http.Handler, body []byte, n int) (allocated uint64, codes []int) {
	t.Helper()
	bad := "sha256=" + strings.Repeat("0", 64)
	reqs := make([]*http.Request, n)
	for i := range reqs {
		r := httptest.NewRequest(http.MethodPost, WebhookPath, bytes.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("X-GitHub-Event", "issues")
		r.Header.Set("X-GitHub-Delivery", "unsigned")
		r.Header.Set("X-Hub-Signature-256", bad)
		reqs[i] = r
	}
	codes = make([]int, n)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for i, r := range reqs {
		wg.Go(func() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			codes[i] = w.Code
		})
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, codes
}

// TestUnsignedLargePostsBounded (attack 7): eight concurrent 24 MiB posts
// with a wrong signature are refused without the process allocating their
// bodies over and over. Reading each whole body with io.ReadAll before
// checking the signature allocated about 415 MiB for eight.
func TestUnsignedLargePostsBounded(t *testing.T) {
	e := newEnvBare(t)
	body := bytes.Repeat([]byte("x"), 24<<20)
	h := e.svc.Handler()
	for round := range 2 {
		allocated, codes := unsignedPosts(t, h, body, 8)
		for i, c := range codes {
			if c != http.StatusUnauthorized && c != http.StatusServiceUnavailable {
				t.Errorf("round %d, request %d: %d, want 401 or 503", round, i, c)
			}
		}
		t.Logf("round %d: 8 concurrent unsigned 24 MiB posts allocated %.1f MiB (statuses %v)", round, float64(allocated)/(1<<20), codes)
		if allocated > 100<<20 {
			t.Errorf("round %d: 8 unsigned 24 MiB posts allocated %d MiB, want under 100 MiB", round, allocated>>20)
		}
	}
	// One after the other, every body is read whole and refused on its
	// signature: what one costs is bounded too, not only what the budget
	// turns away.
	var total uint64
	for i := range 8 {
		allocated, codes := unsignedPosts(t, h, body, 1)
		if codes[0] != http.StatusUnauthorized {
			t.Errorf("sequential request %d: %d, want 401", i, codes[0])
		}
		total += allocated
	}
	t.Logf("8 sequential unsigned 24 MiB posts allocated %.1f MiB", float64(total)/(1<<20))
	if total > 100<<20 {
		t.Errorf("8 sequential unsigned 24 MiB posts allocated %d MiB, want under 100 MiB", total>>20)
	}
	if got := e.stored(); got != 0 {
		t.Errorf("unsigned posts stored %d messages", got)
	}
}

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

// TestRefusedBeforeReadingBody: a missing or malformed signature header, or
// an announced size over the cap, is refused before one byte of the body is
// read. The signature was only looked at after the whole body was read.
func TestRefusedBeforeReadingBody(t *testing.T) {
	e := newEnvBare(t, withOptions(func(o *Options) { o.MaxBodyBytes = 64 << 10 }))
	good := issueCommentJSON("created", 1, "alice", "OWNER", "hello")
	tests := []struct {
		name   string
		sig    string
		length int64
		want   int
	}{
		{"no signature", "", int64(len(good)), http.StatusUnauthorized},
		{"sha1 only", "sha1=" + strings.Repeat("0", 40), int64(len(good)), http.StatusUnauthorized},
		{"not hex", "sha256=" + strings.Repeat("z", 64), int64(len(good)), http.StatusUnauthorized},
		{"short", "sha256=" + strings.Repeat("0", 63), int64(len(good)), http.StatusUnauthorized},
		{"long", "sha256=" + strings.Repeat("0", 66), int64(len(good)), http.StatusUnauthorized},
		{"announced size over the cap", sign(testSecret, good), 64<<10 + 1, http.StatusRequestEntityTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body := &countingBody{Reader: bytes.NewReader(good)}
			r := httptest.NewRequest(http.MethodPost, WebhookPath, body)
			r.ContentLength = tc.length
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("X-GitHub-Event", "issue_comment")
			r.Header.Set("X-GitHub-Delivery", "early-1")
			if tc.sig != "" {
				r.Header.Set("X-Hub-Signature-256", tc.sig)
			}
			w := httptest.NewRecorder()
			e.svc.Handler().ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Errorf("status %d, want %d", w.Code, tc.want)
			}
			if n := body.reads.Load(); n != 0 {
				t.Errorf("the body was read %d times before the refusal", n)
			}
		})
	}
}

// heldPost is a signed delivery whose body the test feeds by hand: the
// handler holds its slot (and the room of the bytes sent) until release.
type heldPost struct {
	w    *httptest.ResponseRecorder
	pw   *io.PipeWriter
	body []byte
	sent int
	done chan struct{}
}

// holdPost starts a delivery and returns once the handler has read its
// first byte, so it is inside: past the slot, holding room for its bytes.
func holdPost(t *testing.T, h http.Handler, delivery string, body []byte) *heldPost {
	t.Helper()
	return holdPostAfter(t, h, delivery, body, 1)
}

// holdPostAfter is holdPost returning once the handler has read the first
// sent bytes of the body.
func holdPostAfter(t *testing.T, h http.Handler, delivery string, body []byte, sent int) *heldPost {
	t.Helper()
	pr, pw := io.Pipe()
	r := httptest.NewRequest(http.MethodPost, WebhookPath, pr)
	r.ContentLength = int64(len(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-GitHub-Event", "issue_comment")
	r.Header.Set("X-GitHub-Delivery", delivery)
	r.Header.Set("X-Hub-Signature-256", sign(testSecret, body))
	p := &heldPost{w: httptest.NewRecorder(), pw: pw, body: body, sent: sent, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		h.ServeHTTP(p.w, r)
	}()
	// A pipe write returns only once the reader took the bytes.
	if _, err := pw.Write(body[:sent]); err != nil {
		t.Fatalf("the handler never read %s: %v", delivery, err)
	}
	return p
}

// release sends the rest of the body and returns the status.
func (p *heldPost) release(t *testing.T) int {
	t.Helper()
	if _, err := p.pw.Write(p.body[p.sent:]); err != nil {
		t.Fatal(err)
	}
	p.pw.Close()
	<-p.done
	return p.w.Code
}

func serve(h http.Handler, delivery string, body []byte) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, WebhookPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-GitHub-Event", "issue_comment")
	r.Header.Set("X-GitHub-Delivery", delivery)
	r.Header.Set("X-Hub-Signature-256", sign(testSecret, body))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func rejectedCount(t *testing.T, e *env, reason string) float64 {
	t.Helper()
	return testutil.ToFloat64(e.svc.m.rejected.WithLabelValues(reason))
}

// TestWebhookConcurrencyCap: with every slot held, one more request is
// answered 503 with Retry-After at once, and counted; once a slot frees,
// requests are served again. There was no cap.
func TestWebhookConcurrencyCap(t *testing.T) {
	e := newEnv(t, withConfig(func(c *Config) { c.WebhookConcurrency = 2 }))
	h := e.svc.Handler()
	a := holdPost(t, h, "cap-1", issueCommentJSON("created", 1101, "alice", "OWNER", "one"))
	b := holdPost(t, h, "cap-2", issueCommentJSON("created", 1102, "alice", "OWNER", "two"))
	if got := testutil.ToFloat64(e.svc.m.inflight); got != 2 {
		t.Errorf("in flight %v, want 2", got)
	}
	w := serve(h, "cap-3", issueCommentJSON("created", 1103, "alice", "OWNER", "three"))
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("over the cap: %d (Retry-After %q), want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if got := rejectedCount(t, e, refusedOverCapacity); got != 1 {
		t.Errorf("over-capacity refusals counted %v, want 1", got)
	}
	if code := a.release(t); code != http.StatusAccepted {
		t.Errorf("held delivery 1: %d, want 202", code)
	}
	if w := serve(h, "cap-3", issueCommentJSON("created", 1103, "alice", "OWNER", "three")); w.Code != http.StatusAccepted {
		t.Errorf("after a slot freed: %d, want 202", w.Code)
	}
	if code := b.release(t); code != http.StatusAccepted {
		t.Errorf("held delivery 2: %d, want 202", code)
	}
	e.waitEvents("gh:issue-comment:1101", "gh:issue-comment:1102", "gh:issue-comment:1103")
}

// TestWebhookBodyBudget: with the memory for bodies being checked all held
// by the bytes a delivery has sent, a request is refused 503 before its
// body is read; the room comes back when the held body is done. Room is
// taken as bytes arrive, never for an announced size
// (TestUnsignedFloodCannotStarveGitHub).
func TestWebhookBodyBudget(t *testing.T) {
	e := newEnv(t, withOptions(func(o *Options) {
		o.MaxBodyBytes = 100 << 10
		o.BodyBudget = 1 // raised to what one body of the cap needs: 2 chunks
	}))
	h := e.svc.Handler()
	big := issueCommentJSON("created", 1201, "alice", "OWNER", pad0(90<<10)) // two chunks
	held := holdPostAfter(t, h, "budget-1", big, webhook.Chunk+1)            // both taken
	if got := e.svc.bodies.Held(); got != 2*webhook.Chunk {
		t.Fatalf("the held delivery holds %d bytes, want its two chunks", got)
	}

	small := issueCommentJSON("created", 1202, "alice", "OWNER", "small")
	body := &countingBody{Reader: bytes.NewReader(small)}
	r := httptest.NewRequest(http.MethodPost, WebhookPath, body)
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-GitHub-Event", "issue_comment")
	r.Header.Set("X-GitHub-Delivery", "budget-2")
	r.Header.Set("X-Hub-Signature-256", sign(testSecret, small))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("budget spent: %d (Retry-After %q), want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"))
	}
	if n := body.reads.Load(); n != 0 {
		t.Errorf("a request refused for room had its body read %d times", n)
	}
	if code := held.release(t); code != http.StatusAccepted {
		t.Errorf("held delivery: %d, want 202", code)
	}
	if w := serve(h, "budget-2", small); w.Code != http.StatusAccepted {
		t.Errorf("after the room came back: %d, want 202", w.Code)
	}
	e.waitEvents("gh:issue-comment:1201", "gh:issue-comment:1202")
}

// fixedClock is a clock the test moves.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fixedClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestRefusalsCountedNotLogged (attack 7): a thousand refused requests —
// unsigned, wrongly signed, oversized, malformed — are a thousand in the
// counter and a handful of webhook.rejected records, never a loop.log
// write each. Every refusal was a routing.dropped record of its own.
func TestRefusalsCountedNotLogged(t *testing.T) {
	clock := &fixedClock{t: time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)}
	rec := &eventlog.Recorder{}
	e := newEnvBare(t,
		withOptions(func(o *Options) { o.MaxBodyBytes = 64 << 10; o.Now = clock.Now }),
		withDeps(func(d *service.Deps) { d.Events = eventlog.New(Name, d.Log, rec) }))
	h := e.svc.Handler()
	good := issueCommentJSON("created", 1, "alice", "OWNER", "hello")
	kinds := []struct {
		reason string
		req    func() *http.Request
	}{
		{refusedSignature, func() *http.Request { // no signature
			return newReq(good, "")
		}},
		{refusedSignature, func() *http.Request { // wrong secret
			return newReq(good, sign("not-the-secret", good))
		}},
		{refusedTooLarge, func() *http.Request {
			r := newReq(good, sign(testSecret, good))
			r.ContentLength = 1 << 20
			return r
		}},
		{refusedPayload, func() *http.Request {
			return newReq([]byte("not json"), sign(testSecret, []byte("not json")))
		}},
		{refusedEvent, func() *http.Request {
			r := newReq(good, sign(testSecret, good))
			r.Header.Del("X-GitHub-Event")
			return r
		}},
	}
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
		if got := rejectedCount(t, e, reason); got != float64(n) {
			t.Errorf("counter for %s = %v, want %d", reason, got, n)
		}
		total += rejectedCount(t, e, reason)
	}
	if total != 1000 {
		t.Errorf("counters sum to %v, want 1000", total)
	}
	// Within one interval: the first refusal of each reason, nothing more.
	if n := rec.Len(); n != len(want) {
		t.Errorf("1000 refusals wrote %d loop.log records, want %d (one per reason)", n, len(want))
	}
	// The next interval's refusal writes the sum since; a flush writes the
	// rest; the records account for every refusal.
	clock.Add(time.Minute)
	h.ServeHTTP(httptest.NewRecorder(), newReq(good, ""))
	want[refusedSignature]++
	e.svc.refusals.Flush(context.Background())
	counted := map[string]int{}
	for _, r := range rec.Since(0) {
		if r.Event != "webhook.rejected" {
			t.Errorf("a refusal wrote a %s record", r.Event)
			continue
		}
		n, _ := r.Fields["count"].(float64)
		counted[fmt.Sprint(r.Fields["reason"])] += int(n)
	}
	if n := rec.Len(); n > 2*len(want) {
		t.Errorf("1001 refusals wrote %d loop.log records, want at most %d", n, 2*len(want))
	}
	if fmt.Sprint(counted) != fmt.Sprint(want) {
		t.Errorf("records count %v, want %v", counted, want)
	}
	if got := e.stored(); got != 0 {
		t.Errorf("refused requests stored %d messages", got)
	}
}

func newReq(body []byte, sig string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, WebhookPath, bytes.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("X-GitHub-Event", "issue_comment")
	r.Header.Set("X-GitHub-Delivery", "refused")
	if sig != "" {
		r.Header.Set("X-Hub-Signature-256", sig)
	}
	return r
}

// TestUnsignedFloodCannotStarveGitHub (issue 26): three requests with a
// well-formed but wrong signature announce 25 + 25 + 14 MiB, as much as the
// 64 MiB body budget, send 256 KiB each, then a KiB every 100 ms. Meanwhile
// a signed delivery is accepted (202): the three hold room only for what
// they sent. They are then cut off (408) once their bytes no longer pay for
// the wait (here 5 s, and 1 s more per 3 MiB sent), and their room comes
// back. Room was reserved for the announced sizes, a chunk more than each
// (which is why the third is 128 KiB short of 14 MiB: the three then took
// the budget to the last chunk), and held for the server's 30 s read
// timeout: GitHub's delivery was answered 503.
func TestUnsignedFloodCannotStarveGitHub(t *testing.T) {
	// A floor of 5 s rather than 2 s, so that on a loaded machine the three
	// are surely all inside while the delivery is sent.
	e := newEnv(t, withOptions(func(o *Options) { o.BodyPace.Floor = 5 * time.Second }))
	bad := sign("not-the-secret", nil) // sha256= and 64 hex digits
	e.svc.bodies.ResetPeak()
	start := time.Now()
	var flood []*testkit.SlowPost
	for i, size := range []int64{25 << 20, 25 << 20, 14<<20 - 2*webhook.Chunk - 1} {
		p, err := testkit.StartSlowPost(e.http.URL+WebhookPath, http.Header{
			"Content-Type": {"application/json"}, "X-Github-Event": {"issue_comment"},
			"X-Github-Delivery": {fmt.Sprintf("flood-%d", i)}, "X-Hub-Signature-256": {bad},
		}, size, 256<<10, 1<<10, 100*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		flood = append(flood, p)
	}
	testkit.WaitFor(t, "the three requests to hold their first 256 KiB", func() bool {
		return testutil.ToFloat64(e.svc.m.inflight) == 3 && e.svc.bodies.Held() >= 3*(256<<10)
	})

	sent := time.Now()
	body := issueCommentJSON("created", 1301, "alice", "OWNER", "delivered during the flood")
	r := e.post("issue_comment", "genuine-1301", body, "")
	answered := time.Since(sent)
	if r.Code != http.StatusAccepted {
		t.Errorf("the signed delivery during the flood: %d %s, want 202", r.Code, r.Status)
	}
	if n := testutil.ToFloat64(e.svc.m.inflight); n != 3 {
		t.Errorf("the flood's requests in flight when the delivery was answered: %v, want 3 (still trickling)", n)
	}
	e.waitEvents("gh:issue-comment:1301")

	var cut []string
	for i, p := range flood {
		code, err := p.Wait(testkit.Patience)
		// The answer, or the connection closed while the sender kept
		// sending: the counter below says which refusal it was.
		if err != nil && code == 0 && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
			t.Errorf("flood request %d: %v", i, err)
		} else if err == nil && code != http.StatusRequestTimeout {
			t.Errorf("flood request %d answered %d, want 408", i, code)
		}
		cut = append(cut, fmt.Sprintf("%d after %d KiB", code, p.Sent()>>10))
	}
	took := time.Since(start)
	testkit.WaitFor(t, "the flood's room to come back", func() bool { return e.svc.bodies.Held() == 0 })
	if got := rejectedCount(t, e, refusedSlow); got != 3 {
		t.Errorf("slow-body refusals counted %v, want 3", got)
	}
	peak := e.svc.bodies.Peak()
	t.Logf("signed delivery answered %d in %v during the flood; the flood (announcing 64 MiB) held at most %d KiB of the %d MiB budget and was cut within %v: %v",
		r.Code, answered.Round(time.Millisecond), peak>>10, e.svc.bodies.Size()>>20, took.Round(100*time.Millisecond), cut)
	if peak > 4<<20 {
		t.Errorf("the flood held %d KiB of the budget, want what it sent (about 800 KiB)", peak>>10)
	}
}
