package bustest

import (
	"context"
	"net/http"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/the-loop/bus/pkg/bus"
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

// ServerSidePath is what a holder of the operator's power can do without
// publishing as anyone: a stream named name that stores what is published on
// from and republishes it, headers and body intact, on to — a subject of
// another stream, which stores it as if someone had published it there. The
// message on to is signed by nobody who published there
// (docs/decisions/099-signed-events.md). to may take from's wildcards
// ({{wildcard(1)}}). It returns the publish of one raw message on a subject
// of from, with header as given and no signature of the bus's own.
func (s *Server) ServerSidePath(t TB, name, from, to string) func(subject string, header map[string][]string, data []byte) {
	t.Helper()
	nc := s.rawOperator(t, name)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: name, Subjects: []string{from}, Storage: jetstream.MemoryStorage,
		RePublish: &jetstream.RePublish{Source: from, Destination: to},
	}); err != nil {
		t.Fatalf("bustest: server-side path %s: %v", name, err)
	}
	return func(subject string, header map[string][]string, data []byte) {
		t.Helper()
		m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: data}
		for k, v := range header {
			m.Header[k] = append([]string(nil), v...)
		}
		pctx, pcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer pcancel()
		if _, err := js.PublishMsg(pctx, m); err != nil {
			t.Fatalf("bustest: publish on %s: %v", subject, err)
		}
	}
}

// PublishRaw publishes one message on subject as the operator (or anyone,
// without authorization) with plain NATS, below package bus: no signature
// but what header carries.
func (s *Server) PublishRaw(t TB, subject string, header map[string][]string, data []byte) {
	t.Helper()
	nc := s.rawOperator(t, "bustest-raw")
	m := &nats.Msg{Subject: subject, Header: nats.Header{}, Data: data}
	for k, v := range header {
		m.Header[k] = append([]string(nil), v...)
	}
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
}

// RawConn is a plain nats.go connection as the operator (as anyone without
// authorization), closed when t ends: for a benchmark's raw JetStream
// baseline on the same server as the system it is compared with.
func (s *Server) RawConn(t TB, name string) *nats.Conn {
	t.Helper()
	return s.rawOperator(t, name)
}

// rawOperator is a plain connection as the operator (as anyone without
// authorization), closed when t ends.
func (s *Server) rawOperator(t TB, name string) *nats.Conn {
	t.Helper()
	opts := []nats.Option{nats.Name(name), nats.CustomInboxPrefix(bus.InboxPrefix(bus.IdentityOperator))}
	if s.seeds != nil {
		kp, err := nkeys.FromSeed(s.seeds[bus.IdentityOperator])
		if err != nil {
			t.Fatal(err)
		}
		pub, _ := kp.PublicKey()
		opts = append(opts, nats.Nkey(pub, kp.Sign))
	}
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		t.Fatalf("bustest: connect: %v", err)
	}
	t.Cleanup(nc.Close)
	return nc
}
