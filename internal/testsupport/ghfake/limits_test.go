package ghfake

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-github/v62/github"
)

// past is a manual-clock start well before the wall clock: go-github
// compares x-ratelimit-reset with time.Now, and a reset in the wall past
// keeps its client-side cache out of tests that are about the fake.
var past = time.Date(2020, 1, 6, 9, 0, 0, 0, time.UTC)

func comment(t *testing.T, gh *github.Client, body string) (*github.IssueComment, *github.Response, error) {
	return gh.Issues.CreateComment(t.Context(), "octo", "repo", 1, &github.IssueComment{Body: github.String(body)})
}

func abuse(t *testing.T, err error) *github.AbuseRateLimitError {
	t.Helper()
	var ae *github.AbuseRateLimitError
	if !errors.As(err, &ae) {
		t.Fatalf("err = %v (%T), want *github.AbuseRateLimitError", err, err)
	}
	return ae
}

func TestWriteLogWait(t *testing.T) {
	t.Parallel()
	t0 := past
	at := func(offsets ...time.Duration) []time.Time {
		var ts []time.Time
		for _, o := range offsets {
			ts = append(ts, t0.Add(o))
		}
		return ts
	}
	for _, tc := range []struct {
		name          string
		log           []time.Time
		now           time.Duration
		perMin, perHr int
		want          time.Duration
	}{
		{"empty", nil, 0, 2, 5, 0},
		{"under both", at(0), time.Second, 2, 5, 0},
		{"minute full", at(0, 10*time.Second), 20 * time.Second, 2, 5, 40 * time.Second},
		{"minute nearly slid", at(0, 10*time.Second), 50 * time.Second, 2, 5, 10 * time.Second},
		{"first left the minute", at(0, 10*time.Second), time.Minute, 2, 5, 0},
		{"minute open again", at(0, 10*time.Second), 70 * time.Second, 2, 5, 0},
		{"hour full", at(0, 2*time.Minute, 4*time.Minute), 10 * time.Minute, 2, 3, 50 * time.Minute},
		{"hour and minute: the longer wins", at(0, 2*time.Minute, 10*time.Minute), 10 * time.Minute, 1, 3, 50 * time.Minute},
		{"old entries pruned", at(0, time.Minute), time.Hour + time.Minute, 2, 2, 0},
		{"budgets off", at(0, 0, 0), 0, 0, 0, 0},
	} {
		l := &writeLog{times: tc.log}
		if got := l.wait(t0.Add(tc.now), tc.perMin, tc.perHr); got != tc.want {
			t.Errorf("%s: wait = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestSecondaryLimitPerMinute(t *testing.T) {
	t.Parallel()
	clk := NewManualClock(past)
	s, gh := start(t, WithClock(clk.Now), WithSecondaryLimits(3, 0))
	s.AddIssue(repoName, "octo", "work item", "")

	for i := range 3 {
		if _, _, err := comment(t, gh, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	_, resp, err := comment(t, gh, "one too many")
	ae := abuse(t, err)
	if ae.RetryAfter == nil || *ae.RetryAfter != time.Minute {
		t.Errorf("RetryAfter = %v, want 1m", ae.RetryAfter)
	}
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Retry-After") != "60" || resp.Header.Get("X-RateLimit-Remaining") == "0" {
		t.Errorf("status %d Retry-After %q remaining %q", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("X-RateLimit-Remaining"))
	}
	if !strings.Contains(ae.Message, "You have exceeded a secondary rate limit") {
		t.Errorf("message = %q", ae.Message)
	}

	// go-github now refuses on its own, on the wall clock, without asking:
	// the reason a manual-clock test needs a new client after a limit.
	before := s.Counts().Requests
	_, _, err = comment(t, gh, "refused by the client")
	abuse(t, err)
	if s.Counts().Requests != before {
		t.Errorf("go-github sent a request during Retry-After")
	}

	// Reads are not content creation, and budgets are per token.
	if _, _, err := newClient(t, s, botToken).Issues.Get(t.Context(), "octo", "repo", 1); err != nil {
		t.Errorf("GET while limited: %v", err)
	}
	s.AddToken("ghp_other", "other")
	if _, _, err := comment(t, newClient(t, s, "ghp_other"), "other token"); err != nil {
		t.Errorf("another token while limited: %v", err)
	}

	clk.Advance(59 * time.Second)
	_, _, err = comment(t, newClient(t, s, botToken), "one second early")
	if ae := abuse(t, err); *ae.RetryAfter != time.Second {
		t.Errorf("RetryAfter one second early = %v, want 1s", *ae.RetryAfter)
	}
	clk.Advance(time.Second)
	if _, _, err := comment(t, newClient(t, s, botToken), "on time"); err != nil {
		t.Errorf("after Retry-After: %v", err)
	}
	if c := s.Counts(); c.SecondaryLimited != 2 || c.Comments != 5 {
		t.Errorf("Counts() = %+v, want 2 limited, 5 comments", c)
	}
}

func TestSecondaryLimitPerHour(t *testing.T) {
	t.Parallel()
	clk := NewManualClock(past)
	s, _ := start(t, WithClock(clk.Now), WithSecondaryLimits(0, 5))
	s.AddIssue(repoName, "octo", "work item", "")
	for i := range 5 {
		if _, _, err := comment(t, newClient(t, s, botToken), fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Minute)
	}
	// Every content-creating endpoint shares the budget.
	gh := newClient(t, s, botToken)
	_, _, err := gh.Issues.Create(t.Context(), "octo", "repo", &github.IssueRequest{Title: github.String("x")})
	if ae := abuse(t, err); *ae.RetryAfter != 55*time.Minute {
		t.Errorf("RetryAfter = %v, want 55m (the first write leaves the hour)", *ae.RetryAfter)
	}
	_, _, err = newClient(t, s, botToken).Issues.EditComment(t.Context(), "octo", "repo", s.Comments(repoName, 1)[0].ID, &github.IssueComment{Body: github.String("e")})
	abuse(t, err)
	_, _, err = newClient(t, s, botToken).Reactions.CreateIssueReaction(t.Context(), "octo", "repo", 1, "rocket")
	abuse(t, err)
	clk.Advance(55 * time.Minute)
	if _, _, err := comment(t, newClient(t, s, botToken), "next hour"); err != nil {
		t.Errorf("after the hour: %v", err)
	}
}

func TestSecondaryLimitStatus429(t *testing.T) {
	t.Parallel()
	clk := NewManualClock(past)
	s, gh := start(t, WithClock(clk.Now), WithSecondaryLimits(1, 0), WithSecondaryLimitStatus(http.StatusTooManyRequests))
	s.AddIssue(repoName, "octo", "work item", "")
	if _, _, err := comment(t, gh, "ok"); err != nil {
		t.Fatal(err)
	}
	_, _, err := comment(t, gh, "limited")
	// go-github v62 does not special-case 429: a plain ErrorResponse.
	er := errorResponse(t, err, http.StatusTooManyRequests)
	if er.Response.Header.Get("Retry-After") != "60" || !strings.Contains(er.Message, "secondary rate limit") {
		t.Errorf("Retry-After %q message %q", er.Response.Header.Get("Retry-After"), er.Message)
	}
}

func TestSecondaryLimitConcurrentWriters(t *testing.T) {
	t.Parallel()
	clk := NewManualClock(past)
	s, _ := start(t, WithClock(clk.Now), WithSecondaryLimits(20, 0))
	s.AddIssue(repoName, "octo", "work item", "")

	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := 0
	for g := range 8 {
		gh := newClient(t, s, botToken) // replicas sharing one credential
		wg.Go(func() {
			for i := range 5 {
				if _, _, err := comment(t, gh, fmt.Sprintf("%d-%d", g, i)); err == nil {
					mu.Lock()
					ok++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	cs := s.Comments(repoName, 1)
	if ok != 20 || len(cs) != 20 {
		t.Errorf("%d writes accepted, %d stored; want exactly the budget, 20", ok, len(cs))
	}
	for i := 1; i < len(cs); i++ {
		if cs[i].ID <= cs[i-1].ID {
			t.Fatalf("comment ids not increasing: %d then %d", cs[i-1].ID, cs[i].ID)
		}
	}
}

// TestSecondaryLimitScaledClock drives an unmodified go-github client
// through a limit on a clock 60 times faster than the wall clock: a fake
// minute lasts a wall second, and the client's own wall-clock handling of
// Retry-After and x-ratelimit-reset must agree with the fake.
func TestSecondaryLimitScaledClock(t *testing.T) {
	t.Parallel()
	s, gh := start(t, WithTimeScale(60), WithSecondaryLimits(2, 0))
	s.AddIssue(repoName, "octo", "work item", "")
	begin := s.Now()

	_, resp, err := gh.Users.Get(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	// The primary window is a fake hour: a wall minute.
	reset, _ := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
	if d := time.Until(time.Unix(reset, 0)); d < 50*time.Second || d > 61*time.Second {
		t.Errorf("x-ratelimit-reset is %v away, want about a wall minute", d)
	}

	// Write until refused; a loaded machine may fit more than two writes
	// into one fake minute, never fewer.
	var ae *github.AbuseRateLimitError
	accepted := 0
	for ae == nil && accepted < 50 {
		_, _, err := comment(t, gh, "burst")
		switch {
		case err == nil:
			accepted++
		case errors.As(err, &ae):
		default:
			t.Fatal(err)
		}
	}
	if ae == nil || accepted < 2 {
		t.Fatalf("accepted %d writes and no secondary limit", accepted)
	}
	// At most a fake minute to wait: one wall second, rounded up.
	if ae.RetryAfter == nil || *ae.RetryAfter != time.Second {
		t.Fatalf("RetryAfter = %v, want 1s of wall time", ae.RetryAfter)
	}
	// Honour Retry-After as a client under test would. This wait is the
	// behaviour being tested, not a synchronisation.
	<-time.After(*ae.RetryAfter)
	if _, _, err := comment(t, gh, "after Retry-After"); err != nil {
		t.Errorf("same client after Retry-After: %v", err)
	}
	if elapsed := s.Now().Sub(begin); elapsed < time.Minute {
		t.Errorf("fake time elapsed %v, want at least the minute waited", elapsed)
	}
	// Sleep waits fake time.
	wall := time.Now()
	if err := s.Sleep(t.Context(), 6*time.Second); err != nil || time.Since(wall) < 100*time.Millisecond {
		t.Errorf("Sleep(6s) at scale 60 took %v, %v; want 100ms", time.Since(wall), err)
	}
}

func TestPrimaryLimit(t *testing.T) {
	t.Parallel()
	clk := NewManualClock(past)
	s, gh := start(t, WithClock(clk.Now), WithPrimaryLimit(3))
	for range 3 {
		if _, _, err := gh.Users.Get(t.Context(), ""); err != nil {
			t.Fatal(err)
		}
	}
	_, resp, err := gh.Users.Get(t.Context(), "")
	var rle *github.RateLimitError
	if !errors.As(err, &rle) {
		t.Fatalf("err = %v (%T), want *github.RateLimitError", err, err)
	}
	if resp.StatusCode != http.StatusForbidden || rle.Rate.Remaining != 0 || rle.Rate.Limit != 3 || !rle.Rate.Reset.Time.Equal(past.Add(time.Hour)) {
		t.Errorf("status %d rate %+v, want 403, 0 of 3, reset %v", resp.StatusCode, rle.Rate, past.Add(time.Hour))
	}
	if !strings.HasPrefix(rle.Message, "API rate limit exceeded for user ID") {
		t.Errorf("message = %q", rle.Message)
	}
	// /rate_limit still answers, and says so.
	rl, _, err := gh.RateLimit.Get(t.Context())
	if err != nil || rl.Core.Remaining != 0 || rl.Core.Limit != 3 {
		t.Errorf("rate_limit = %+v, %v", rl.GetCore(), err)
	}
	// Writes are refused by the primary limit too, before any content
	// check.
	_, _, err = gh.Issues.Create(t.Context(), "octo", "repo", &github.IssueRequest{Title: github.String("x")})
	if !errors.As(err, &rle) {
		t.Errorf("create while exhausted = %v, want RateLimitError", err)
	}
	clk.Advance(time.Hour)
	if _, _, err := gh.Users.Get(t.Context(), ""); err != nil {
		t.Errorf("after reset: %v", err)
	}
	if c := s.Counts(); c.PrimaryLimited != 2 || c.Issues != 0 {
		t.Errorf("Counts() = %+v", c)
	}
}

func TestRequestLog(t *testing.T) {
	t.Parallel()
	clk := NewManualClock(past)
	s, gh := start(t, WithClock(clk.Now))
	s.AddIssue(repoName, "octo", "work item", "")
	if _, _, err := comment(t, gh, "x"); err != nil {
		t.Fatal(err)
	}
	_, _, _ = gh.Issues.Get(t.Context(), "octo", "repo", 9)
	want := []Request{
		{Method: "POST", Path: "/repos/octo/repo/issues/1/comments", Login: botLogin, Status: 201, Time: past},
		{Method: "GET", Path: "/repos/octo/repo/issues/9", Login: botLogin, Status: 404, Time: past},
	}
	if diff := cmp.Diff(want, s.Requests()); diff != "" {
		t.Errorf("Requests() (-want +got):\n%s", diff)
	}
}

// TestBurstUnderScaledClock is the ledger-writer's burst in miniature:
// 1,000 comments from two replicas sharing one token, against GitHub's
// default budgets (80 a minute, 500 an hour) on a clock 3,600 times faster
// than the wall clock, each replica waiting out Retry-After as told. It
// checks that the fake never accepts more than a budget allows in any
// window, and that such a burst costs seconds of wall time.
func TestBurstUnderScaledClock(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of wall time")
	}
	t.Parallel()
	s, _ := start(t, WithTimeScale(3600))
	s.AddIssue(repoName, "octo", "work item", "")

	const total = 1000
	next := make(chan int, total)
	for i := range total {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for range 2 {
		gh := newClient(t, s, botToken)
		wg.Go(func() {
			for i := range next {
				for {
					_, _, err := comment(t, gh, fmt.Sprint(i))
					var ae *github.AbuseRateLimitError
					if errors.As(err, &ae) && ae.RetryAfter != nil {
						// go-github answers from its cache until the
						// wait is over; the wait is the behaviour under
						// test.
						<-time.After(*ae.RetryAfter)
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					break
				}
			}
		})
	}
	wg.Wait()
	if n := len(s.Comments(repoName, 1)); n != total {
		t.Fatalf("%d comments stored, want %d", n, total)
	}

	var times []time.Time
	for _, r := range s.Requests() {
		if r.Status == http.StatusCreated {
			times = append(times, r.Time)
		}
	}
	slices.SortFunc(times, func(a, b time.Time) int { return a.Compare(b) })
	for _, w := range []struct {
		d     time.Duration
		limit int
	}{{time.Minute, 80}, {time.Hour, 500}} {
		lo := 0
		for hi := range times {
			for !times[lo].After(times[hi].Add(-w.d)) {
				lo++
			}
			if n := hi - lo + 1; n > w.limit {
				t.Fatalf("%d writes accepted within %v ending %v, budget %d", n, w.d, times[hi], w.limit)
			}
		}
	}
	if elapsed := times[len(times)-1].Sub(times[0]); elapsed < time.Hour {
		t.Errorf("1,000 writes took %v of fake time; 500 an hour needs over an hour", elapsed)
	}
}
