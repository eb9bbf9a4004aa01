package httpserver

import (
	"encoding/json"
	"net/http"
	"sort"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Readiness collects named readiness checks. A service registers one check per
// thing it needs (its bus connection, its consumers); /readyz answers 200 only
// when every check passes. Under `the-loop up` all five services register on
// one Readiness, so /readyz is ready when every one is.
type Readiness struct {
	mu     sync.Mutex
	checks map[string]func() error
}

// NewReadiness returns an empty set of checks. With no checks it is ready.
func NewReadiness() *Readiness { return &Readiness{checks: map[string]func() error{}} }

// Add registers check under name, replacing one of the same name.
func (r *Readiness) Add(name string, check func() error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.checks[name] = check
}

// Check runs every check and returns the failures by name.
func (r *Readiness) Check() map[string]string {
	r.mu.Lock()
	checks := make(map[string]func() error, len(r.checks))
	for k, v := range r.checks {
		checks[k] = v
	}
	r.mu.Unlock()
	failed := map[string]string{}
	for name, c := range checks {
		if err := c(); err != nil {
			failed[name] = err.Error()
		}
	}
	return failed
}

// Names lists the registered checks, sorted.
func (r *Readiness) Names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.checks))
	for k := range r.checks {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// AdminMux serves /healthz, /readyz and /metrics. reg is the service's own
// registry, never the global one.
func AdminMux(ready *Readiness, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		failed := ready.Check()
		w.Header().Set("Content-Type", "application/json")
		body := map[string]any{"ready": len(failed) == 0, "checks": ready.Names()}
		if len(failed) > 0 {
			body["failed"] = failed
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(body)
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return mux
}
