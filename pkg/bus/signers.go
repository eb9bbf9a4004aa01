package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"
)

// The signers bucket: written by the operator's provisioning, read by every
// consumer (docs/decisions/099-signed-events.md).

// putSigners makes BucketSigners hold exactly pubs: each identity's public
// key, and no identity pubs does not name (a key taken out is revoked).
func (c *Conn) putSigners(ctx context.Context, pubs map[string]string) error {
	for id, pub := range pubs {
		if !nkeys.IsValidPublicUserKey(pub) {
			return fmt.Errorf("bus: signers: %s: not a public user NKey", id)
		}
	}
	kv, err := c.js.KeyValue(ctx, BucketSigners)
	if err != nil {
		return fmt.Errorf("bus: signers: %w", err)
	}
	for _, id := range slices.Sorted(maps.Keys(pubs)) {
		if e, err := kv.Get(ctx, id); err == nil && string(e.Value()) == pubs[id] {
			continue
		}
		if _, err := kv.Put(ctx, id, []byte(pubs[id])); err != nil {
			return fmt.Errorf("bus: signers: put %s: %w", id, err)
		}
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return fmt.Errorf("bus: signers: %w", err)
	}
	for k := range keys.Keys() {
		if _, ok := pubs[k]; !ok {
			if err := kv.Delete(ctx, k); err != nil {
				return fmt.Errorf("bus: signers: delete %s: %w", k, err)
			}
		}
	}
	return nil
}

// signersWaitLog is how long WatchSigners waits before it says what it is
// waiting for, and then again between reminders.
const signersWaitLog = 5 * time.Second

// WatchSigners returns the signers BucketSigners holds, kept up to date
// until ctx ends. It waits until the bucket exists and holds a key — the
// operator's provisioning writes them — saying in the log what it waits
// for, since until then no signature can be checked.
func (c *Conn) WatchSigners(ctx context.Context) (*Signers, error) {
	s, _ := NewSigners(nil)
	var w jetstream.KeyWatcher
	next := time.Now().Add(signersWaitLog)
	for w == nil {
		kv, err := c.js.KeyValue(ctx, BucketSigners)
		if err == nil {
			w, err = kv.WatchAll(ctx)
		}
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("bus: signers: %w", ctx.Err())
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("bus: signers: %w", err)
		}
		if time.Now().After(next) {
			c.log.Warn("waiting for the signers bucket, which the operator's provisioning creates: no event can be verified until then",
				"bucket", BucketSigners)
			next = time.Now().Add(signersWaitLog)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: signers: %w", ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	ready := make(chan struct{})
	var once sync.Once
	go func() {
		defer w.Stop() //nolint:errcheck // the watch ends with ctx
		initial := true
		for e := range w.Updates() {
			switch {
			case e == nil:
				initial = false
			case e.Operation() == jetstream.KeyValuePut:
				if err := s.set(e.Key(), string(e.Value())); err != nil {
					c.log.Error("signers bucket: a key that is not a public NKey is ignored", "identity", e.Key(), "err", err)
				}
			default:
				s.remove(e.Key())
			}
			if !initial && s.Len() > 0 {
				once.Do(func() { close(ready) })
			}
		}
	}()
	t := time.NewTicker(signersWaitLog)
	defer t.Stop()
	for {
		select {
		case <-ready:
			c.log.Info("signers loaded", "identities", s.Len())
			return s, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("bus: signers: %w", ctx.Err())
		case <-t.C:
			c.log.Warn("waiting for the operator's provisioning to write the identities' public keys to the signers bucket (`the-loop auth signers`): no event can be verified until then",
				"bucket", BucketSigners)
		}
	}
}

// LoadSigners reads BucketSigners once.
func (c *Conn) LoadSigners(ctx context.Context) (*Signers, error) {
	kv, err := c.js.KeyValue(ctx, BucketSigners)
	if err != nil {
		return nil, fmt.Errorf("bus: signers: %w", err)
	}
	s, _ := NewSigners(nil)
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("bus: signers: %w", err)
	}
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue
			}
			return nil, fmt.Errorf("bus: signers: %s: %w", k, err)
		}
		if err := s.set(k, string(e.Value())); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SignersFile is the public signers file of pubs (identity → public NKey),
// as `the-loop auth init` writes it: JSON, nothing secret.
func SignersFile(pubs map[string]string) []byte {
	b, _ := json.MarshalIndent(pubs, "", "  ")
	return append(b, '\n')
}

// ReadSignersFile reads a signers file (SignersFile), checking every key.
func ReadSignersFile(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("signers file: %w", err)
	}
	var pubs map[string]string
	if err := json.Unmarshal(b, &pubs); err != nil {
		return nil, fmt.Errorf("signers file %s: %w", path, err)
	}
	if len(pubs) == 0 {
		return nil, fmt.Errorf("signers file %s names no identity", path)
	}
	for id, pub := range pubs {
		if !nkeys.IsValidPublicUserKey(pub) {
			return nil, fmt.Errorf("signers file %s: %s: not a public user NKey", path, id)
		}
	}
	return pubs, nil
}
