package sessionapi

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestCompleteAsksAgainWhileChecksRun: a 202 with a CompletePending makes
// the client wait RetryAfter and ask again, telling progress each time,
// until the endpoint answers; a refusal then is the error, and a context
// that ends first says the checks had not finished.
func TestCompleteAsksAgainWhileChecksRun(t *testing.T) {
	var asked atomic.Int32
	final := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != PathComplete || r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if asked.Add(1) < 3 {
			w.WriteHeader(http.StatusAccepted)
			_ = json.NewEncoder(w).Encode(CompletePending{Node: "implementation", Running: "the tests are running", RetryAfter: Duration(10 * time.Millisecond)})
			return
		}
		w.WriteHeader(final)
		if final == http.StatusOK {
			_, _ = w.Write([]byte(`{"to": "verification"}`))
			return
		}
		_, _ = w.Write([]byte(`{"error": "node implementation stays open: verify-tests failed"}`))
	}))
	defer srv.Close()
	c := Client{URL: srv.URL, Token: "tok"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	var ans struct{ To string }
	waits := 0
	if err := c.CompleteWatching(ctx, "", &ans, func(p CompletePending) { waits++ }); err != nil || ans.To != "verification" || waits != 2 {
		t.Fatalf("complete: %v, %+v after %d waits", err, ans, waits)
	}

	asked.Store(0)
	final = http.StatusConflict
	var e *Error
	if err := c.Complete(ctx, "", nil); !errors.As(err, &e) || e.Status != http.StatusConflict {
		t.Errorf("a refusal after the wait: %v", err)
	}

	asked.Store(-1000)
	short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
	defer stop()
	if err := c.Complete(short, "", nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("checks that outlast the context: %v", err)
	}
}
