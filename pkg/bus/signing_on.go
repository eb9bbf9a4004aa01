//go:build !loop_unsigned_bench

package bus

// signingDisabled is true only in a binary built with the loop_unsigned_bench
// tag: the baseline of the signing benchmark (test/e2e), which measures what
// signing costs. No setting turns signing off.
const signingDisabled = false
