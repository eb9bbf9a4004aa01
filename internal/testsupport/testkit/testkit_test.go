package testkit

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestRepoRootHoldsTheModule(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "go.mod"))
	if err != nil || len(b) == 0 {
		t.Fatalf("RepoRoot %s has no go.mod: %v", RepoRoot(), err)
	}
}

func TestSyncBufferAndWaitFor(t *testing.T) {
	var b SyncBuffer
	go b.Write([]byte("ready"))
	WaitFor(t, "the write", func() bool { return b.String() == "ready" })
}

func TestPollReportsATimeout(t *testing.T) {
	calls := 0
	if Poll(50*time.Millisecond, func() bool { calls++; return false }) {
		t.Fatal("Poll reported a condition that never held as met")
	}
	if calls < 2 {
		t.Fatalf("Poll checked %d times in 50 ms, want it to retry", calls)
	}
	n := 0
	if !Poll(time.Minute, func() bool { n++; return n == 3 }) || n != 3 {
		t.Fatalf("Poll stopped after %d checks, want 3 (the first that held)", n)
	}
}
