// Package threads binds chat threads to work items
// (docs/architecture.md#streams-and-state, KV bucket "threads"): the
// slack-renderer binds a work item's thread when it posts the first message for
// it, the ledger-writer binds a kickoff's conversation to the issue it created
// (R3.6), and ingress-slack maps a reply in a bound thread back to its work
// item.
//
// Each channel keeps at most Cap bindings; binding one more forgets the
// oldest, and a forgotten thread is simply inert (its replies drop as
// unmapped), as in the original.
package threads

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/the-loop/bus/pkg/bus"
)

// Cap is the number of thread bindings kept per chat channel.
const Cap = 200

// KV is the part of a bus.KV the store uses.
type KV interface {
	Get(ctx context.Context, key string) (bus.KVEntry, error)
	CompareAndSet(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Put(ctx context.Context, key string, value []byte) (uint64, error)
	Delete(ctx context.Context, key string) error
}

// Binding is one thread bound to one work item.
type Binding struct {
	Ref      string    `json:"ref"`
	Channel  string    `json:"channel"`
	ThreadTS string    `json:"thread_ts"`
	BoundAt  time.Time `json:"bound_at"`
}

// Store reads and writes bindings.
type Store struct {
	kv  KV
	cap int
	now func() time.Time
}

// New returns a store over the threads bucket.
func New(kv KV) *Store { return &Store{kv: kv, cap: Cap, now: time.Now} }

// Keys. The index of a channel lists its bound thread ts oldest first; it is
// updated with compare-and-set, so concurrent binders never lose a binding.
func threadKey(channel, ts string) string { return "t/" + channel + "/" + ts }
func refKey(channel, ref string) string {
	sum := sha256.Sum256([]byte(ref))
	return "w/" + channel + "/" + hex.EncodeToString(sum[:12])
}
func indexKey(channel string) string { return "i/" + channel }

// Bind binds channel/threadTS to ref. Rebinding moves the thread to newest;
// the newest thread of a ref is the one ThreadFor returns.
func (s *Store) Bind(ctx context.Context, channel, threadTS, ref string) error {
	if channel == "" || threadTS == "" || ref == "" {
		return errors.New("threads: bind needs a channel, a thread ts and a ref")
	}
	evicted, err := s.updateIndex(ctx, channel, threadTS)
	if err != nil {
		return err
	}
	b, err := json.Marshal(Binding{Ref: ref, Channel: channel, ThreadTS: threadTS, BoundAt: s.now().UTC()})
	if err != nil {
		return fmt.Errorf("threads: encode binding: %w", err)
	}
	if _, err := s.kv.Put(ctx, threadKey(channel, threadTS), b); err != nil {
		return fmt.Errorf("threads: bind %s/%s: %w", channel, threadTS, err)
	}
	if _, err := s.kv.Put(ctx, refKey(channel, ref), b); err != nil {
		return fmt.Errorf("threads: bind %s to %s: %w", ref, channel, err)
	}
	for _, old := range evicted {
		s.forget(ctx, channel, old)
	}
	return nil
}

// updateIndex moves threadTS to the newest place in channel's index and
// returns the thread ts pushed out past the cap.
func (s *Store) updateIndex(ctx context.Context, channel, threadTS string) ([]string, error) {
	for attempt := 0; attempt < 100; attempt++ {
		if attempt > 0 {
			// Jittered back-off, so contending binders stop colliding.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(time.Duration(rand.IntN(attempt*2+1)) * time.Millisecond):
			}
		}
		var list []string
		var rev uint64
		e, err := s.kv.Get(ctx, indexKey(channel))
		switch {
		case errors.Is(err, bus.ErrNotFound):
		case err != nil:
			return nil, fmt.Errorf("threads: read index of %s: %w", channel, err)
		default:
			rev = e.Revision
			if err := json.Unmarshal(e.Value, &list); err != nil {
				// A corrupt index loses only the cap's bookkeeping.
				list = nil
			}
		}
		list = slices.DeleteFunc(list, func(ts string) bool { return ts == threadTS })
		list = append(list, threadTS)
		var evicted []string
		if over := len(list) - s.cap; over > 0 {
			evicted, list = slices.Clone(list[:over]), list[over:]
		}
		b, _ := json.Marshal(list)
		_, err = s.kv.CompareAndSet(ctx, indexKey(channel), b, rev)
		if bus.IsConflict(err) {
			continue // another binder won; read again
		}
		if err != nil {
			return nil, fmt.Errorf("threads: write index of %s: %w", channel, err)
		}
		return evicted, nil
	}
	return nil, fmt.Errorf("threads: index of %s: too much contention", channel)
}

// forget removes an evicted thread, and its ref's pointer if it still names
// this thread. Failures leave an inert binding behind, which is harmless.
func (s *Store) forget(ctx context.Context, channel, threadTS string) {
	e, err := s.kv.Get(ctx, threadKey(channel, threadTS))
	if err != nil {
		return
	}
	var b Binding
	if json.Unmarshal(e.Value, &b) == nil {
		if w, err := s.kv.Get(ctx, refKey(channel, b.Ref)); err == nil {
			var cur Binding
			if json.Unmarshal(w.Value, &cur) == nil && cur.ThreadTS == threadTS {
				_ = s.kv.Delete(ctx, refKey(channel, b.Ref))
			}
		}
	}
	_ = s.kv.Delete(ctx, threadKey(channel, threadTS))
}

// Lookup returns the work item channel/threadTS is bound to.
func (s *Store) Lookup(ctx context.Context, channel, threadTS string) (string, bool, error) {
	b, ok, err := s.get(ctx, threadKey(channel, threadTS))
	return b.Ref, ok, err
}

// ThreadFor returns the newest thread of ref in channel.
func (s *Store) ThreadFor(ctx context.Context, channel, ref string) (string, bool, error) {
	b, ok, err := s.get(ctx, refKey(channel, ref))
	if ok && b.Ref != ref {
		return "", false, nil // a hash collision: never hand out another item's thread
	}
	return b.ThreadTS, ok, err
}

func (s *Store) get(ctx context.Context, key string) (Binding, bool, error) {
	e, err := s.kv.Get(ctx, key)
	if errors.Is(err, bus.ErrNotFound) {
		return Binding{}, false, nil
	}
	if err != nil {
		return Binding{}, false, fmt.Errorf("threads: read %s: %w", key, err)
	}
	var b Binding
	if err := json.Unmarshal(e.Value, &b); err != nil {
		return Binding{}, false, fmt.Errorf("threads: decode %s: %w", key, err)
	}
	return b, true, nil
}

// List returns channel's bound thread ts, oldest first.
func (s *Store) List(ctx context.Context, channel string) ([]string, error) {
	e, err := s.kv.Get(ctx, indexKey(channel))
	if errors.Is(err, bus.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("threads: read index of %s: %w", channel, err)
	}
	var list []string
	if err := json.Unmarshal(e.Value, &list); err != nil {
		// A corrupt index lists nothing; the next Bind rewrites it.
		return nil, nil
	}
	return list, nil
}
