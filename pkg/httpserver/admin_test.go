package httpserver

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAdminEndpoints(t *testing.T) {
	ready := NewReadiness()
	var connected error = errors.New("not connected")
	ready.Add("bus", func() error { return connected })
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "loop_test_things_total", Help: "things"})
	reg.MustRegister(c)
	c.Inc()

	ln, err := Listen("LOOP_ADMIN_ADDR", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, AdminMux(ready, reg), slog.New(slog.DiscardHandler)) }()
	base := "http://" + ln.Addr().String()

	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Errorf("/healthz = %d while not ready, want 200 (liveness never depends on NATS)", code)
	}
	if code, body := get("/readyz"); code != 503 || !strings.Contains(body, "not connected") {
		t.Errorf("/readyz = %d %s, want 503 naming the failed check", code, body)
	}
	connected = nil
	if code, _ := get("/readyz"); code != 200 {
		t.Errorf("/readyz = %d once ready, want 200", code)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "loop_test_things_total 1") {
		t.Errorf("/metrics = %d, lacks the service's counter", code)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
}

func TestListenBusyPort(t *testing.T) {
	ln, err := Listen("LOOP_ADMIN_ADDR", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := Listen("LOOP_ADMIN_ADDR", ln.Addr().String()); err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
		t.Errorf("second Listen = %v, want an error naming the address", err)
	}
}

// TestListenOnABusyPortNamesTheSetting: the error says which setting to
// change, and is still the system's EADDRINUSE.
func TestListenOnABusyPortNamesTheSetting(t *testing.T) {
	busy, err := Listen("LOOP_ADMIN_ADDR", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	_, err = Listen("LOOP_SLACK_EVENTS_ADDR", busy.Addr().String())
	if err == nil {
		t.Fatal("a second listener on a busy port")
	}
	if !strings.Contains(err.Error(), "LOOP_SLACK_EVENTS_ADDR="+busy.Addr().String()) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("err = %v, want the setting, the address and why", err)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Errorf("err = %v does not wrap EADDRINUSE", err)
	}
}
