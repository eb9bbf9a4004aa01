//go:build loop_unsigned_bench

package bus

// signingDisabled: this binary was built for the signing benchmark's
// baseline (tag loop_unsigned_bench). It neither signs nor verifies, and is
// never a build to deploy.
const signingDisabled = true
