package ingressgithub

import (
	"errors"
	"io"
	"net/http"

	"golang.org/x/sync/semaphore"
)

// bodyChunk is the unit a webhook body is held in while its signature is
// checked.
const bodyChunk = 64 << 10

// errBusy: the request would take the service over its limits (503).
var errBusy = errors.New("over capacity")

// errBodyOverrun: the body is longer than the room reserved for it, which
// net/http's Content-Length enforcement makes impossible; refused as
// unreadable rather than trusted.
var errBodyOverrun = errors.New("body longer than announced")

// bodies holds webhook bodies while their signatures are checked, so that
// what an unsigned request costs is bounded whatever it claims (decision
// 037). Before reading a byte, a request reserves room for its
// Content-Length (the size limit when it announces none) from a budget; if
// the budget is spent it is refused. The bytes go into chunks from a free
// list that never holds more than the budget, so a flood of unsigned posts
// reuses the same memory rather than allocating its own: the chunks ever
// allocated never exceed the budget. Only a verified body is copied out,
// into memory of its own that nothing reuses (async publishes may keep it).
type bodies struct {
	budget *semaphore.Weighted // in chunks
	free   chan *[bodyChunk]byte
}

func newBodies(budgetBytes int64) *bodies {
	n := max(budgetBytes/bodyChunk, 1)
	return &bodies{budget: semaphore.NewWeighted(n), free: make(chan *[bodyChunk]byte, n)}
}

// chunksFor is the room a body of size bytes takes: one chunk more than it
// fills, so that reading its end (EOF) never needs another.
func chunksFor(size int64) int64 { return size/bodyChunk + 1 }

// read reserves room for r's body (at most limit bytes), streams it through
// check into chunks, verifies the signature and returns a copy of the
// verified bytes. The chunks are back on the free list when it returns,
// whatever the outcome. Errors: errBusy (no room), *http.MaxBytesError
// (over limit), ErrSignature, or a read error.
func (b *bodies) read(w http.ResponseWriter, r *http.Request, limit int64, check BodyCheck) ([]byte, error) {
	size := r.ContentLength
	if size > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	if size < 0 {
		size = limit
	}
	room := chunksFor(size)
	if !b.budget.TryAcquire(room) {
		return nil, errBusy
	}
	defer b.budget.Release(room)
	body := http.MaxBytesReader(w, r.Body, limit)
	defer body.Close()

	var held []*[bodyChunk]byte
	defer func() {
		for _, c := range held {
			b.put(c)
		}
	}()
	n := 0 // bytes held
	for {
		off := n % bodyChunk
		if off == 0 {
			if int64(len(held)) == room {
				return nil, errBodyOverrun
			}
			held = append(held, b.get())
		}
		c := held[len(held)-1]
		m, err := body.Read(c[off:])
		if m > 0 {
			_, _ = check.Write(c[off : off+m])
			n += m
		}
		if errors.Is(err, io.EOF) {
			break
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
		out = append(out, c[:min(n-len(out), bodyChunk)]...)
	}
	return out, nil
}

func (b *bodies) get() *[bodyChunk]byte {
	select {
	case c := <-b.free:
		return c
	default:
		return new([bodyChunk]byte)
	}
}

func (b *bodies) put(c *[bodyChunk]byte) {
	select {
	case b.free <- c:
	default: // cannot happen while reservations bound the chunks in use
	}
}

// slots caps the webhook requests handled at once; one over the cap is
// refused at once rather than queued.
type slots chan struct{}

func (s slots) enter() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) leave() { <-s }
