package webhook

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"hash"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
)

var errMismatch = errors.New("signature mismatch")

// macCheck is an HMAC-SHA256 over the body, as both ingresses' checks are.
type macCheck struct {
	mac  hash.Hash
	want []byte
}

func newCheck(key string, signed []byte) *macCheck {
	m := hmac.New(sha256.New, []byte(key))
	m.Write(signed)
	return &macCheck{mac: hmac.New(sha256.New, []byte(key)), want: m.Sum(nil)}
}

func (c *macCheck) Write(p []byte) (int, error) { return c.mac.Write(p) }

func (c *macCheck) Verify() error {
	if !hmac.Equal(c.mac.Sum(nil), c.want) {
		return errMismatch
	}
	return nil
}

// countingBody counts the reads of a request body.
type countingBody struct {
	io.Reader
	reads atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	b.reads.Add(1)
	return b.Reader.Read(p)
}

func (b *countingBody) Close() error { return nil }

func post(body io.Reader, length int64) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hook", body)
	r.ContentLength = length
	return r
}

// TestReadVerifiesBeforeHandingOut: a body is handed out only when its
// check verifies it, as a copy of exactly the bytes sent; whatever the
// outcome, the room comes back.
func TestReadVerifiesBeforeHandingOut(t *testing.T) {
	b := NewBudget(1 << 20)
	for _, size := range []int{0, 1, Chunk - 1, Chunk, Chunk + 1, 3*Chunk + 17} {
		body := bytes.Repeat([]byte{'x'}, size)
		for _, length := range []int64{int64(size), -1} { // announced, or chunked
			got, err := b.Read(httptest.NewRecorder(), post(bytes.NewReader(body), length), 1<<20, DefaultPace, newCheck("k", body))
			if err != nil || !bytes.Equal(got, body) {
				t.Errorf("%d bytes (announced %d): %d bytes, %v; want the body", size, length, len(got), err)
			}
			got, err = b.Read(httptest.NewRecorder(), post(bytes.NewReader(body), length), 1<<20, DefaultPace, newCheck("k", append(body, '!')))
			if !errors.Is(err, errMismatch) || got != nil {
				t.Errorf("%d bytes (announced %d), signature of other bytes: %d bytes, %v; want the check's error and nothing", size, length, len(got), err)
			}
			if h := b.Held(); h != 0 {
				t.Errorf("%d bytes held after the reads", h)
			}
		}
	}
}

// TestReadRefusesBeforeReading: a body announced over the limit, or arriving
// when the budget has no room left, is refused before one byte is read; an
// unannounced body over the limit is refused once it passes it.
func TestReadRefusesBeforeReading(t *testing.T) {
	b := NewBudget(2 * Chunk)
	body := &countingBody{Reader: bytes.NewReader(make([]byte, 100))}
	_, err := b.Read(httptest.NewRecorder(), post(body, 4*Chunk), 3*Chunk, DefaultPace, newCheck("k", nil))
	var tooBig *http.MaxBytesError
	if !errors.As(err, &tooBig) || body.reads.Load() != 0 {
		t.Errorf("announced over the limit: %v after %d reads, want *http.MaxBytesError before reading", err, body.reads.Load())
	}

	// A holder takes the whole budget: two chunks of bytes sent.
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := b.Read(httptest.NewRecorder(), post(pr, 3*Chunk), 3*Chunk, DefaultPace, newCheck("k", nil))
		done <- err
	}()
	if _, err := pw.Write(make([]byte, Chunk+1)); err != nil {
		t.Fatal(err)
	}
	if h := b.Held(); h != 2*Chunk {
		t.Fatalf("the holder holds %d bytes, want %d", h, 2*Chunk)
	}
	body = &countingBody{Reader: bytes.NewReader(make([]byte, 100))}
	if _, err := b.Read(httptest.NewRecorder(), post(body, 100), 3*Chunk, DefaultPace, newCheck("k", nil)); !errors.Is(err, ErrBusy) || body.reads.Load() != 0 {
		t.Errorf("no room: %v after %d reads, want ErrBusy before reading", err, body.reads.Load())
	}
	pw.CloseWithError(io.ErrUnexpectedEOF)
	if err := <-done; !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("the holder, its sender gone: %v", err)
	}
	if h := b.Held(); h != 0 {
		t.Errorf("%d bytes held once the holder ended", h)
	}

	big := make([]byte, 3*Chunk+1)
	_, err = NewBudget(MinBudget(3*Chunk)).Read(httptest.NewRecorder(), post(bytes.NewReader(big), -1), 3*Chunk, DefaultPace, newCheck("k", big))
	if !errors.As(err, &tooBig) {
		t.Errorf("unannounced, over the limit: %v, want *http.MaxBytesError", err)
	}
}

// TestReadHoldsWhatArrivedNotWhatWasAnnounced (attack of issue 26): a request
// announcing 25 MiB that has sent 100 KiB holds two chunks of the budget,
// not 25 MiB, so three such requests announcing 25 + 25 + 14 MiB leave a
// 64 MiB budget almost whole. Room was reserved for the announced size, and
// these three spent all of it.
func TestReadHoldsWhatArrivedNotWhatWasAnnounced(t *testing.T) {
	b := NewBudget(64 << 20)
	var wg sync.WaitGroup
	var senders []*io.PipeWriter
	for _, announced := range []int64{25 << 20, 25 << 20, 14 << 20} {
		pr, pw := io.Pipe()
		senders = append(senders, pw)
		wg.Go(func() {
			_, _ = b.Read(httptest.NewRecorder(), post(pr, announced), 25<<20, DefaultPace, newCheck("k", nil))
		})
		if _, err := pw.Write(make([]byte, 100<<10)); err != nil {
			t.Fatal(err)
		}
	}
	held := b.Held()
	t.Logf("three requests announcing 25 + 25 + 14 MiB, 100 KiB sent each: %d KiB of the %d MiB budget held", held>>10, b.Size()>>20)
	if held != 3*2*Chunk {
		t.Errorf("held %d bytes, want %d (two chunks each)", held, 3*2*Chunk)
	}
	// What is left takes a body of the limit.
	body := bytes.Repeat([]byte{'g'}, 25<<20)
	if got, err := b.Read(httptest.NewRecorder(), post(bytes.NewReader(body), int64(len(body))), 25<<20, DefaultPace, newCheck("k", body)); err != nil || len(got) != len(body) {
		t.Errorf("a signed body of the limit beside them: %d bytes, %v", len(got), err)
	}
	for _, pw := range senders {
		pw.CloseWithError(io.ErrUnexpectedEOF)
	}
	wg.Wait()
	if h := b.Held(); h != 0 {
		t.Errorf("%d bytes held once every request ended", h)
	}
}

// TestBudgetNeverAllocatesPastItself: sixteen concurrent 1 MiB bodies with
// a wrong signature, over a 2 MiB budget, twice: each is refused (no room,
// or its check), the chunks ever allocated stay within the budget and are
// reused the second time, and nothing stays held.
func TestBudgetNeverAllocatesPastItself(t *testing.T) {
	b := NewBudget(2 << 20)
	body := bytes.Repeat([]byte{'u'}, 1<<20)
	for round := range 2 {
		var wg sync.WaitGroup
		var busy, mismatched atomic.Int64
		for range 16 {
			wg.Go(func() {
				_, err := b.Read(httptest.NewRecorder(), post(bytes.NewReader(body), int64(len(body))), 1<<20, DefaultPace, newCheck("not-the-key", body[1:]))
				switch {
				case errors.Is(err, ErrBusy):
					busy.Add(1)
				case errors.Is(err, errMismatch):
					mismatched.Add(1)
				default:
					t.Errorf("round %d: %v, want ErrBusy or the check's error", round, err)
				}
			})
		}
		wg.Wait()
		t.Logf("round %d: %d refused for room, %d on their signature; %d chunks allocated in all (budget %d), peak held %d KiB",
			round, busy.Load(), mismatched.Load(), b.made.Load(), b.chunks, b.Peak()>>10)
	}
	if b.made.Load() > b.chunks {
		t.Errorf("%d chunks allocated, more than the budget's %d", b.made.Load(), b.chunks)
	}
	if b.Peak() > b.Size() {
		t.Errorf("peak %d bytes over the budget %d", b.Peak(), b.Size())
	}
	if h := b.Held(); h != 0 {
		t.Errorf("%d bytes held after the flood", h)
	}
}

// TestPaceDeadline: a body may take the floor, and 1/Rate of a second more
// per byte received.
func TestPaceDeadline(t *testing.T) {
	start := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	p := Pace{Floor: 2 * time.Second, Rate: 3 << 20}
	for _, tc := range []struct {
		received int64
		want     time.Duration
	}{
		{0, 2 * time.Second},
		{3 << 20, 3 * time.Second},
		{25 << 20, 2*time.Second + 25*time.Second/3},
		{1, 2*time.Second + time.Second/(3<<20)},
	} {
		if got := p.Deadline(start, tc.received).Sub(start); got != tc.want {
			t.Errorf("after %d bytes: %v, want %v", tc.received, got, tc.want)
		}
	}
	if got := (Pace{}).Deadline(start, 0).Sub(start); got != DefaultPace.Floor {
		t.Errorf("zero pace: floor %v, want the default's %v", got, DefaultPace.Floor)
	}
}

// paceServer serves Budget.Read on a real connection, whose read deadline
// the pace sets, and reports each request's error and how long it took.
func paceServer(t *testing.T, b *Budget, pace Pace) (url string, results chan paceResult) {
	t.Helper()
	results = make(chan paceResult, 16)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		_, err := b.Read(w, r, 25<<20, pace, newCheck("k", nil))
		results <- paceResult{err: err, took: time.Since(start)}
		w.WriteHeader(http.StatusRequestTimeout)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, results
}

type paceResult struct {
	err  error
	took time.Duration
}

// slowPost posts to url a body of length bytes: first at once, then step
// bytes every interval.
func slowPost(t *testing.T, url string, length int64, first, step int, every time.Duration) {
	t.Helper()
	p, err := testkit.StartSlowPost(url+"/hook", http.Header{"Content-Type": {"application/json"}}, length, first, step, every)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
}

// TestPaceCutsStalledAndTricklingSenders: on a real connection, a sender
// that sends part of a large body and stops, and one that trickles a byte at
// a time, are cut off (ErrSlow) once their bytes no longer pay for the wait,
// and their room comes back; a sender keeping up with the pace is not cut.
// Before, a request kept its room until the server's 30 s read timeout.
func TestPaceCutsStalledAndTricklingSenders(t *testing.T) {
	b := NewBudget(64 << 20)
	pace := Pace{Floor: time.Second, Rate: 1 << 20}
	url, results := paceServer(t, b, pace)
	const waitFor = 30 * time.Second

	// Stalled: 512 KiB of a 25 MiB body, then nothing: cut at about
	// 1 s + 0.5 s.
	slowPost(t, url, 25<<20, 512<<10, 1, time.Hour)
	// Trickling: a byte every 100 ms: cut at about the floor.
	slowPost(t, url, 14<<20, 1, 1, 100*time.Millisecond)
	for range 2 {
		select {
		case r := <-results:
			t.Logf("cut after %v: %v", r.took.Round(time.Millisecond), r.err)
			if !errors.Is(r.err, ErrSlow) {
				t.Errorf("a stalled or trickling sender: %v, want ErrSlow", r.err)
			}
			if r.took < pace.Floor {
				t.Errorf("cut after %v, before the floor %v", r.took, pace.Floor)
			}
		case <-time.After(waitFor):
			t.Fatalf("a stalled or trickling sender was not cut within %v", waitFor)
		}
	}
	testkit.WaitFor(t, "the room of the cut requests to come back", func() bool { return b.Held() == 0 })

	// Keeping up: 2 MiB at about 2 MiB/s, in 64 KiB steps, passes its
	// check's end (a mismatch, not ErrSlow).
	start := time.Now()
	slowPost(t, url, 2<<20, 0, 64<<10, 30*time.Millisecond)
	select {
	case r := <-results:
		t.Logf("2 MiB sent at about 2 MiB/s in %v, under a pace of 1 s and 1 s per MiB: %v", time.Since(start).Round(time.Millisecond), r.err)
		if !errors.Is(r.err, errMismatch) {
			t.Errorf("a sender keeping up: %v, want its check's mismatch", r.err)
		}
	case <-time.After(waitFor):
		t.Fatalf("no answer within %v", waitFor)
	}
}

// BenchmarkRead: a signed body read through the budget and its check, as
// the intakes read one (without a connection, so without the deadline).
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{4 << 10, 1 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			budget := NewBudget(MinBudget(int64(size)))
			body := bytes.Repeat([]byte{'x'}, size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				r := post(bytes.NewReader(body), int64(size))
				if _, err := budget.Read(httptest.NewRecorder(), r, int64(size), DefaultPace, newCheck("k", body)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
