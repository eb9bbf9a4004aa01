package testkit

import (
	"os"
	"path/filepath"
	"testing"
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
	WaitFor(t, 5e9, "the write", func() bool { return b.String() == "ready" })
}
