package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/the-loop/bus/pkg/config"
)

// The reading verbs read through the control plane's API when
// LOOP_API_URL is set (docs/api.md): the same state, from wherever the
// admin address is reachable, with the read token rather than a bus
// credential.

// apiTimeout bounds one read.
const apiTimeout = 20 * time.Second

// apiClient reads the API at base with token.
type apiClient struct {
	base, token string
	http        *http.Client
}

// readThroughAPI returns the API client env names, or false when the
// reading verbs read NATS.
func readThroughAPI(env config.Env) (apiClient, bool, error) {
	s, err := loadSettings(env)
	if err != nil {
		return apiClient{}, false, err
	}
	base := strings.TrimRight(s.Common.API.URL, "/")
	if base == "" {
		return apiClient{}, false, nil
	}
	if !strings.HasPrefix(base, "http://") && !strings.HasPrefix(base, "https://") {
		return apiClient{}, false, fmt.Errorf("LOOP_API_URL %q is not an http(s) URL like http://127.0.0.1:9090/api/v1", base)
	}
	return apiClient{base: base, token: s.Common.API.Token.Reveal(), http: &http.Client{Timeout: apiTimeout}}, true, nil
}

// get reads path (with its query) into out.
func (c apiClient) get(ctx context.Context, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("the API at %s: %w", c.base, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("the API at %s: %w", c.base, err)
	}
	if res.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("the API at %s answered %d: %s", c.base, res.StatusCode, oneLine(e.Error))
		}
		return fmt.Errorf("the API at %s answered %d", c.base, res.StatusCode)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("the API at %s answered what this the-loop does not read (%v); are both the same version?", c.base, err)
	}
	return nil
}
