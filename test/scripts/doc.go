// Package scripts tests the repository's shell scripts that prepare a
// machine for the tests (scripts/), each run from a copy in a temporary
// directory against stand-in commands, so that nothing of the machine they
// run on is read or changed.
package scripts
