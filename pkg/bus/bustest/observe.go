package bustest

import (
	"testing"

	"github.com/nats-io/nats.go"
)

// Observed is one message a plain NATS subscriber saw.
type Observed struct {
	Subject string
	Header  nats.Header
	Data    []byte
}

// Observe subscribes a plain NATS connection to the server at url on
// subjects and calls fn with every message, one at a time, in the order the
// server relayed them: all subjects feed one channel, which the connection's
// reader fills in order (a callback subscription each would run on its own
// goroutine and could reorder them). It lets a service's test watch the
// bus's own traffic ($JS.ACK acknowledgements, publishes) without importing
// NATS. The subscriptions are in place when Observe returns; the connection
// closes when the test ends.
func Observe(t testing.TB, url string, subjects []string, fn func(Observed)) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Name("test-observer"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	ch := make(chan *nats.Msg, 4096)
	for _, subject := range subjects {
		if _, err := nc.ChanSubscribe(subject, ch); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	go func() {
		for m := range ch {
			fn(Observed{Subject: m.Subject, Header: m.Header, Data: m.Data})
		}
	}()
}
