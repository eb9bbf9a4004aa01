package graph

import (
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"testing"
)

// golden compares got with testdata/name; UPDATE=1 rewrites the file.
func golden(t *testing.T, name, got string) {
	t.Helper()
	testkit.Golden(t, name, []byte(got))
}
