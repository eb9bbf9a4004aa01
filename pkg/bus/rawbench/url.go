package rawbench

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// RoundTripAt is RoundTrip on a connection of its own to the server at url,
// on a stream called name over subjects: the baseline of a service's
// benchmark, which imports no NATS itself (only pkg/bus and the test-support
// helpers do; scripts/check-deps.sh).
func RoundTripAt(b *testing.B, url, name string, subjects []string, subject string, data []byte) {
	b.Helper()
	nc, err := nats.Connect(url, nats.Name("bench-raw"))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	RoundTrip(b, nc, jetstream.StreamConfig{Name: name, Subjects: subjects}, subject, data)
}
