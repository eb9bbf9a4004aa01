//go:build !unix

package repoinfo

// nonBlocking is not needed where named pipes are not files of a checkout.
const nonBlocking = 0
