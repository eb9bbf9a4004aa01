package ingressgithub

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/pkg/config"
)

// BenchmarkPollQuiet is what polling costs GitHub when nothing happens
// (issue 30): a cycle over quietRepos repositories, each with labelled open
// work items that have comments, after a first cycle has seen them all.
// Each repository must cost one conditional listing answered 304 Not
// Modified, which GitHub does not charge to the rate limit, and nothing
// more; the benchmark fails otherwise. ns/op is one cycle; gh-requests/repo
// and gh-charged/repo (requests not answered 304) are per repository and
// cycle, counted by the GitHub fake.
func BenchmarkPollQuiet(b *testing.B) {
	const quietRepos = 20
	gh := ghfake.New(b)
	gh.AddToken(pollToken, botLogin)
	var repos []string
	for i := range quietRepos {
		r := fmt.Sprintf("octo/quiet-%02d", i)
		gh.AddRepo(r)
		for range 3 {
			is := gh.AddIssue(r, "alice", "Work", "please", DefaultConfig().Label)
			gh.AddComment(r, is.Number, "alice", "a comment from before")
		}
		repos = append(repos, r)
	}
	e := newEnv(b, withConfig(func(c *Config) {
		c.Token = config.NewSecret(pollToken)
		c.APIURL = gh.URL()
		c.Mode, c.PollRepos = string(ModePoll), strings.Join(repos, ",")
	}))
	p, err := e.svc.newPoller()
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	// The first cycles see every work item and keep the listings' ETags.
	for range 2 {
		if err := p.Cycle(ctx); err != nil {
			b.Fatal(err)
		}
	}
	from := len(gh.Requests())
	cycles := 0
	for b.Loop() {
		if err := p.Cycle(ctx); err != nil {
			b.Fatal(err)
		}
		cycles++
	}
	b.StopTimer()
	reqs := gh.Requests()[from:]
	charged := 0
	for _, r := range reqs {
		if r.Status != http.StatusNotModified {
			charged++
		}
	}
	per := float64(len(reqs)) / float64(cycles*quietRepos)
	b.ReportMetric(per, "gh-requests/repo")
	b.ReportMetric(float64(charged)/float64(cycles*quietRepos), "gh-charged/repo")
	if len(reqs) != cycles*quietRepos || charged != 0 {
		b.Errorf("%d quiet cycles over %d repositories: %d requests, %d not answered 304; want %d, all 304",
			cycles, quietRepos, len(reqs), charged, cycles*quietRepos)
	}
}
