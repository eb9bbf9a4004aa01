package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// PutObject stores data as name in the object store bucket and returns its
// reference, "<bucket>/<name>", for an event to carry. Storing the same name
// again replaces it, so a producer's retry is harmless; callers that want
// dedup name objects by their content hash.
func (c *Conn) PutObject(ctx context.Context, bucket, name string, data []byte) (string, error) {
	os, err := c.js.ObjectStore(ctx, bucket)
	if err != nil {
		return "", fmt.Errorf("bus: object store %s: %w", bucket, err)
	}
	if _, err := os.PutBytes(ctx, name, data); err != nil {
		return "", fmt.Errorf("bus: put object %s/%s: %w", bucket, name, err)
	}
	return bucket + "/" + name, nil
}

// GetObject reads the object a reference from PutObject names. It returns
// ErrNotFound when the object is gone (older than the bucket's TTL).
func (c *Conn) GetObject(ctx context.Context, ref string) ([]byte, error) {
	bucket, name, ok := strings.Cut(ref, "/")
	if !ok || bucket == "" || name == "" {
		return nil, fmt.Errorf("bus: object reference %q is not <bucket>/<name>", ref)
	}
	os, err := c.js.ObjectStore(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("bus: object store %s: %w", bucket, err)
	}
	data, err := os.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, fmt.Errorf("bus: object %s: %w", ref, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: get object %s: %w", ref, err)
	}
	return data, nil
}
