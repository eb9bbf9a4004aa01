package webhook

import (
	"errors"
	"io"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// Chunk is the unit a body is held in while its signature is checked, and
// the unit a Budget hands out.
const Chunk = 64 << 10

// Read's refusals besides the caller's Check and *http.MaxBytesError.
var (
	// ErrBusy: the budget has no room for the body's next bytes (503).
	ErrBusy = errors.New("webhook: over capacity")
	// ErrSlow: the body did not arrive at the pace asked for (408).
	ErrSlow = errors.New("webhook: body too slow")
	// errOverrun: more bytes than the request announced, which net/http's
	// Content-Length enforcement makes impossible; refused rather than
	// trusted.
	errOverrun = errors.New("webhook: body longer than announced")
)

// Check is one request's signature check: Read writes it every byte of the
// raw body as it arrives (writes never fail), then Verify says whether the
// signature covers exactly those bytes.
type Check interface {
	io.Writer
	Verify() error
}

// Pace is how fast a body must arrive: whatever its size, a body may take
// Floor; each byte received buys 1/Rate of a second more. Before reading
// past the first n bytes, the connection's read deadline is set to
// start + Floor + n/Rate, so a body sent at Rate or faster is never cut,
// a full body of size bytes may take Floor + size/Rate, and a sender that
// stops is cut off once the bytes it did send no longer pay for the wait.
type Pace struct {
	Floor time.Duration
	Rate  int64 // bytes per second
}

// DefaultPace gives a body 2 s, and 1 s more per 3 MiB received: about 10 s
// for GitHub's largest delivery (25 MiB), which is as long as GitHub waits
// for an answer.
var DefaultPace = Pace{Floor: 2 * time.Second, Rate: 3 << 20}

// OrDefault is p with DefaultPace's value in place of each zero field.
func (p Pace) OrDefault() Pace {
	if p.Floor <= 0 {
		p.Floor = DefaultPace.Floor
	}
	if p.Rate <= 0 {
		p.Rate = DefaultPace.Rate
	}
	return p
}

// Deadline is when the bytes after the first received must have begun to
// arrive, for a body whose reading began at start.
func (p Pace) Deadline(start time.Time, received int64) time.Time {
	p = p.OrDefault()
	paid := time.Duration(received/p.Rate)*time.Second + time.Duration(received%p.Rate)*time.Second/time.Duration(p.Rate)
	return start.Add(p.Floor + paid)
}

// Budget is the memory of the bodies being read and checked at once. Its
// chunks come from a free list that never holds more than the budget, so the
// chunks ever allocated never exceed it and a flood of unsigned requests
// reuses the same memory rather than allocating its own. Only a verified
// body is copied out, into memory of its own that nothing reuses.
type Budget struct {
	chunks int64 // capacity
	held   atomic.Int64
	peak   atomic.Int64
	made   atomic.Int64 // chunks ever allocated
	free   chan *[Chunk]byte
}

// MinBudget is the budget one body of limit bytes needs: its chunks, and one
// more to read its end into when the sender does not say its length.
func MinBudget(limit int64) int64 { return (limit/Chunk + 1) * Chunk }

// NewBudget returns a budget of bytes, rounded down to whole chunks (at
// least one).
func NewBudget(bytes int64) *Budget {
	n := max(bytes/Chunk, 1)
	return &Budget{chunks: n, free: make(chan *[Chunk]byte, n)}
}

// Size is the budget in bytes.
func (b *Budget) Size() int64 { return b.chunks * Chunk }

// Held is the bytes of the budget in use now (whole chunks).
func (b *Budget) Held() int64 { return b.held.Load() * Chunk }

// Peak is the most bytes of the budget in use at once since the budget was
// made or ResetPeak last called.
func (b *Budget) Peak() int64 { return b.peak.Load() * Chunk }

// ResetPeak starts Peak again from what is held now.
func (b *Budget) ResetPeak() { b.peak.Store(b.held.Load()) }

// take reserves one chunk of room, or reports that there is none.
func (b *Budget) take() bool {
	for {
		n := b.held.Load()
		if n >= b.chunks {
			return false
		}
		if b.held.CompareAndSwap(n, n+1) {
			b.raisePeak(n + 1)
			return true
		}
	}
}

func (b *Budget) raisePeak(n int64) {
	for {
		p := b.peak.Load()
		if n <= p || b.peak.CompareAndSwap(p, n) {
			return
		}
	}
}

func (b *Budget) get() *[Chunk]byte {
	select {
	case c := <-b.free:
		return c
	default:
		b.made.Add(1)
		return new([Chunk]byte)
	}
}

// give returns chunks and their room.
func (b *Budget) give(chunks []*[Chunk]byte) {
	for _, c := range chunks {
		select {
		case b.free <- c:
		default: // cannot happen while the room taken bounds the chunks in use
		}
	}
	b.held.Add(-int64(len(chunks)))
}

// Read streams r's body, at most limit bytes, through check into chunks of
// the budget taken as the bytes arrive, at pace, and returns a copy of the
// body once check verifies it. Whatever the outcome, the chunks are back in
// the budget when it returns. A body announced over limit is refused before
// a byte is read.
//
// Errors: *http.MaxBytesError (over limit), ErrBusy (no room for the next
// chunk), ErrSlow (the body fell behind pace), check.Verify's error, or the
// read's. The pace is enforced through the connection's read deadline
// (http.ResponseController); a ResponseWriter that cannot set one, such as
// a test's recorder, reads without it.
func (b *Budget) Read(w http.ResponseWriter, r *http.Request, limit int64, pace Pace, check Check) ([]byte, error) {
	announced := r.ContentLength // -1 when unknown
	if announced > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	body := http.MaxBytesReader(w, r.Body, limit)
	defer body.Close()
	rc := http.NewResponseController(w)
	paced := true
	start := time.Now()

	var held []*[Chunk]byte
	defer func() { b.give(held) }()
	n := 0 // bytes held
	for {
		off := n % Chunk
		var into []byte
		switch {
		case off == 0 && n > 0 && int64(n) == announced:
			// All that was announced is here: only its end is left to
			// read, which needs no room.
			var probe [1]byte
			into = probe[:]
		case off == 0:
			if !b.take() {
				return nil, ErrBusy
			}
			held = append(held, b.get())
			into = held[len(held)-1][:]
		default:
			into = held[len(held)-1][off:]
		}
		if paced && rc.SetReadDeadline(pace.Deadline(start, int64(n))) != nil {
			paced = false
		}
		m, err := body.Read(into)
		if m > 0 {
			if int64(n+m) > announced && announced >= 0 {
				return nil, errOverrun
			}
			_, _ = check.Write(into[:m])
			n += m
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, ErrSlow
		}
		if err != nil {
			return nil, err
		}
	}
	if err := check.Verify(); err != nil {
		return nil, err
	}
	out := make([]byte, 0, n)
	for _, c := range held {
		out = append(out, c[:min(n-len(out), Chunk)]...)
	}
	return out, nil
}
