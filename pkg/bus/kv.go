package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KV sentinel errors; match with errors.Is.
var (
	// ErrKeyExists: Create found the key already there (someone claimed it).
	ErrKeyExists = errors.New("bus: key exists")
	// ErrWrongRevision: Update's revision is not the key's latest (someone
	// moved it), or the key does not exist.
	ErrWrongRevision = errors.New("bus: wrong revision")
	// ErrNotFound: no such key (or it was deleted or expired).
	ErrNotFound = errors.New("bus: key not found")
)

// KV is one key/value bucket. Keys are free-form strings (event ids such as
// "gh:<guid>" contain ':', which NATS keys do not allow): KV escapes them
// transparently (see encodeKey), so callers never see the stored form.
//
// Decide with Create and Update, never with Get: on a replicated bucket a Get
// may be answered by a lagging replica, while Create and Update go through the
// stream leader.
type KV struct {
	kv     jetstream.KeyValue
	js     jetstream.JetStream
	bucket string
}

// KVEntry is a key's current value.
type KVEntry struct {
	Key      string
	Value    []byte
	Revision uint64
	Created  time.Time
}

// KV opens a provisioned bucket.
func (c *Conn) KV(ctx context.Context, bucket string) (*KV, error) {
	kv, err := c.js.KeyValue(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bus: kv %s: %w", bucket, err)
	}
	return &KV{kv: kv, js: c.js, bucket: bucket}, nil
}

// Get returns the key's latest value, or ErrNotFound.
func (k *KV) Get(ctx context.Context, key string) (KVEntry, error) {
	e, err := k.kv.Get(ctx, encodeKey(key))
	if err != nil {
		return KVEntry{}, k.err("get", key, err)
	}
	return KVEntry{Key: key, Value: e.Value(), Revision: e.Revision(), Created: e.Created()}, nil
}

// Create stores value only if key does not exist (a claim), returning its
// revision, or ErrKeyExists.
func (k *KV) Create(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.kv.Create(ctx, encodeKey(key), value)
	if err != nil {
		return 0, k.err("create", key, err)
	}
	return rev, nil
}

// Update stores value only if revision is the key's latest (compare and
// set), returning the new revision, or ErrWrongRevision.
func (k *KV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	rev, err := k.kv.Update(ctx, encodeKey(key), value, revision)
	if err != nil {
		return 0, k.err("update", key, err)
	}
	return rev, nil
}

// CompareAndSet stores value under key only if the key is still at
// revision: absent for revision 0 (Create), else at that revision (Update).
// It returns the new revision, or an error IsConflict reports when someone
// moved the key first.
func (k *KV) CompareAndSet(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	if revision == 0 {
		return k.Create(ctx, key, value)
	}
	return k.Update(ctx, key, value, revision)
}

// IsConflict reports whether err is a lost compare-and-set: Create found the
// key already there, or Update's revision was not the key's latest.
func IsConflict(err error) bool {
	return errors.Is(err, ErrKeyExists) || errors.Is(err, ErrWrongRevision)
}

// Put stores value unconditionally, returning its revision.
func (k *KV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	rev, err := k.kv.Put(ctx, encodeKey(key), value)
	if err != nil {
		return 0, k.err("put", key, err)
	}
	return rev, nil
}

// Delete removes key. Deleting a missing key is not an error.
func (k *KV) Delete(ctx context.Context, key string) error {
	if err := k.kv.Delete(ctx, encodeKey(key)); err != nil {
		return k.err("delete", key, err)
	}
	return nil
}

// Keys lists the bucket's current keys.
func (k *KV) Keys(ctx context.Context) ([]string, error) {
	l, err := k.kv.ListKeys(ctx)
	if err != nil {
		return nil, k.err("keys", "", err)
	}
	defer func() { _ = l.Stop() }()
	var keys []string
	for key := range l.Keys() {
		keys = append(keys, decodeKey(key))
	}
	return keys, nil
}

func (k *KV) err(op, key string, err error) error {
	var sentinel error
	switch {
	case op == "create" && errors.Is(err, jetstream.ErrKeyExists):
		sentinel = ErrKeyExists
	case op == "update" && (errors.Is(err, jetstream.ErrKeyRevisionMismatch) ||
		errors.Is(err, jetstream.ErrKeyExists) || isWrongLastSeq(err)):
		sentinel = ErrWrongRevision
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		sentinel = ErrNotFound
	}
	if sentinel != nil {
		return fmt.Errorf("kv %s %s %q: %w", k.bucket, op, key, sentinel)
	}
	return fmt.Errorf("kv %s %s %q: %w", k.bucket, op, key, err)
}

func isWrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// encodeKey maps any string to a valid NATS key, injectively: bytes outside
// [A-Za-z0-9_/-] become =XX (hex), '=' included. Dots are escaped too, so a
// key can never start or end with one or hold an empty token.
func encodeKey(key string) string {
	if key == "" {
		return "." // invalid on purpose: NATS rejects it with ErrInvalidKey
	}
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '/' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('=')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}

func decodeKey(s string) string {
	if !strings.Contains(s, "=") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '=' && i+2 < len(s) {
			if v, ok := unhex(s[i+1], s[i+2]); ok {
				b.WriteByte(v)
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func unhex(a, b byte) (byte, bool) {
	h := func(c byte) (byte, bool) {
		switch {
		case c >= '0' && c <= '9':
			return c - '0', true
		case c >= 'A' && c <= 'F':
			return c - 'A' + 10, true
		}
		return 0, false
	}
	x, ok1 := h(a)
	y, ok2 := h(b)
	return x<<4 | y, ok1 && ok2
}
