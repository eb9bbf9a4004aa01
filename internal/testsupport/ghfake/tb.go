package ghfake

// TB is what the helpers need of a test or a benchmark. *testing.T and
// *testing.B satisfy it; declaring it here rather than naming testing.TB keeps
// the testing package out of the product binary, which links the fakes for
// `the-loop demo` (docs/decisions/081-test-support-tree.md).
type TB interface {
	Helper()
	Cleanup(f func())
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Errorf(format string, args ...any)
	Skip(args ...any)
	Skipf(format string, args ...any)
	TempDir() string
}
