package socketfake

// TB is what New (and the Send and Wait helpers) needs of a test; *testing.T
// and *testing.B satisfy it. Naming no testing type keeps testing out of every
// binary that links this package (docs/decisions/081-test-support-tree.md).
type TB interface {
	Helper()
	Cleanup(f func())
	Fatal(args ...any)
	Fatalf(format string, args ...any)
}
