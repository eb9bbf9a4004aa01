package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/the-loop/bus/pkg/config"
)

// cmdHealth probes a service's admin endpoint and exits 0 when it answers
// 200. Container images carry no shell or curl, so the compose healthchecks
// run the binary itself: `the-loop health` (liveness, /healthz) or
// `the-loop health --ready` (/readyz).
func cmdHealth(ctx context.Context, args []string, env config.Env, stdout, stderr io.Writer) error {
	fs := newFlags("health", stderr)
	ready := fs.Bool("ready", false, "probe /readyz instead of /healthz")
	url := fs.String("url", "", "URL to probe (default: /healthz on LOOP_ADMIN_ADDR's port on loopback)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *url == "" {
		s, err := loadSettings(env)
		if err != nil {
			return err
		}
		_, port, err := net.SplitHostPort(s.Common.AdminAddr)
		if err != nil {
			return fmt.Errorf("LOOP_ADMIN_ADDR %q: %w", s.Common.AdminAddr, err)
		}
		path := "/healthz"
		if *ready {
			path = "/readyz"
		}
		*url = "http://" + net.JoinHostPort("127.0.0.1", port) + path
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
	if err != nil {
		return fmt.Errorf("%w: health: %v", errUsage, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health %s: %w", *url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health %s: %s", *url, resp.Status)
	}
	fmt.Fprintln(stdout, "ok")
	return nil
}
