//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
)

// kind is how an event enters the system.
type kind int

const (
	// viaGitHub: Alice comments on the work item; GitHub sends
	// issue_comment. It is on GitHub already (no record), becomes
	// comment.human: one Slack message in the work item's thread, one
	// prompt.
	viaGitHub kind = iota
	// viaSlack: Alice replies in the work item's Slack thread. It becomes
	// work-item.reply: one mirror comment on GitHub, no Slack message (the
	// origin channel is excluded), one prompt.
	viaSlack
)

type sentEvent struct {
	tok  tok
	kind kind
}

// expectations are the exact outcomes of a list of sent events: every
// token once on GitHub (the origin comment or the ledger's mirror), once in
// Slack for GitHub comments (never for Slack replies), once as a prompt.
func expectations(sent []sentEvent) (github, slack, prompts []tok) {
	for _, e := range sent {
		github = append(github, e.tok)
		prompts = append(prompts, e.tok)
		if e.kind == viaGitHub {
			slack = append(slack, e.tok)
		}
	}
	return
}

// startWorkItems sends "the-loop start" on every work item (n = 0), which
// spawns its session and starts its Slack thread, and waits for both.
func (c *cluster) startWorkItems(ctx context.Context, sent *[]sentEvent) map[int]string {
	c.t.Helper()
	for _, n := range c.issues {
		k := tok{n, 0}
		body := fmt.Sprintf("the-loop start\n\nPlease work on this (%s).", tokenFor(n, 0))
		if err := c.githubComment(ctx, n, deliveryID(n, 0), body); err != nil {
			c.t.Fatal(err)
		}
		*sent = append(*sent, sentEvent{k, viaGitHub})
	}
	threads := map[int]string{}
	ok := testkit.Poll(5*time.Minute, func() bool {
		for _, n := range c.issues {
			if _, done := threads[n]; done {
				continue
			}
			if ts, found := c.threadOf(n); found {
				threads[n] = ts
			}
		}
		return len(threads) == len(c.issues) && len(tmuxtest.Boots(c.t, c.standIn)) >= len(c.issues)
	})
	if !ok {
		c.t.Fatalf("after the start comments: %d of %d Slack threads, %d of %d sessions booted",
			len(threads), len(c.issues), len(tmuxtest.Boots(c.t, c.standIn)), len(c.issues))
	}
	return threads
}

// settle waits until every expectation is met, then a little longer so
// that a late duplicate would be seen, and returns the tallies. It gives up
// after d, or once nothing observable has changed for settleStall: a
// partition held up that long is not catching up.
func (c *cluster) settle(sent []sentEvent, d time.Duration) (o observed, gh, sl, pr tally) {
	wantGH, wantSlack, wantPrompts := expectations(sent)
	last, lastChange := "", time.Now()
	check := func() bool {
		o = c.observe()
		gh, sl, pr = count("github", wantGH, o.github), count("slack", wantSlack, o.slack), count("prompts", wantPrompts, o.prompts)
		if now := fmt.Sprint(gh.recorded, sl.recorded, pr.recorded, gh.duplicate, sl.duplicate, pr.duplicate); now != last {
			last, lastChange = now, time.Now()
		}
		return gh.lost == 0 && sl.lost == 0 && pr.lost == 0 || time.Since(lastChange) > settleStall
	}
	if testkit.Poll(d, check) {
		time.Sleep(5 * time.Second)
		check()
	}
	return
}

// settleStall is how long settle waits without any progress. It is above
// the longest legitimate pause: a partition pinned to a killed replica
// (PinnedTTL 1m) followed by a session takeover (lease 90s).
const settleStall = 3 * time.Minute

// TestEndToEnd runs NATS and the five services as separate processes (two
// replicas of ledger-writer, slack-renderer and dispatcher) against the
// GitHub and Slack fakes and a stand-in agent harness, drives signed
// webhooks and signed Slack events through them, and checks what GitHub,
// Slack and the sessions received: each exactly once, prompts in order.
// Then every service drains on SIGTERM with exit 0.
func TestEndToEnd(t *testing.T) {
	c := startCluster(t, clusterOptions{})
	c.addIssues(3)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	var sent []sentEvent
	threads := c.startWorkItems(ctx, &sent)
	for i := 1; i <= 4; i++ {
		for _, n := range c.issues {
			k := tok{n, i}
			if i%2 == 1 {
				body := fmt.Sprintf("Comment %d on the work item: %s", i, tokenFor(n, i))
				if err := c.githubComment(ctx, n, deliveryID(n, i), body); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, sentEvent{k, viaGitHub})
			} else {
				if _, err := c.slackReply(ctx, threads[n], fmt.Sprintf("Reply %d from Slack: %s", i, tokenFor(n, i))); err != nil {
					t.Fatal(err)
				}
				sent = append(sent, sentEvent{k, viaSlack})
			}
		}
	}

	o, gh, sl, pr := c.settle(sent, 5*time.Minute)
	t.Logf("sent %d events\n%s\n%s\n%s", len(sent), gh, sl, pr)
	checkExactlyOnce(t, outOfOrder(o.order), gh, sl, pr)
	// Each mirror of a Slack reply is the ledger's, marker-stamped; the
	// work item's Slack thread holds exactly its GitHub comments.
	for _, n := range c.issues {
		for _, cm := range c.gh.Comments(repoName, n) {
			for _, k := range tokensIn(cm.Body) {
				if k.n%2 == 0 && k.n > 0 && cm.Login != ledgerLogin {
					t.Errorf("mirror of w%d/n%d posted by %q, want the ledger %q", k.w, k.n, cm.Login, ledgerLogin)
				}
			}
		}
		var got []int
		for _, m := range c.slack.Thread(slackChannel, threads[n]) {
			if m.BotID == "" {
				continue // Alice's replies, put there by the test
			}
			for _, k := range tokensIn(m.Text) {
				got = append(got, k.n)
			}
		}
		if fmt.Sprint(got) != "[1 3]" {
			t.Errorf("Slack thread of w%d holds %v, want [1 3] (the root is n0)", n, got)
		}
	}
	c.stop()
}
