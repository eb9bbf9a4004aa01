// Package testkit holds the helpers every test package of this module shares:
// golden files that rewrite themselves on request, the shared testdata folder
// of the workspace, a buffer safe to read while a goroutine writes it, and
// polling with a deadline instead of sleeping (WaitFor), and a log capture
// (Logs). It is imported by tests only.
package testkit

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"time"
)

// Golden compares got with testdata/name (relative to the test's package);
// with UPDATE=1 in the environment it rewrites the file first.
func Golden(t TB, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if os.Getenv("UPDATE") == "1" {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden %s (run with UPDATE=1 to create it): %v", path, err)
	}
	if !bytes.Equal(want, got) {
		t.Errorf("%s differs (UPDATE=1 rewrites it):\nwant %s\ngot  %s", path, want, got)
	}
}

// RepoRoot is the module's root directory.
func RepoRoot() string {
	return repoRoot()
}

// ReadRepoFile returns the file at rel (slash-separated, from the
// repository root) as a string, panicking if it cannot be read: for
// package-level fixtures shared with the docs.
func ReadRepoFile(rel string) string {
	b, err := os.ReadFile(filepath.Join(repoRoot(), filepath.FromSlash(rel)))
	if err != nil {
		panic(err)
	}
	return string(b)
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// SharedTestdata returns the workspace's shared testdata folder joined with
// elem (../shared/testdata from the repository root), or skips the test with
// a clear message when it is absent: a clone outside the workspace has none.
func SharedTestdata(t TB, elem ...string) string {
	t.Helper()
	path := filepath.Join(append([]string{RepoRoot(), "..", "shared", "testdata"}, elem...)...)
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared testdata %s is absent (a clone outside the workspace): skipping", path)
	}
	return path
}

// SyncBuffer is a bytes.Buffer a test may read while another goroutine
// writes to it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Bytes returns a copy of what was written so far.
func (s *SyncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// Failer is what a wait needs of a test: *testing.T and *testing.B satisfy
// it, as does every other helper's TB.
type Failer interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Patience is how long WaitFor waits: generous, because a loaded machine
// makes slow passes, and a wait that holds returns at once however long it
// may take.
const Patience = 90 * time.Second

// WaitFor polls cond until it holds, failing t after Patience with what it
// was waiting for.
func WaitFor(t Failer, what string, cond func() bool) {
	t.Helper()
	WaitWithin(t, Patience, what, cond)
}

// WaitWithin is WaitFor with its own deadline d: for a wait whose deadline
// is part of what the test asserts, or whose failure should come sooner.
func WaitWithin(t Failer, d time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("timed out after %s waiting for %s", d, what)
	}
}

// Poll calls cond until it holds or d passes, and reports which. It checks
// often at first and less often later (5 ms doubling to 100 ms): quick
// conditions pass quickly, and slow ones (an HTTP round trip, a file read)
// are not hammered.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	pause := 5 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
	return true
}
