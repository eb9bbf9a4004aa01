package tmuxtest

// TB is what Socket (and Boots, Inputs) needs of a test; *testing.T and
// *testing.B satisfy it. Naming no testing type keeps testing out of every
// binary that links this package (docs/decisions/081-test-support-tree.md).
type TB interface {
	Helper()
	Cleanup(f func())
	Fatal(args ...any)
	Skip(args ...any)
}
