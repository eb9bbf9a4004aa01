package inproc

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/ghfake"
	"github.com/the-loop/bus/internal/testsupport/rawbench"
	"github.com/the-loop/bus/internal/testsupport/slackfake"
	"github.com/the-loop/bus/internal/testsupport/socketfake"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/slackmsg"
)

// BenchmarkFeel is what a team feels of the-loop (issue 30), at a light load:
// one event a second, spread over several started work items, through the
// five services in one process (this package's world: a real in-process
// JetStream with authorization on, GitHub and Slack faked at their HTTP
// edge, the sessions a stand-in agent in real tmux).
//
//   - github-comment/loop: a person's comment on GitHub, delivered as a
//     signed webhook, until its Slack message is posted (to-slack) and until
//     the session read the prompt it became (to-session).
//   - slack-reply/loop: a reply in a work item's Slack thread, over Socket
//     Mode, until its record is written on GitHub (to-github) and until the
//     session read it (to-session). The session is told once GitHub has
//     delivered the record's webhook back (docs/architecture.md: GitHub is
//     the ledger); the fake delivers it at once.
//   - button-press/loop: a gate's Approve button, pressed on a work item
//     waiting at its requirements gate, until the gate moves (to-gate).
//     The raw path's stand-in is a reply whose record, back from GitHub,
//     does a compare-and-set in a key-value bucket.
//   - slack-kickoff/loop: a top-level Slack message opening a work item,
//     until its issue is on GitHub (to-github).
//   - <path>/raw: the raw JetStream path of the same hops on the same
//     server, nothing of ours on it: an HTTP handler verifying an HMAC and
//     publishing to a work-queue stream (PubAck); a pull consumer, one in
//     flight, writing the GitHub comment when the path has one and
//     republishing to a limits stream (PubAck, double ack); pull consumers
//     posting to the same Slack fake and typing into a stand-in session with
//     the dispatcher's tmux command sequence (double ack). A reply's record
//     comes back from GitHub as a webhook to the same front and takes the
//     same hops to the session.
//
// Each reports p50 and p99 in milliseconds per end point (*-p50-ms,
// *-p99-ms) and what the events cost on GitHub, counted by the fake after
// the run has settled: gh-writes/event (the event's own: its record),
// gh-label-writes/event (the loop:<phase> label a gate move mirrors onto
// the issue, the move's whatever moved the gate) and gh-requests/event
// (every request, reads and labels included). An event from Slack (off the
// ledger) must cost at most one write of its own; an event that came from
// GitHub none; the benchmark fails otherwise, whatever its speed.
// `make bench` runs it with FEEL_BENCHTIME events per sub-benchmark and
// prints each figure beside the raw path's, and ours minus raw.
//
// The Slack renderer's pacing (one post a second per channel, Slack's
// limit) is shortened and GitHub's content-creation limits lifted, on the
// ledger-writer's side (its pacer) and on the GitHub fake's (its
// refusals), as in the end-to-end benchmark: designed waits are not the
// pipeline's latency. The benchmark fails if the fake refused a request
// for a rate limit.
func BenchmarkFeel(b *testing.B) {
	w := newWorldWith(b, worldOptions{unpaced: true})
	m := newFeelMarks(b, w)
	const items = 4
	var numbers []int
	threads := map[int]string{}
	for i := range items {
		n, r := w.start(fmt.Sprintf("feel %d", i))
		numbers = append(numbers, n)
		threads[n] = w.thread(r)
	}
	raw := startRawPath(b, w, m)
	seq := 0
	next := func() (number int, token string) {
		seq++
		return numbers[seq%len(numbers)], fmt.Sprintf("feel%06d", seq)
	}

	// paced runs b.N events one a second, send starting each, and
	// reports the hops wait measures; then the requests GitHub saw.
	paced := func(b *testing.B, send func(number int, token string), wait func(h *hops, start time.Time, token string)) (writes, requests float64) {
		settleGitHub(w.gh)
		before := w.gh.Counts()
		from := len(w.gh.Requests())
		var h hops
		b.ResetTimer()
		for range b.N {
			number, token := next()
			start := time.Now()
			send(number, token)
			wait(&h, start, token)
			b.StopTimer()
			time.Sleep(time.Until(start.Add(time.Second)))
			b.StartTimer()
		}
		b.StopTimer()
		h.Report(b)
		settleGitHub(w.gh)
		after := w.gh.Counts()
		// The phase label a gate move mirrors onto the issue (loop:<phase>:
		// one label removed, one added) is the move's, whatever moved the
		// gate; the event's own writes are the rest.
		labels := labelWrites(after) - labelWrites(before)
		writes = float64(after.Writes-before.Writes-labels) / float64(b.N)
		requests = float64(after.Requests-before.Requests) / float64(b.N)
		if writes > 0 || labels > 0 {
			// What they were, for the failure that may follow.
			kinds := map[string]int{}
			for _, r := range w.gh.Requests()[from:] {
				if r.Method != http.MethodGet {
					kinds[r.Method+" "+regexp.MustCompile(`[0-9]+`).ReplaceAllString(r.Path, "N")]++
				}
			}
			b.Logf("GitHub writes of %d events: %v", b.N, kinds)
		}
		b.ReportMetric(writes, "gh-writes/event")
		b.ReportMetric(float64(labels)/float64(b.N), "gh-label-writes/event")
		b.ReportMetric(requests, "gh-requests/event")
		return writes, requests
	}

	b.Run("github-comment", func(b *testing.B) {
		b.Run("loop", func(b *testing.B) {
			writes, _ := paced(b, func(number int, token string) {
				w.comment(number, alice, token+" please look at this")
			}, func(h *hops, start time.Time, token string) {
				h.Add("to-slack", m.slack.wait(b, token).Sub(start))
				h.Add("to-session", m.session(b, w.agent, token).Sub(start))
			})
			if writes != 0 {
				b.Errorf("a comment from GitHub cost %.2f GitHub writes per event, want none (GitHub is the ledger: it is recorded already)", writes)
			}
		})
		b.Run("raw", func(b *testing.B) {
			paced(b, func(number int, token string) {
				c := w.gh.AddComment(repo, number, alice, token+" please look at this")
				raw.send(b, "comment", number, w.commentHook(c))
			}, func(h *hops, start time.Time, token string) {
				h.Add("to-slack", m.slack.wait(b, token).Sub(start))
				h.Add("to-session", m.session(b, raw.agent, token).Sub(start))
			})
		})
	})
	b.Run("slack-reply", func(b *testing.B) {
		b.Run("loop", func(b *testing.B) {
			writes, _ := paced(b, func(number int, token string) {
				w.say(aliceSlack, threads[number], token+" sounds good")
			}, func(h *hops, start time.Time, token string) {
				h.Add("to-github", m.github.wait(b, token).Sub(start))
				h.Add("to-session", m.session(b, w.agent, token).Sub(start))
			})
			if writes > 1 {
				b.Errorf("a Slack reply cost %.2f GitHub writes per event, want at most one (its record)", writes)
			}
		})
		b.Run("raw", func(b *testing.B) {
			paced(b, func(number int, token string) {
				raw.send(b, "reply", number, socketfake.MessageEvent(channel, aliceSlack, token+" sounds good", w.nextTS(), threads[number]))
			}, func(h *hops, start time.Time, token string) {
				h.Add("to-github", m.github.wait(b, token).Sub(start))
				h.Add("to-session", m.session(b, raw.agent, token).Sub(start))
			})
		})
	})
	// A gate's Approve button, pressed on a work item waiting at its
	// requirements gate, until the gate moves: the dispatcher's
	// graph.advanced record, stamped when it moved (to the millisecond).
	// The press is recorded on GitHub first and moves the gate once GitHub
	// has delivered the record back, as a reply's does.
	b.Run("button-press", func(b *testing.B) {
		b.Run("loop", func(b *testing.B) {
			type gate struct {
				ref, root string
				ping      slackfake.Message
			}
			// Off the clock: a work item at its gate for every press.
			gates := make([]gate, b.N)
			for i := range gates {
				gates[i].ref = startAtGate(w, &gates[i].root, &gates[i].ping)
			}
			i := 0
			writes, _ := paced(b, func(int, string) {
				g := gates[i]
				w.pressButton(aliceSlack, g.ping, g.root, slackmsg.ApproveActionID)
			}, func(h *hops, start time.Time, _ string) {
				g := gates[i]
				i++
				rec := w.waitLog("graph.advanced", map[string]any{"work_item": g.ref, "from": "requirements-approval"})
				at, err := time.Parse(time.RFC3339Nano, rec.TS)
				if err != nil {
					b.Fatal(err)
				}
				h.Add("to-gate", at.Sub(start))
			})
			if writes > 1 {
				b.Errorf("a button press cost %.2f GitHub writes per event, want at most one (its record)", writes)
			}
		})
		b.Run("raw", func(b *testing.B) {
			paced(b, func(number int, token string) {
				raw.send(b, "reply", number, socketfake.MessageEvent(channel, aliceSlack, token+" "+rawApproval, w.nextTS(), threads[number]))
			}, func(h *hops, start time.Time, token string) {
				h.Add("to-gate", m.gate.wait(b, token).Sub(start))
			})
		})
	})
	// A kickoff: a top-level Slack message that opens a work item on GitHub
	// (its issue is the one write). No raw path: its hops are a reply's.
	b.Run("slack-kickoff", func(b *testing.B) {
		b.Run("loop", func(b *testing.B) {
			writes, _ := paced(b, func(_ int, token string) {
				w.say(aliceSlack, "", token+" please build a frobnicator")
			}, func(h *hops, start time.Time, token string) {
				h.Add("to-github", m.github.wait(b, token).Sub(start))
			})
			if writes > 1 {
				b.Errorf("a kickoff cost %.2f GitHub writes per event, want at most one (its issue)", writes)
			}
		})
	})
	// GitHub's limits are lifted (worldOptions.unpaced): a refusal would
	// put GitHub's Retry-After into the figures, as the fake's secondary
	// limit once did to the presses (1.6 s at the median).
	if c := w.gh.Counts(); c.PrimaryLimited+c.SecondaryLimited != 0 {
		b.Errorf("GitHub refused %d requests for its primary and %d for its secondary rate limit: the figures hold its Retry-After",
			c.PrimaryLimited, c.SecondaryLimited)
	}
}

// startAtGate starts a work item and drives it to its requirements gate;
// it returns its ref, with its thread and the gate's ping (the message with
// the buttons).
func startAtGate(w *world, root *string, ping *slackfake.Message) string {
	number, r := w.start(fmt.Sprintf("feel gate %d", w.seq.Add(1)))
	w.toRequirementsGate(number, r, requirementsDoc)
	*root = w.thread(r)
	*ping = w.waitSlack(*root, string(catalog.PhaseApprovalPending))
	return r
}

// rawApproval marks the raw path's stand-in for a press: its record, back
// from GitHub, moves a gate (a read and a compare-and-set, as in a
// key-value bucket) instead of being typed into a session.
const rawApproval = "approved-by-button"

// labelWrites is how many of c's writes were to an issue's labels.
func labelWrites(c ghfake.Counts) int {
	return c.Writes - c.Issues - c.Comments - c.CommentEdits - c.Reactions
}

// settleGitHub returns once the fake has seen no request for a while: what
// an event set off (a record's webhook echoed back, a read) is over.
func settleGitHub(gh *ghfake.Server) {
	last, since := gh.Counts().Requests, time.Now()
	for time.Since(since) < 500*time.Millisecond {
		time.Sleep(20 * time.Millisecond)
		if n := gh.Counts().Requests; n != last {
			last, since = n, time.Now()
		}
	}
}

// rawRepo is where the raw path writes its records.
const rawRepo = "octo/feel-raw"

var feelToken = regexp.MustCompile(`feel[0-9]{6}`)

// feelMarks are when each token first reached Slack and GitHub.
type feelMarks struct {
	slack, github, gate *marks
}

func newFeelMarks(b testing.TB, w *world) *feelMarks {
	m := &feelMarks{slack: newMarks(), github: newMarks(), gate: newMarks()}
	b.Cleanup(w.slack.AfterPost(func(msg slackfake.Message) { m.slack.mark(messageText(msg), time.Now()) }))
	b.Cleanup(w.gh.AfterWrite(func(wr ghfake.Write) {
		at := time.Now()
		switch wr.Kind {
		case ghfake.WriteComment:
			if c, ok := w.gh.Comment(wr.ID); ok {
				m.github.mark(c.Body, at)
			}
		case ghfake.WriteIssue:
			if is, ok := w.gh.Issue(wr.Repo, wr.IssueNumber); ok {
				m.github.mark(is.Title+"\n"+is.Body, at)
			}
		}
	}))
	return m
}

// session is when the stand-in agent recording into dir read the prompt
// carrying token (its own record of when).
func (m *feelMarks) session(b testing.TB, dir, token string) time.Time {
	b.Helper()
	var at time.Time
	testkit.WaitWithin(b, wait, token+" typed into a session", func() bool {
		for _, in := range tmuxtest.Inputs(b, dir) {
			if strings.Contains(in.Text, token) && !in.At.IsZero() {
				at = in.At
				return true
			}
		}
		return false
	})
	return at
}

// marks records when each token was first seen.
type marks struct {
	mu sync.Mutex
	at map[string]time.Time
}

func newMarks() *marks { return &marks{at: map[string]time.Time{}} }

func (m *marks) mark(text string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, k := range feelToken.FindAllString(text, -1) {
		if _, ok := m.at[k]; !ok {
			m.at[k] = at
		}
	}
}

func (m *marks) wait(b testing.TB, token string) time.Time {
	b.Helper()
	var at time.Time
	testkit.WaitWithin(b, wait, token+" seen", func() bool {
		m.mu.Lock()
		t, ok := m.at[token]
		m.mu.Unlock()
		if !ok {
			return false
		}
		at = t
		return true
	})
	return at
}

// hops collects each end point's durations, by name, in the order first
// seen.
type hops struct{ rawbench.Took }

// rawPath is the baseline: the same hops as plain JetStream on the world's
// server, an HTTP handler at the front, the same fakes and a stand-in
// session at the back.
type rawPath struct {
	url   string
	agent string // the raw stand-in's record directory
}

func startRawPath(b testing.TB, w *world, m *feelMarks) *rawPath {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	h, err := rawbench.NewHops(ctx, w.srv.RawConn(b, "feel-raw"), "FEELRAW", "feelraw")
	if err != nil {
		b.Fatal(err)
	}
	// The raw path records on an issue of its own, in a repository whose
	// webhooks GitHub delivers to the raw path's front, as the record of a
	// reply comes back to ingress-github.
	w.gh.AddRepo(rawRepo)
	w.gh.AddIssue(rawRepo, alice, "the raw path's records", "")
	r := &rawPath{agent: b.TempDir()}
	var echoes sync.WaitGroup
	w.elsewhere.Store(rawRepo, func(wr ghfake.Write) {
		if wr.Kind != ghfake.WriteComment || ctx.Err() != nil {
			return
		}
		echoes.Add(1)
		go func() {
			defer echoes.Done()
			if c, ok := w.gh.Comment(wr.ID); ok {
				if err := r.deliver("record", wr.IssueNumber, w.commentHook(c)); err != nil && ctx.Err() == nil {
					b.Errorf("raw path: the record's webhook: %v", err)
				}
			}
		}()
	})
	sock := r.startSession(b, w.tmuxDir)
	b.Cleanup(func() { cancel(); h.Wait(); echoes.Wait() })
	fail := func(err error) { b.Errorf("raw path: %v", err) }
	consume := func(stream, durable, filter string, handle func(rawbench.Msg) error) {
		if err := h.Consume(ctx, stream, durable, filter, handle, fail); err != nil {
			b.Fatal(err)
		}
	}
	client := &http.Client{Timeout: time.Minute}
	// The ledger's hop: a reply is written on GitHub first, then fanned out.
	consume("FEELRAW_IN", "hop", "", func(msg rawbench.Msg) error {
		if rawKind(msg.Subject) == "reply" {
			var ev struct {
				Event struct {
					Text string `json:"text"`
				} `json:"event"`
			}
			if err := json.Unmarshal(msg.Data, &ev); err != nil {
				return err
			}
			body, _ := json.Marshal(map[string]string{"body": ev.Event.Text})
			if err := post(ctx, client, fmt.Sprintf("%srepos/%s/issues/1/comments", w.gh.URL(), rawRepo),
				"application/json", "Bearer "+ghToken, body); err != nil {
				return err
			}
		}
		return h.Publish(ctx, strings.Replace(msg.Subject, ".in.", ".ev.", 1), msg.Data, msg.MsgID)
	})
	// The renderer's hop: a comment from GitHub is posted in Slack.
	consume("FEELRAW_EV", "slack", "feelraw.ev.comment.>", func(msg rawbench.Msg) error {
		var ev struct {
			Comment struct {
				Body string `json:"body"`
			} `json:"comment"`
		}
		if err := json.Unmarshal(msg.Data, &ev); err != nil {
			return err
		}
		form := url.Values{"channel": {channel}, "text": {ev.Comment.Body}}
		return post(ctx, client, w.slack.URL()+"chat.postMessage", "application/x-www-form-urlencoded",
			"Bearer "+slackfake.Token, []byte(form.Encode()))
	})
	// The dispatcher's hop: a comment from GitHub, or the record of a
	// reply once GitHub delivered it, is typed into the session; the
	// record of a press moves its gate instead.
	consume("FEELRAW_EV", "session", "", func(msg rawbench.Msg) error {
		if rawKind(msg.Subject) == "reply" {
			return nil
		}
		tokens := feelToken.FindAllString(string(msg.Data), 1)
		if len(tokens) == 0 {
			return fmt.Errorf("no token in %s", msg.Subject)
		}
		if strings.Contains(string(msg.Data), rawApproval) {
			if err := h.Move(ctx, tokens[0], []byte("moved")); err != nil {
				return err
			}
			m.gate.mark(tokens[0], time.Now())
			return nil
		}
		return rawDeliver(ctx, sock, "the raw path's event "+tokens[0])
	})

	hs := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		mac := hmac.New(sha256.New, []byte(webhookSecret))
		mac.Write(body)
		want := "sha256=" + hex.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(want), []byte(req.Header.Get("X-Hub-Signature-256"))) {
			http.Error(rw, "signature", http.StatusUnauthorized)
			return
		}
		subject := fmt.Sprintf("feelraw.in.%s.%s", req.Header.Get("X-Feel-Kind"), req.Header.Get("X-Feel-Issue"))
		if err := h.Publish(req.Context(), subject, body, req.Header.Get("X-GitHub-Delivery")); err != nil {
			http.Error(rw, err.Error(), http.StatusServiceUnavailable)
			return
		}
		rw.WriteHeader(http.StatusAccepted)
	}))
	b.Cleanup(hs.Close)
	r.url = hs.URL
	return r
}

// send delivers one event to the raw path's front, signed, and waits for
// its answer.
func (r *rawPath) send(b testing.TB, kind string, number int, body []byte) {
	b.Helper()
	if err := r.deliver(kind, number, body); err != nil {
		b.Fatal(err)
	}
}

func (r *rawPath) deliver(kind string, number int, body []byte) error {
	req, err := http.NewRequest(http.MethodPost, r.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Feel-Kind", kind)
	req.Header.Set("X-Feel-Issue", strconv.Itoa(number))
	req.Header.Set("X-GitHub-Delivery", fmt.Sprintf("feelraw-%d", time.Now().UnixNano()))
	req.Header.Set("X-Hub-Signature-256", sign(webhookSecret, body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusAccepted {
		return fmt.Errorf("raw path answered %d", resp.StatusCode)
	}
	return nil
}

// startSession starts the raw path's stand-in agent in a tmux server of its
// own under dir, as the dispatcher runs one per session, and returns its
// socket once the stand-in is ready for input.
func (r *rawPath) startSession(b testing.TB, dir string) string {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	sock := filepath.Join(dir, "feelraw")
	cmd := fmt.Sprintf("env %s='%s' '%s'", tmuxtest.EnvDir, r.agent, exe)
	if out, err := exec.Command("tmux", "-S", sock, "new-session", "-d", "-s", "raw", "-x", "200", "-y", "50", cmd).CombinedOutput(); err != nil {
		b.Fatalf("tmux new-session: %v: %s", err, out)
	}
	testkit.WaitWithin(b, wait, "the raw stand-in booted", func() bool { return len(tmuxtest.Boots(b, r.agent)) > 0 })
	return sock
}

// rawDeliver types text into the raw session as the dispatcher's tmux does:
// a bracketed paste, then a carriage return pasted on its own, in one tmux
// command sequence (without the dispatcher's read of the pane first).
func rawDeliver(ctx context.Context, sock, text string) error {
	cmd := exec.CommandContext(ctx, "tmux", "-S", sock,
		"load-buffer", "-b", "feelraw-evt", "-", ";",
		"paste-buffer", "-p", "-d", "-b", "feelraw-evt", "-t", "raw:", ";",
		"set-buffer", "-b", "feelraw-submit", "\r", ";",
		"paste-buffer", "-d", "-b", "feelraw-submit", "-t", "raw:")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("tmux paste: %w: %s", err, out)
	}
	return nil
}

// rawKind reads the kind of feelraw.<in|ev>.<kind>.<issue>.
func rawKind(subject string) string {
	parts := strings.Split(subject, ".")
	if len(parts) != 4 {
		return ""
	}
	return parts[2]
}

// post sends body and fails on any answer but 2xx.
func post(ctx context.Context, c *http.Client, url, contentType, auth string, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Authorization", auth)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, b)
	}
	return nil
}
