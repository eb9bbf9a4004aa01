package httpserver

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"testing"
)

// TestClosingEndsLongAnswers: a long-lived answer learns of the shutdown
// through Closing and ends, so Shutdown does not wait for it to time out.
func TestClosingEndsLongAnswers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	started, ended := make(chan struct{}), make(chan bool, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		close(started)
		closing := Closing(r.Context())
		if closing == nil {
			ended <- false
			return
		}
		<-closing
		ended <- true
	})
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, ln, h, slog.New(slog.DiscardHandler)) }()
	res, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	<-started
	cancel()
	if !<-ended {
		t.Fatal("the request's context carries no Closing channel")
	}
	_, _ = io.Copy(io.Discard, res.Body)
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if Closing(context.Background()) != nil {
		t.Error("Closing outside Serve is not nil")
	}
}
