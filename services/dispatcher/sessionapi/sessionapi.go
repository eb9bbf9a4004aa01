// Package sessionapi is the one way an agent session reaches the loop: the
// dispatcher's session endpoint, an HTTP service on the dispatcher's host
// (sessions run there), and its client, which `the-loop ask` and `the-loop
// graph complete` use inside a session.
//
// A session holds no bus credential, no token of GitHub's or Slack's and no
// envelope key (docs/architecture.md, trust boundaries). What it holds is its
// own session token, given in its environment when the dispatcher starts it
// (LOOP_SESSION_URL, LOOP_SESSION_TOKEN). The token names the session's work
// item and is good for exactly what a session may do on that work item: ask a
// person a question, complete its own agent node, read its graph's state.
// Whatever a session raises carries the session as its actor, never a person.
package sessionapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"
)

// Paths of the endpoint.
const (
	PathAsk      = "/v1/ask"
	PathComplete = "/v1/complete"
	PathStatus   = "/v1/status"
	// PathEscalate hands the session's own agent node to a person: the
	// work item leaves it by escalate (POST).
	PathEscalate = "/v1/escalate"
)

// MaxRequestBytes bounds a request body: a question is at most a GitHub
// comment (65,536 characters, four bytes each at worst).
const MaxRequestBytes = 256 << 10

// tokenPrefix versions the token format.
const tokenPrefix = "lst1."

// NewToken returns a new session token for the work item ref and the hash
// the dispatcher keeps of it (the token itself is kept nowhere but in the
// session's environment).
func NewToken(ref string) (token, hash string, err error) {
	secret := make([]byte, 32)
	if _, err := rand.Read(secret); err != nil {
		return "", "", fmt.Errorf("session token: %w", err)
	}
	token = tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(ref)) + "." + base64.RawURLEncoding.EncodeToString(secret)
	return token, Hash(token), nil
}

// Hash is what the dispatcher stores of a token.
func Hash(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// Matches reports, in constant time, whether token hashes to hash.
func Matches(token, hash string) bool {
	return hash != "" && subtle.ConstantTimeCompare([]byte(Hash(token)), []byte(hash)) == 1
}

// TokenRef returns the work item a well-formed token names. It says nothing
// of the token's validity: only a stored hash does.
func TokenRef(token string) (string, bool) {
	rest, ok := strings.CutPrefix(token, tokenPrefix)
	if !ok {
		return "", false
	}
	enc, secret, ok := strings.Cut(rest, ".")
	if !ok || len(secret) != 43 {
		return "", false
	}
	ref, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || len(ref) == 0 || len(ref) > 512 {
		return "", false
	}
	return string(ref), true
}

// TokenPlaceholder stands where Scrub removed a session token.
const TokenPlaceholder = "[session token]"

// tokenPattern is a whole session token, whichever session's: sessions run
// as one OS user, so an agent can read another session's environment too.
var tokenPattern = regexp.MustCompile(`lst1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{43}`)

// Scrub removes session tokens from text a session sends toward GitHub and
// Slack: every well-formed token, and own's secret part wherever it stands
// (alone it is enough to rebuild the token, the rest being the work item's
// public ref). The general scrubber (pkg/redact) misses a token's secret
// when it happens to hold no digit, and cuts a token apart before a pattern
// could find it, so this runs first.
func Scrub(text, own string) string {
	text = tokenPattern.ReplaceAllLiteralString(text, TokenPlaceholder)
	if _, secret, ok := strings.Cut(strings.TrimPrefix(own, tokenPrefix), "."); ok && len(secret) == 43 {
		text = strings.ReplaceAll(text, secret, TokenPlaceholder)
	}
	return text
}

// AskRequest asks a person on the session's work item.
type AskRequest struct {
	// Ref, if set, must be the session's own work item.
	Ref      string `json:"ref,omitempty"`
	Question string `json:"question"`
	// Wait is how long to wait for the ledger to record the question.
	Wait Duration `json:"wait,omitempty"`
}

// AskAnswer is the question's event id and, once recorded, the URL of its
// comment on the work item.
type AskAnswer struct {
	ID  string `json:"id"`
	URL string `json:"url,omitempty"`
	// Pending: on the bus, not yet recorded when the wait ended.
	Pending bool `json:"pending,omitempty"`
}

// CompleteRequest completes the session's agent node.
type CompleteRequest struct {
	// Ref, if set, must be the session's own work item.
	Ref string `json:"ref,omitempty"`
}

// CompletePending answers a complete (202 Accepted) whose node's checks
// are still running (a verify-tests run): ask again after RetryAfter; the
// node completes when they pass.
type CompletePending struct {
	Ref        string   `json:"ref"`
	Node       string   `json:"node"`
	Running    string   `json:"running"`
	RetryAfter Duration `json:"retryAfter"`
}

// EscalateRequest hands the session's agent node to a person.
type EscalateRequest struct {
	// Ref, if set, must be the session's own work item.
	Ref string `json:"ref,omitempty"`
	// Reason says why a person is needed; it is shown to them.
	Reason string `json:"reason"`
}

// WorkItem is the work item the request names.
func (r EscalateRequest) WorkItem() string { return r.Ref }

// MaxEscalateReason bounds an escalation's reason, in characters.
const MaxEscalateReason = 500

// Duration is a time.Duration written as Go's duration text ("30s").
type Duration time.Duration

// MarshalJSON writes "30s".
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads "30s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Error is the endpoint's refusal: the HTTP status and what it says.
type Error struct {
	Status  int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("the session endpoint refused: %s (%d)", e.Message, e.Status)
}

// Client calls the session endpoint with the session's token.
type Client struct {
	URL   string
	Token string
	HTTP  *http.Client
}

// Ask asks question on the session's work item and waits up to wait for its
// record.
func (c Client) Ask(ctx context.Context, ref, question string, wait time.Duration) (AskAnswer, error) {
	var a AskAnswer
	err := c.call(ctx, PathAsk, AskRequest{Ref: ref, Question: question, Wait: Duration(wait)}, &a)
	return a, err
}

// Complete completes the session's agent node; out receives the answer (the
// dispatcher's graph.complete answer). While the node's checks run (the
// endpoint answers 202 with a CompletePending) it asks again until they
// have finished or ctx ends; progress, when set, hears each wait.
func (c Client) Complete(ctx context.Context, ref string, out any) error {
	return c.CompleteWatching(ctx, ref, out, nil)
}

// CompleteWatching is Complete, telling progress of each wait.
func (c Client) CompleteWatching(ctx context.Context, ref string, out any, progress func(CompletePending)) error {
	body, err := json.Marshal(CompleteRequest{Ref: ref})
	if err != nil {
		return err
	}
	for {
		status, b, err := c.send(ctx, http.MethodPost, PathComplete, nil, bytes.NewReader(body))
		if err != nil {
			return err
		}
		if status != http.StatusAccepted {
			return decodeAnswer(b, out)
		}
		var p CompletePending
		if err := json.Unmarshal(b, &p); err != nil {
			return fmt.Errorf("session endpoint: unreadable answer: %w", err)
		}
		if progress != nil {
			progress(p)
		}
		wait := time.Duration(p.RetryAfter)
		if wait <= 0 || wait > time.Minute {
			wait = 2 * time.Second
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the node's checks had not finished (%s): %w", p.Running, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// Escalate hands the session's own agent node to a person with reason.
func (c Client) Escalate(ctx context.Context, ref, reason string, out any) error {
	return c.call(ctx, PathEscalate, EscalateRequest{Ref: ref, Reason: reason}, out)
}

// ErrNoEndpoint: the process is not an agent session the dispatcher
// started (its environment names no endpoint or token).
var ErrNoEndpoint = errors.New("no session endpoint: LOOP_SESSION_URL and LOOP_SESSION_TOKEN are set by the dispatcher in an agent session")

// call POSTs in as JSON to path and decodes the answer into out.
func (c Client) call(ctx context.Context, path string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return c.do(ctx, http.MethodPost, path, nil, bytes.NewReader(body), out)
}

// get GETs path with query q and decodes the answer into out.
func (c Client) get(ctx context.Context, path string, q url.Values, out any) error {
	return c.do(ctx, http.MethodGet, path, q, nil, out)
}

func (c Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, out any) error {
	_, b, err := c.send(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	return decodeAnswer(b, out)
}

// decodeAnswer decodes a successful answer into out (nil: ignored).
func decodeAnswer(b []byte, out any) error {
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("session endpoint: unreadable answer: %w", err)
	}
	return nil
}

// send makes one request and returns a successful answer's status and body;
// a refusal is an *Error.
func (c Client) send(ctx context.Context, method, path string, q url.Values, body io.Reader) (int, []byte, error) {
	if c.URL == "" || c.Token == "" {
		return 0, nil, ErrNoEndpoint
	}
	u := strings.TrimRight(c.URL, "/") + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return 0, nil, fmt.Errorf("session endpoint: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.Token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("session endpoint %s: %w", c.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxRequestBytes))
	if err != nil {
		return 0, nil, fmt.Errorf("session endpoint: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(b, &e)
		if e.Error == "" {
			e.Error = http.StatusText(resp.StatusCode)
		}
		return resp.StatusCode, nil, &Error{Status: resp.StatusCode, Message: e.Error}
	}
	return resp.StatusCode, b, nil
}
