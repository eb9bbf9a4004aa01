package workspace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Two locks values stand for two processes: they share nothing but the
// lock file.

func TestLockWaiterGivesUpWithItsContext(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	var a, b locks
	unlock, err := a.lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second process's lock = %v, want a deadline", err)
	}
	// The same process's second goroutine waits in Go, not in flock.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	if _, err := a.lock(ctx2, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second goroutine's lock = %v, want a deadline", err)
	}
}

// TestLockFollowsARemovedFile: the holder removes the lock file; the waiter
// then holds a lock on the file at the path, not on the removed one.
func TestLockFollowsARemovedFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "x.lock")
	var a, b locks
	unlock, err := a.lock(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	var unlockB func()
	go func() {
		var err error
		unlockB, err = b.lock(context.Background(), path)
		got <- err
	}()
	time.Sleep(20 * time.Millisecond) // let b block in flock, if it gets there first
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	unlock()
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	defer unlockB()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the waiter holds no file at the path: %v", err)
	}
	// A third process must wait for b now.
	var c locks
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.lock(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third lock = %v while b holds it, want a deadline", err)
	}
}
