package ledgerwriter

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/pkg/githubclient"
)

// TestClassify: what each GitHub answer to a comment write means for the
// event, against the fake's real HTTP answers through go-github.
func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status       int
		header       http.Header
		permanent    bool
		maybeWritten bool
		reason       string
		wait         time.Duration
		limited      bool
	}{
		{status: http.StatusNotFound, permanent: true, reason: "not-found"},
		{status: http.StatusGone, permanent: true, reason: "gone"},
		{status: http.StatusUnprocessableEntity, permanent: true, reason: "invalid"},
		{status: http.StatusBadRequest, permanent: true, reason: "invalid"},
		{status: http.StatusForbidden, permanent: true, reason: "forbidden"},
		{status: http.StatusUnauthorized, reason: "unauthorized-token", wait: time.Minute},
		{status: http.StatusInternalServerError, maybeWritten: true, reason: "github-unavailable"},
		{status: http.StatusBadGateway, maybeWritten: true, reason: "github-unavailable"},
		// A 503 that says when to come back spaces the deliveries by it;
		// it is not a rate limit (decision 040).
		{status: http.StatusServiceUnavailable, header: http.Header{"Retry-After": {"3"}}, maybeWritten: true, reason: "github-unavailable", wait: 3 * time.Second},
		{status: http.StatusServiceUnavailable, header: http.Header{"Retry-After": {"Wed, 21 Oct 2015 07:28:00 GMT"}}, maybeWritten: true, reason: "github-unavailable"},
		{status: http.StatusTooManyRequests, header: http.Header{"Retry-After": {"7"}}, reason: "rate-limited", wait: 7 * time.Second, limited: true},
	}
	for _, tc := range cases {
		t.Run(http.StatusText(tc.status)+tc.header.Get("Retry-After"), func(t *testing.T) {
			t.Parallel()
			gh := ghfake.New(t)
			gh.AddRepo(testRepo)
			gh.AddToken(testToken, botLogin)
			gh.AddIssue(testRepo, "octocat", "x", "")
			gh.Inject(ghfake.Rule{Method: "POST", Status: tc.status, Header: tc.header})
			c, err := newGHClient(githubclient.Options{APIURL: gh.URL(), Token: testToken, Timeout: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			_, err = c.createComment(t.Context(), repoRef{Owner: "octo", Repo: "repo", Number: 1}, "x")
			var f *failure
			if !errors.As(err, &f) {
				t.Fatalf("err = %v, want a classified failure", err)
			}
			if f.permanent != tc.permanent || f.maybeWritten != tc.maybeWritten || f.reason != tc.reason || f.wait != tc.wait || f.limited != tc.limited {
				t.Errorf("got permanent=%v maybeWritten=%v reason=%s wait=%s limited=%v", f.permanent, f.maybeWritten, f.reason, f.wait, f.limited)
			}
		})
	}
}

func TestParseRef(t *testing.T) {
	t.Parallel()
	for ref, ok := range map[string]bool{
		"github:octo/repo#15": true, "github:Octo-Org/my.repo_x#1": true,
		"github:octo/repo#0": false, "github:octo/repo": false, "gitlab:octo/repo#1": false,
		"github:octo/../etc#1": false, "github:octo/..#1": false, "github:-octo/repo#1": false, "github:octo/repo#1 ": false,
	} {
		if _, got := parseRef(ref); got != ok {
			t.Errorf("parseRef(%q) ok = %v, want %v", ref, got, ok)
		}
	}
}
