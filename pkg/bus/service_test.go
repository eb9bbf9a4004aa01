package bus_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

func stopService(t *testing.T, s *bus.Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
}

// TestServiceAnswers: an endpoint's answer, a refusal with its code, and any
// other handler error as an internal error reach the requester; a subject
// nobody answers fails at once with ErrNoResponders, also under the
// provisioned streams (none of them captures loop.svc).
func TestServiceAnswers(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	srv.Provision(t, bustest.FastTopology(1))
	server, client := srv.Connect(t, "svc-server"), srv.Connect(t, "svc-client")
	echo, refuse, broken := catalog.ServiceSubject("test", "echo"), catalog.ServiceSubject("test", "refuse"), catalog.ServiceSubject("test", "broken")
	svc, err := server.AddService(bus.ServiceSpec{Name: "the-loop-test", Version: "1.0.0", Endpoints: []bus.Endpoint{
		{Name: "echo", Subject: echo, Handler: func(_ context.Context, data []byte) ([]byte, error) {
			return append([]byte("echo: "), data...), nil
		}},
		{Name: "refuse", Subject: refuse, Handler: func(context.Context, []byte) ([]byte, error) {
			return nil, fmt.Errorf("wrapped: %w", bus.Fail(bus.CodeConflict, "%s is at a human gate", "github:octo/repo#1"))
		}},
		{Name: "broken", Subject: broken, Handler: func(context.Context, []byte) ([]byte, error) {
			return nil, errors.New("kv unreachable")
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer stopService(t, svc)
	ctx := context.Background()

	got, err := client.Request(ctx, echo, []byte("hello"))
	if err != nil || string(got) != "echo: hello" {
		t.Fatalf("echo = %q, %v", got, err)
	}
	var se *bus.ServiceError
	if _, err := client.Request(ctx, refuse, nil); !errors.As(err, &se) || se.Code != bus.CodeConflict || se.Description != "github:octo/repo#1 is at a human gate" {
		t.Errorf("refusal = %v (%#v)", err, se)
	}
	if _, err := client.Request(ctx, broken, nil); !errors.As(err, &se) || se.Code != bus.CodeInternal || se.Description != "kv unreachable" {
		t.Errorf("handler failure = %v (%#v)", err, se)
	}
	nobody := catalog.ServiceSubject("nobody", "graph.status")
	if _, err := client.Request(ctx, nobody, nil); !errors.Is(err, bus.ErrNoResponders) || !strings.Contains(err.Error(), nobody) {
		t.Errorf("request to nobody = %v, want ErrNoResponders naming the subject", err)
	}
}

// TestServiceQueueGroup: with two replicas each request is answered once,
// and when one stops the other answers the rest.
func TestServiceQueueGroup(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	client := srv.Connect(t, "svc-client")
	subject := catalog.ServiceSubject("test", "who")
	var mu sync.Mutex
	answered := map[string]int{}
	start := func(name string) *bus.Service {
		svc, err := srv.Connect(t, name).AddService(bus.ServiceSpec{Name: "the-loop-test", Version: "1.0.0", Endpoints: []bus.Endpoint{
			{Name: "who", Subject: subject, Handler: func(context.Context, []byte) ([]byte, error) {
				mu.Lock()
				defer mu.Unlock()
				answered[name]++
				return []byte(name), nil
			}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	a, b := start("replica-a"), start("replica-b")
	defer stopService(t, b)
	ctx := context.Background()
	const n = 40
	for range n {
		if _, err := client.Request(ctx, subject, nil); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	if total := answered["replica-a"] + answered["replica-b"]; total != n {
		t.Errorf("%d requests answered %d times: %v", n, total, answered)
	}
	mu.Unlock()
	stopService(t, a)
	for range 5 {
		got, err := client.Request(ctx, subject, nil)
		if err != nil || string(got) != "replica-b" {
			t.Fatalf("after replica-a stopped: %q, %v", got, err)
		}
	}
}

// TestServiceStopFinishesRequestInHand: Stop waits for the handler working
// a request and that request is answered; afterwards nobody answers.
func TestServiceStopFinishesRequestInHand(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	client := srv.Connect(t, "svc-client")
	subject := catalog.ServiceSubject("test", "slow")
	started, release := make(chan struct{}), make(chan struct{})
	svc, err := srv.Connect(t, "svc-server").AddService(bus.ServiceSpec{Name: "the-loop-test", Version: "1.0.0", Endpoints: []bus.Endpoint{
		{Name: "slow", Subject: subject, Handler: func(ctx context.Context, _ []byte) ([]byte, error) {
			close(started)
			<-release
			return []byte("done"), ctx.Err()
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	answer := make(chan error, 1)
	go func() {
		got, err := client.Request(context.Background(), subject, nil)
		if err == nil && string(got) != "done" {
			err = fmt.Errorf("answer %q", got)
		}
		answer <- err
	}()
	select {
	case <-started:
	case err := <-answer:
		t.Fatalf("answered without the handler: %v", err)
	}
	stopped := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		stopped <- svc.Stop(ctx)
	}()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a request was in hand", err)
	default:
	}
	close(release)
	if err := <-answer; err != nil {
		t.Errorf("the request in hand: %v", err)
	}
	if err := <-stopped; err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := client.Request(context.Background(), subject, nil); !errors.Is(err, bus.ErrNoResponders) {
		t.Errorf("after Stop: %v, want ErrNoResponders", err)
	}
}

// TestRequestTimeout: a service that does not answer before the deadline
// is ErrRequestTimeout, not a hang.
func TestRequestTimeout(t *testing.T) {
	t.Parallel()
	srv := bustest.NewServer(t)
	subject := catalog.ServiceSubject("test", "mute")
	release := make(chan struct{})
	svc, err := srv.Connect(t, "svc-server").AddService(bus.ServiceSpec{Name: "the-loop-test", Version: "1.0.0", Endpoints: []bus.Endpoint{
		{Name: "mute", Subject: subject, Handler: func(context.Context, []byte) ([]byte, error) {
			<-release
			return nil, nil
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer stopService(t, svc)
	defer close(release)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := srv.Connect(t, "svc-client").Request(ctx, subject, nil); !errors.Is(err, bus.ErrRequestTimeout) {
		t.Errorf("request = %v, want ErrRequestTimeout", err)
	}
}
