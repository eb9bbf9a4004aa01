package poll

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// errNotModified: the answer is 304 for the ETag sent.
var errNotModified = errors.New("not modified")

// statusError is a non-2xx answer.
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("GitHub answered %d", e.code) }

// client is the few REST calls the poller makes, with conditional requests.
type client struct {
	base    string // ends in "/"
	token   string
	http    *http.Client
	observe func(string)
}

var nextLink = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

// maxPages bounds one listing (100 per page).
const maxPages = 20

// getAll GETs path (relative to base, with query) and every next page,
// decoding each page's JSON array into out (appending). etag is sent as
// If-None-Match on the first page; the returned etag is the first page's,
// and single reports whether there was only one page (an ETag then stands
// for the whole listing).
func getAll[T any](ctx context.Context, c *client, path string, etag string) (out []T, newETag string, single bool, err error) {
	u := c.base + path
	for page := 0; page < maxPages && u != ""; page++ {
		var items []T
		var hdr http.Header
		hdr, err = c.get(ctx, u, etag, &items)
		if page == 0 && errors.Is(err, errNotModified) {
			return nil, etag, true, err
		}
		if err != nil {
			return nil, "", false, err
		}
		out = append(out, items...)
		if page == 0 {
			newETag = hdr.Get("ETag")
		}
		etag = ""
		u = ""
		if m := nextLink.FindStringSubmatch(hdr.Get("Link")); m != nil {
			u = m[1]
			single = false
		} else if page == 0 {
			single = true
		}
	}
	return out, newETag, single, nil
}

func (c *client) get(ctx context.Context, u, etag string, into any) (http.Header, error) {
	if _, err := url.Parse(u); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if c.token != "" { // else the client's transport authenticates (a GitHub App)
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.observe("error")
		// The URL carries no secret; the token is in a header.
		return nil, fmt.Errorf("GET %s: %w", redactPath(u), err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotModified:
		c.observe("not_modified")
		return resp.Header, errNotModified
	case resp.StatusCode != http.StatusOK:
		c.observe("error")
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return resp.Header, fmt.Errorf("GET %s: %w", redactPath(u), &statusError{resp.StatusCode})
	}
	c.observe("ok")
	if err := json.NewDecoder(io.LimitReader(resp.Body, 32<<20)).Decode(into); err != nil {
		return nil, fmt.Errorf("GET %s: decode: %w", redactPath(u), err)
	}
	return resp.Header, nil
}

func redactPath(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Path
	}
	return "(url)"
}

// restIssue is the part of an issue (or PR, through the issues API) the
// poller reads.
type restIssue struct {
	Number        int64   `json:"number"`
	Title         string  `json:"title"`
	Body          *string `json:"body"`
	State         string  `json:"state"`
	HTMLURL       string  `json:"html_url"`
	RepositoryURL string  `json:"repository_url"`
	UpdatedAt     string  `json:"updated_at"`
	Comments      int     `json:"comments"`
	ClosedAt      *string `json:"closed_at"`
	Labels        []struct {
		Name string `json:"name"`
	} `json:"labels"`
	User struct {
		Login string `json:"login"`
	} `json:"user"`
	PullRequest *struct {
		MergedAt *string `json:"merged_at"`
		HTMLURL  string  `json:"html_url"`
	} `json:"pull_request"`
}

type restComment struct {
	ID      int64   `json:"id"`
	NodeID  string  `json:"node_id"`
	HTMLURL string  `json:"html_url"`
	Body    *string `json:"body"`
	User    *struct {
		Login string `json:"login"`
	} `json:"user"`
	AuthorAssociation string `json:"author_association"`
	CreatedAt         string `json:"created_at"`
	UpdatedAt         string `json:"updated_at"`
}

// repoFromURL reads owner/repo off an API repository_url.
func repoFromURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return ""
	}
	parts := strings.Split(strings.Trim(p.Path, "/"), "/")
	if len(parts) < 3 || parts[len(parts)-3] != "repos" {
		return ""
	}
	return parts[len(parts)-2] + "/" + parts[len(parts)-1]
}
