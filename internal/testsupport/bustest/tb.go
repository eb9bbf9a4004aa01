package bustest

// TB is what the helpers need of a test or a benchmark. *testing.T and
// *testing.B satisfy it; declaring it here rather than naming testing.TB keeps
// the testing package out of the product binary, which links the fakes for
// `the-loop demo` (docs/decisions/081-test-support-tree.md).
type TB interface {
	Helper()
	Cleanup(f func())
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Skip(args ...any)
	TempDir() string
}

// Parent is a test that runs subtests of its own kind in parallel, as
// *testing.T does (T = *testing.T).
type Parent[T any] interface {
	TB
	Run(name string, f func(T)) bool
	Parallel()
}

// Bench is a benchmark that runs sub-benchmarks of its own kind and reports
// metrics, as *testing.B does (B = *testing.B).
type Bench[B any] interface {
	Run(name string, f func(B)) bool
	ReportMetric(n float64, unit string)
}
