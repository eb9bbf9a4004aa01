package bustest

import (
	"net/http"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// Observed is one message a Watch saw: its subject, headers and data.
type Observed struct {
	Subject string
	Header  http.Header
	Data    []byte
}

// Watch subscribes a plain connection of its own to subjects and returns the
// messages on one channel in the order the server relayed them: a test that
// checks the order of what a service sent (an acknowledgement before a
// publish) reads the wire, below package bus. The connection closes when t
// ends; the channel then stops receiving.
func (s *Server) Watch(t TB, name string, subjects ...string) <-chan Observed {
	t.Helper()
	nc, err := nats.Connect(s.URL(), nats.Name(name))
	if err != nil {
		t.Fatalf("bustest: watch: %v", err)
	}
	t.Cleanup(nc.Close)
	// All subjects feed one channel, which the connection's reader fills in
	// the order the server sent the messages (a callback subscription each
	// would run on its own goroutine and could reorder them).
	raw := make(chan *nats.Msg, 4096)
	for _, subject := range subjects {
		if _, err := nc.ChanSubscribe(subject, raw); err != nil {
			t.Fatalf("bustest: watch %s: %v", subject, err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatalf("bustest: watch: %v", err)
	}
	out := make(chan Observed, cap(raw))
	go func() {
		defer close(out)
		for m := range raw {
			out <- Observed{Subject: m.Subject, Header: http.Header(m.Header), Data: m.Data}
		}
	}()
	return out
}

// ConfigNkeys returns the public nkeys of the users a nats-server
// configuration file declares, as nats-server itself reads the file (its
// includes followed): an error is the server refusing the file.
func ConfigNkeys(confPath string) ([]string, error) {
	opts, err := server.ProcessConfigFile(confPath)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(opts.Nkeys))
	for _, u := range opts.Nkeys {
		keys = append(keys, u.Nkey)
	}
	return keys, nil
}
