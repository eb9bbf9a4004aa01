package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/config"
)

// TestMain lets this test binary be the demo's stand-in agent: the demo runs
// `<its own binary> demo agent …`, and under `go test` that binary is this
// one.
func TestMain(m *testing.M) {
	if len(os.Args) > 2 && os.Args[1] == "demo" && os.Args[2] == "agent" {
		os.Exit(run(context.Background(), os.Args[1:], config.OSEnv(), os.Stdout, os.Stderr))
	}
	if os.Getenv(envHardenChild) != "" {
		hardenedChild()
	}
	// The sessions these tests start answer Claude Code's first-run
	// questions in their HOME: the test binary's own, never the user's.
	home, err := os.MkdirTemp("", "the-loop-test-home-")
	if err == nil {
		os.Setenv("HOME", home)
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if home != "" {
		os.RemoveAll(home)
	}
	os.Exit(code)
}

// The demo's summary, as printed. Every figure is counted where the effect
// landed (the stand-ins, the bus's event log, the agent's records), so a
// step the services did not carry out changes it.
var wantSummary = map[string]int{
	// start: work-item.activity, 2 comment.human (start, execute),
	// decision-pending; ask: session.awaiting_input; reply:
	// work-item.reply; approve: gate.feedback + its ledger.record; the
	// rest: phase-approval-pending ×2, gate.feedback + ledger.record,
	// pr-review-pending, comment.human (review), work-item-complete;
	// kickoff: work-item.create; and the dispatcher's gate.moved for each
	// of the four gates left (phase selection, the two approvals, the
	// review).
	"events": 20,
	// question, reply, two relayed approvals, the kickoff issue.
	"ledger records": 5,
	// alice's start, execute and review; the-loop's question, reply record
	// and two relayed approvals.
	"GitHub comments": 7,
	"GitHub issues":   2,
	// The thread root (the start comment), decision-pending, execute, the
	// question, two approval pings, the review ping, the review comment,
	// work-item-complete, and the kickoff's link.
	"Slack messages": 10,
	"sessions":       1,
	// execute, the Slack reply, the button approval, the typed approval,
	// the review.
	"prompts": 5,
}

var summaryLine = regexp.MustCompile(`(?m)^  ([a-zA-Z ]+?)\s{2,}(\d+)\s`)

func TestDemo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the five services and the stand-ins")
	}
	for _, runner := range []string{"process", "tmux"} {
		t.Run(runner, func(t *testing.T) {
			if runner == "tmux" {
				if _, err := exec.LookPath("tmux"); err != nil {
					t.Skip("tmux is not installed")
				}
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"demo", "--runner", runner, "--dir", t.TempDir()}, config.Env{}, &stdout, &stderr)
			out := stdout.String()
			if code != 0 {
				t.Fatalf("exit %d\nstderr: %s\nstdout:\n%s", code, stderr.String(), out)
			}
			for i := 1; i <= 7; i++ {
				if !strings.Contains(out, "\n── "+strconv.Itoa(i)+". ") {
					t.Errorf("step %d missing from the transcript", i)
				}
			}
			got := map[string]int{}
			for _, m := range summaryLine.FindAllStringSubmatch(out[strings.Index(out, "── Summary ──"):], -1) {
				n, _ := strconv.Atoi(m[2])
				got[m[1]] = n
			}
			for k, want := range wantSummary {
				if got[k] != want {
					t.Errorf("summary %s = %d, want %d", k, got[k], want)
				}
			}
			for _, a := range []string{"alice at requirements-approval (on slack)", "alice at design-approval (on slack)", "alice at review (on github)"} {
				if !strings.Contains(out, a) {
					t.Errorf("approvedBy does not name %q", a)
				}
			}
			if t.Failed() {
				t.Logf("stdout:\n%s\nstderr:\n%s", out, stderr.String())
			}
		})
	}
}

// With --keep-running the stand-ins stay browsable until the demo is
// stopped, and the commands it prints work.
func TestDemoKeepRunning(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the five services and the stand-ins")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr testkit.SyncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"demo", "--keep-running", "--runner", "process", "--dir", t.TempDir()}, config.Env{}, &stdout, &stderr)
	}()
	curl := regexp.MustCompile(`curl -H 'Authorization: Bearer (\S+)' (\S+)`)
	var m []string
	deadline := time.Now().Add(2 * time.Minute)
	for m == nil {
		select {
		case code := <-done:
			t.Fatalf("demo exited %d before Ctrl-C\n%s\n%s", code, stdout.String(), stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no keep-running banner:\n%s", stdout.String())
		}
		time.Sleep(50 * time.Millisecond)
		m = curl.FindStringSubmatch(stdout.String())
	}
	req, _ := http.NewRequest(http.MethodGet, m[2], nil)
	req.Header.Set("Authorization", "Bearer "+m[1])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var comments []map[string]any
	err = json.NewDecoder(resp.Body).Decode(&comments)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || len(comments) != wantSummary["GitHub comments"] {
		t.Errorf("GET %s: %d, %d comments, %v", m[2], resp.StatusCode, len(comments), err)
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d after Ctrl-C: %s", code, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("the demo did not stop after Ctrl-C")
	}
}
