package workspace

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// Locks: a work item's directory and a mirror are each guarded by a lock
// file beside them (<root>/items/<slug>.lock, <mirror>.lock), held with
// flock so that dispatcher processes sharing the root exclude each other,
// and by an in-process lock on the same path, so that goroutines of one
// process queue in Go rather than in the kernel, and give up when their ctx
// ends.
//
// Order: an item's lock, then one mirror's lock at a time; never an item's
// lock while holding a mirror's. Remove deletes an item's lock file while
// holding it; flock sees to it that a waiter then locks the new file.

// locks is the in-process half: one semaphore per path, dropped when no one
// holds or waits for it.
type locks struct {
	mu sync.Mutex
	by map[string]*pathLock
}

type pathLock struct {
	sem   chan struct{}
	users int
}

// lock takes path's lock; unlock releases it.
func (l *locks) lock(ctx context.Context, path string) (unlock func(), err error) {
	l.mu.Lock()
	if l.by == nil {
		l.by = map[string]*pathLock{}
	}
	pl := l.by[path]
	if pl == nil {
		pl = &pathLock{sem: make(chan struct{}, 1)}
		l.by[path] = pl
	}
	pl.users++
	l.mu.Unlock()
	leave := func() {
		l.mu.Lock()
		if pl.users--; pl.users == 0 {
			delete(l.by, path)
		}
		l.mu.Unlock()
	}

	select {
	case pl.sem <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, fmt.Errorf("waiting for %s: %w", path, ctx.Err())
	}
	f, err := flock(ctx, path)
	if err != nil {
		<-pl.sem
		leave()
		return nil, err
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
		<-pl.sem
		leave()
	}, nil
}

// flock opens (creating) the lock file at path and takes its exclusive
// lock. The file may be removed by its holder (Remove does, so that lock
// files do not pile up): a lock taken on a file no longer at path is
// dropped and taken again on the file there now.
func flock(ctx context.Context, path string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(path), dirMode); err != nil {
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o666)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if err := flockFile(ctx, f); err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		held, err1 := f.Stat()
		there, err2 := os.Stat(path)
		if err1 == nil && err2 == nil && os.SameFile(held, there) {
			return f, nil
		}
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("waiting for %s: %w", path, err)
		}
	}
}

// flockFile takes f's exclusive lock, or closes f and fails when ctx ends
// first. A blocking flock cannot be interrupted, so the goroutine waiting
// in it is left to release the lock, if it ever gets it, and to close f.
func flockFile(ctx context.Context, f *os.File) error {
	fd := int(f.Fd())
	err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB)
	if err == nil {
		return nil
	}
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		_ = f.Close()
		return err
	}
	done := make(chan error, 1)
	go func() {
		for {
			err := syscall.Flock(fd, syscall.LOCK_EX)
			if !errors.Is(err, syscall.EINTR) {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			_ = f.Close()
		}
		return err
	case <-ctx.Done():
		go func() {
			if <-done == nil {
				_ = syscall.Flock(fd, syscall.LOCK_UN)
			}
			_ = f.Close()
		}()
		return ctx.Err()
	}
}
