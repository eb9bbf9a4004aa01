package testkit

// TB is what Golden (and SharedTestdata) needs of a test; *testing.T and
// *testing.B satisfy it. Naming no testing type keeps testing out of every
// binary that links this package (docs/decisions/081-test-support-tree.md).
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Skipf(format string, args ...any)
}
