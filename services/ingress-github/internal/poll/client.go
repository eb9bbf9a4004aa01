package poll

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/go-github/v62/github"
)

// errNotModified: the answer is 304 for the ETag sent.
var errNotModified = errors.New("not modified")

// statusError is a non-2xx answer.
type statusError struct{ code int }

func (e *statusError) Error() string { return fmt.Sprintf("GitHub answered %d", e.code) }

// client is the few REST calls the poller makes, through the service's
// go-github client, with conditional requests: go-github has no ETag option
// on its typed calls, so each request is built with NewRequest and carries
// If-None-Match itself.
type client struct {
	gh      *github.Client
	observe func(string)
}

// maxPages bounds one listing (100 per page).
const maxPages = 20

// getAll GETs path (relative to the API base) with query q and every next
// page, decoding each page's JSON array into out (appending). etag is sent
// as If-None-Match on the first page; the returned etag is the first page's,
// and single reports whether there was only one page (an ETag then stands
// for the whole listing).
func getAll[T any](ctx context.Context, c *client, path string, q url.Values, etag string) (out []T, newETag string, single bool, err error) {
	for page := 0; page < maxPages; page++ {
		var items []T
		var resp *github.Response
		resp, err = c.get(ctx, path+"?"+q.Encode(), etag, &items)
		if page == 0 && errors.Is(err, errNotModified) {
			return nil, etag, true, err
		}
		if err != nil {
			return nil, "", false, err
		}
		out = append(out, items...)
		if page == 0 {
			newETag = resp.Header.Get("ETag")
			single = resp.NextPage == 0
		}
		if resp.NextPage == 0 {
			break
		}
		etag = ""
		q.Set("page", strconv.Itoa(resp.NextPage))
	}
	return out, newETag, single, nil
}

// get GETs u (relative to the API base) into into. The poller keeps the
// strings GitHub sent (timestamps included) in its own types rather than
// go-github's, so that what it synthesises is what a webhook would carry.
func (c *client) get(ctx context.Context, u, etag string, into any) (*github.Response, error) {
	path := u
	if p, _, ok := strings.Cut(u, "?"); ok {
		path = p // errors name the path only: the query is the listing's options
	}
	req, err := c.gh.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", path, err)
	}
	if etag != "" {
		req.Header.Set("If-None-Match", etag)
	}
	resp, err := c.gh.Do(ctx, req, into)
	var er *github.ErrorResponse
	switch {
	case err == nil:
		c.observe("ok")
		return resp, nil
	case errors.As(err, &er) && er.Response != nil && er.Response.StatusCode == http.StatusNotModified:
		c.observe("not_modified")
		return resp, errNotModified
	case errors.As(err, &er) && er.Response != nil:
		c.observe("error")
		return resp, fmt.Errorf("GET %s: %w", path, &statusError{er.Response.StatusCode})
	}
	// A rate limit (go-github refuses further requests until it resets),
	// a transport error, a timeout, or an answer that is not JSON.
	c.observe("error")
	return resp, fmt.Errorf("GET %s: %w", path, err)
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
