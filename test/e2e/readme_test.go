//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/internal/testsupport/tmuxtest"
)

// readmeStep is one numbered step of the README's "Your first hour": its
// bold lead, the shell command its code block gives (if any) and the code
// spans of its text.
type readmeStep struct {
	n       int
	lead    string
	command string
	spans   []string
	text    string
}

var (
	stepStart = regexp.MustCompile(`(?m)^(\d+)\. \*\*(.+?)\*\*`)
	codeSpan  = regexp.MustCompile("`([^`\n]+)`")
	fence     = regexp.MustCompile("(?s)```sh\n(.*?)```")
)

// firstHourSteps reads the numbered steps of README.md's "Your first hour".
func firstHourSteps(t *testing.T) []readmeStep {
	t.Helper()
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	const heading = "## Your first hour\n"
	i := strings.Index(readme, heading)
	if i < 0 {
		t.Fatalf("README.md has no %q section", strings.TrimSpace(heading))
	}
	section := readme[i+len(heading):]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	starts := stepStart.FindAllStringSubmatchIndex(section, -1)
	var steps []readmeStep
	for k, m := range starts {
		end := len(section)
		if k+1 < len(starts) {
			end = starts[k+1][0]
		}
		text := section[m[1]:end]
		st := readmeStep{lead: strings.TrimSuffix(section[m[4]:m[5]], "."), text: text}
		fmt.Sscan(section[m[2]:m[3]], &st.n)
		if f := fence.FindStringSubmatch(text); f != nil {
			st.command = strings.Join(strings.Fields(strings.TrimSpace(f[1])), " ")
			text = fence.ReplaceAllString(text, "")
		}
		for _, c := range codeSpan.FindAllStringSubmatch(text, -1) {
			st.spans = append(st.spans, c[1])
		}
		steps = append(steps, st)
	}
	if len(steps) == 0 {
		t.Fatal("README.md's first hour has no numbered steps")
	}
	return steps
}

// The README's placeholders and what the test puts in their place: the
// person (a login the GitHub stand-in knows) and up's two credentials.
var readmePlaceholders = map[string]string{"YOUR_LOGIN": alice, "YOUR_TOKEN": ledgerToken, "YOUR_SECRET": webhookSecret}

// theLoopCommand splits a README command line into its environment and
// the-loop's arguments, placeholders replaced: `VAR=V … go run
// ./cmd/the-loop ARGS` (or `the-loop ARGS`).
func theLoopCommand(t *testing.T, line string) (env, args []string) {
	t.Helper()
	fields := strings.Fields(line)
	for len(fields) > 0 && strings.Contains(fields[0], "=") {
		env = append(env, fields[0])
		fields = fields[1:]
	}
	switch {
	case len(fields) >= 3 && fields[0] == "go" && fields[1] == "run" && fields[2] == "./cmd/the-loop":
		fields = fields[3:]
	case len(fields) >= 1 && fields[0] == "the-loop":
		fields = fields[1:]
	default:
		t.Fatalf("README command %q runs something other than the-loop", line)
	}
	sub := func(s string) string {
		for k, v := range readmePlaceholders {
			s = strings.ReplaceAll(s, k, v)
		}
		return s
	}
	for i := range env {
		env[i] = sub(env[i])
	}
	for _, f := range fields {
		args = append(args, sub(f))
	}
	return env, args
}

// TestReadmeFirstHour follows README.md's "Your first hour" as a new person
// would, step by step as the README writes them (parsed, so that the steps
// and this test cannot drift apart): `the-loop init` with their login, `up`
// with the environment the README gives and the config init wrote, then on
// GitHub (the stand-in) the label, the start and execute comments, and the
// approval, each checked for what the README says happens: a session in its
// own worktree on the-loop/issue-N, the work item at phase selection, then
// at requirements, then — once the agent completed its requirements — past
// the approval at the design. A step the test does not know fails it:
// change the test with the README.
func TestReadmeFirstHour(t *testing.T) {
	steps := firstHourSteps(t)
	loop, _ := binaries(t)
	work := t.TempDir()
	var a *agentUp
	n, ref := 0, ""
	graphNode := func() string {
		cmd := exec.Command(loop, "graph", "status", ref)
		cmd.Env = append(baseEnv(), "LOOP_NATS_LISTEN="+a.natsAddr, "LOOP_STORE_DIR="+a.store)
		out, _ := cmd.CombinedOutput()
		for _, l := range strings.Split(string(out), "\n") {
			if v, ok := strings.CutPrefix(l, "node:"); ok {
				return strings.Fields(v)[0]
			}
		}
		return ""
	}
	waitNode := func(what, node string) {
		t.Helper()
		var last string
		testkit.WaitWithin(t, 90*time.Second, what, func() bool {
			last = graphNode()
			return last == node
		})
		t.Logf("step: %s — the work item is at %s", what, last)
	}
	for _, st := range steps {
		t.Logf("README step %d: %s", st.n, st.lead)
		switch {
		case strings.Contains(st.command, " init") || strings.HasPrefix(st.command, "the-loop init"):
			env, args := theLoopCommand(t, st.command)
			cmd := exec.Command(loop, args...)
			cmd.Dir, cmd.Env = work, append(baseEnv(), env...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("step %d: the-loop %s: %v\n%s", st.n, strings.Join(args, " "), err, out)
			}
			cfg, err := os.ReadFile(filepath.Join(work, "the-loop.yaml"))
			if err != nil || !strings.Contains(string(cfg), `github: "`+alice+`"`) {
				t.Fatalf("step %d: init wrote no the-loop.yaml authorizing %s (%v):\n%s", st.n, alice, err, cfg)
			}
			t.Logf("init said:\n%s", out)
		case strings.HasSuffix(st.command, " up"):
			env, args := theLoopCommand(t, st.command)
			if len(args) != 1 || args[0] != "up" {
				t.Fatalf("step %d: %q", st.n, st.command)
			}
			for i, kv := range env {
				k, v, _ := strings.Cut(kv, "=")
				if !strings.HasPrefix(k, "LOOP_") {
					t.Fatalf("step %d sets %s, which is not a setting", st.n, k)
				}
				if k == "LOOP_CONFIG" && !filepath.IsAbs(v) {
					// Relative to where the person ran init.
					env[i] = k + "=" + filepath.Join(work, v)
				}
			}
			a = startAgentUpWith(t, env)
			checkFirstRun(t, a)
		case st.lead == "Label an issue":
			if a == nil || len(st.spans) == 0 {
				t.Fatalf("step %d labels an issue before up runs, or names no label", st.n)
			}
			a.label = st.spans[0]
			is := a.gh.AddIssue(agentRepo, alice, "Agent work", "Please do the thing.")
			n, ref = is.Number, fmt.Sprintf("github:%s#%d", agentRepo, is.Number)
			a.post("issues", map[string]any{"action": "labeled", "label": map[string]any{"name": a.label},
				"issue": a.issuePayload(n), "repository": a.repository(), "sender": map[string]any{"login": alice}})
		case st.lead == "Comment" && len(st.spans) > 0 && st.spans[0] == "the-loop start":
			a.comment(n, st.spans[0])
			var boot standin.Boot
			testkit.WaitWithin(t, 90*time.Second, "the session's boot", func() bool {
				bs, _ := standin.ReadBoots(a.standIn)
				if len(bs) == 0 {
					return false
				}
				boot = bs[0]
				return true
			})
			branch := runGit(t, boot.Dir, "branch", "--show-current")
			if want := fmt.Sprintf("the-loop/issue-%d", n); branch != want || !strings.Contains(st.text, "the-loop/issue-N") {
				t.Errorf("step %d: the session works on %q, want %s as the README says", st.n, branch, want)
			}
			if !strings.HasPrefix(boot.Dir, a.root+string(filepath.Separator)) {
				t.Errorf("step %d: the session works in %s, outside the workspace root", st.n, boot.Dir)
			}
			t.Logf("step %d: session %s in %s on %s", st.n, boot.SessionID, boot.Dir, branch)
			if !strings.Contains(st.text, "phase selection") {
				t.Fatalf("step %d no longer says where the work item waits", st.n)
			}
			waitNode("started", "phase-selection")
		case st.lead == "Comment" && len(st.spans) > 0 && st.spans[0] == "the-loop execute":
			a.comment(n, st.spans[0])
			if !strings.Contains(st.text, "requirements") {
				t.Fatalf("step %d no longer says what the agent does next", st.n)
			}
			waitNode("executed", "requirements")
		case st.lead == "Answer and approve":
			m := regexp.MustCompile("comment\\s+`([^`]+)`").FindStringSubmatch(st.text)
			if m == nil {
				t.Fatalf("step %d names no comment that approves", st.n)
			}
			// The agent asks (`the-loop ask`, as its plugin has it do): the
			// question arrives as a comment on the issue, and the person's
			// reply on the issue reaches the session.
			if !strings.Contains(st.text, "questions arrive as comments on the issue") {
				t.Fatalf("step %d no longer says where the agent's questions arrive", st.n)
			}
			const question, reply = "Per token or per IP?", "Per token, 100 a minute."
			// " #": the prompt quotes the comment, and the rest of its line
			// is the shell's comment.
			a.comment(n, standin.RunMarker+"the-loop ask --question '"+question+"' #")
			asked := func() bool {
				for _, c := range a.gh.Comments(agentRepo, n) {
					if c.Login == ledgerLogin && strings.Contains(c.Body, question) {
						return true
					}
				}
				return false
			}
			for deadline := time.Now().Add(90 * time.Second); !asked(); time.Sleep(200 * time.Millisecond) {
				if time.Now().After(deadline) {
					runs, _ := standin.ReadRuns(a.standIn)
					t.Fatalf("step %d: the agent's question is not on the issue; the agent ran %+v; the issue has %+v", st.n, runs, a.gh.Comments(agentRepo, n))
				}
			}
			a.comment(n, reply)
			testkit.WaitWithin(t, 90*time.Second, "the reply typed into the session", func() bool {
				for _, in := range tmuxtest.Inputs(t, a.standIn) {
					if strings.Contains(in.Text, reply) {
						return true
					}
				}
				return false
			})
			t.Logf("step %d: the question is a comment on the issue; the reply reached the session", st.n)
			// Then it completes its requirements node (`the-loop graph
			// complete`), and the person approves.
			a.comment(n, standin.RunMarker+"the-loop graph complete #")
			waitNode("the agent completed the requirements", "requirements-approval")
			a.comment(n, m[1])
			waitNode("approved with "+m[1], "design")
		default:
			t.Fatalf("README step %d (%q) is one TestReadmeFirstHour does not follow: teach the test the step the README now gives", st.n, st.lead)
		}
	}
	if a == nil || ref == "" || graphNode() != "design" {
		t.Fatal("the README's first hour did not take an issue through its first approval")
	}
}

// checkFirstRun: what step 2 says `up` shows — its checklist, each
// capability ready here, and the status page, which `/` leads to and which
// shows the same checklist and no failing readiness check.
func checkFirstRun(t *testing.T, a *agentUp) {
	t.Helper()
	for _, c := range []string{"GitHub intake", "ledger writes", "agent sessions"} {
		testkit.WaitWithin(t, 10*time.Second, "up's checklist", func() bool {
			log, _ := os.ReadFile(filepath.Join(filepath.Dir(a.store), "up.log"))
			return strings.Contains(string(log), "✓ "+c)
		})
	}
	resp, err := a.client.Get("http://" + a.admin + "/")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.Request.URL.Path != "/status" || !strings.Contains(string(page), "the-loop status") {
		t.Errorf("the admin address led to %s (%d), not the status page", resp.Request.URL, resp.StatusCode)
	}
	resp, err = a.client.Get("http://" + a.admin + "/status/api/state")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Checklist []struct {
			Name    string   `json:"name"`
			Missing []string `json:"missing"`
		} `json:"checklist"`
		NotReady []struct{ Check, Reason string } `json:"notReady"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("status page state: %d %v", resp.StatusCode, err)
	}
	if len(st.Checklist) != 4 || len(st.NotReady) != 0 {
		t.Errorf("the status page shows checklist %+v and failing checks %+v; want up's four lines and none failing", st.Checklist, st.NotReady)
	}
}
