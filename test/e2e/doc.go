// Package e2e is the multi-process end-to-end suite (`make e2e`, build tag
// e2e): it builds the-loop and nats-server, runs a real nats-server process
// and the services as separate processes, drives them, and kills and restarts
// them. It imports nothing but the standard library and the binaries it
// builds, so it tests the system the way an operator runs it.
package e2e
