//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/the-loop/bus/internal/testsupport/standin"
	"github.com/the-loop/bus/internal/testsupport/testkit"
	"github.com/the-loop/bus/pkg/sandbox"
)

// TestSessionSandboxUnderUp is issue 26's attack, from inside a real
// session of `the-loop up` (its sandbox on, as on any Linux): an obedient
// agent with a shell tries to read up's operator seed, to list another
// work item's workspace, to connect to the bus (every way TCP offers), to
// have the tmux server its session runs on read the seed for it, to read
// up's and every other process's environment, and to search its home, the
// workspaces, the store and the usual secret mounts for seeds and keys. Each
// is refused, and the test prints what refused it (the server cannot be
// reached: before Landlock ABI 9 a session makes no unix socket, from it
// Landlock refuses the server's); the session still commits in its own
// checkout and asks its endpoint (`the-loop check`).
func TestSessionSandboxUnderUp(t *testing.T) {
	if err := sandbox.Supported(); err != nil {
		t.Skipf("no Landlock sandbox on this kernel (Landlock ABI %d): %v; up would refuse to start sessions", sandbox.ABI(), err)
	}
	a := startAgentUp(t)
	mine, _ := a.startItem("Sandboxed work")
	_, theirs := a.startItem("Someone else's work")
	seed := filepath.Join(a.store, "nats", "operator.nk")
	if _, err := os.Stat(seed); err != nil {
		t.Fatalf("up keeps no operator seed to steal: %v", err)
	}
	leak := filepath.Join(a.tmp, "leak")
	script := fmt.Sprintf(`try "commit in its own checkout" sh -c 'echo probe > probe.txt && git add probe.txt && git -c user.name=agent -c user.email=agent@example.test commit -q -m probe && git log --oneline -1'
try "ask its endpoint (the-loop check)" sh -c 'the-loop check --json | grep -o "\"status\": *\"[a-z]*\"" | head -1'
try "read up's operator seed" cat %[1]s
try "list another work item's workspace" ls %[2]s
try "connect to the bus" env %[3]s=connect %[4]s=%[5]s %[6]s
try "have the tmux server read the seed" sh -c 'tmux -S %[7]s run-shell "cat %[1]s > %[8]s 2>&1" && cat %[8]s'
try "read up's environment" sh -c 'tr "\0" "\n" < /proc/%[9]d/environ'
try "read every process's environment for the loop's secrets" sh -c 'r=0; d=0; for e in /proc/[0-9]*/environ; do if cat $e >/dev/null 2>&1; then r=$((r+1)); else d=$((d+1)); fi; done; echo "$r readable (its own), $d refused"; cat /proc/[0-9]*/environ 2>/dev/null | tr "\0" "\n" | grep -E "^LOOP_[A-Z_]*(TOKEN|SECRET|KEY|SEED|PASSWORD)=" | grep -vx "LOOP_SESSION_TOKEN=$LOOP_SESSION_TOKEN"'
try "search home, workspaces, store and secret mounts for seeds and keys" sh -c 'grep -rhoE "S[UOA][A-Z2-7]{56}|LOOP_ENVELOPE_KEY=.*" %[10]s %[11]s %[12]s /run/secrets /var/run/secrets 2>/dev/null | sort -u | grep .'
`, seed, theirs.Dir, envAttack, envAttackNATS, a.natsAddr, filepath.Join(a.harness, "e2e.test"), a.socketOf(mine.n), leak, a.pid, a.home, a.root, a.store)
	got, out := a.probe(mine, "probe.sh", script)
	for name, want := range map[string]string{
		"commit in its own checkout":         "ok: ",
		"ask its endpoint (the-loop check)":  `ok: "status": "wait"`,
		"read up's operator seed":            "refused: cat: " + seed + ": Permission denied",
		"list another work item's workspace": "refused: ls: cannot open directory '" + theirs.Dir + "': Permission denied",
		"connect to the bus":                 "refused: tcp permission denied; tcp over ipv6 permission denied; multipath tcp socket: protocol not supported; tcp fast open operation not supported",
		"have the tmux server read the seed": "refused: error connecting to ",
		"read up's environment":              "refused: sh: 1: cannot open /proc/",
		// What a session can read is its own processes' environments,
		// which hold none of the loop's secrets, and its own session
		// token only.
		"read every process's environment for the loop's secrets":             "refused: ",
		"search home, workspaces, store and secret mounts for seeds and keys": "refused:",
	} {
		if !strings.HasPrefix(got[name], want) && !strings.Contains(got[name], want) {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	if strings.Contains(out, " connected") {
		t.Errorf("a connection to the bus was let through: %s", got["connect to the bus"])
	}
	if b, err := os.ReadFile(seed); err == nil && strings.Contains(out, strings.TrimSpace(string(b))) {
		t.Errorf("the session read up's operator seed:\n%s", out)
	}
	for _, secret := range []string{webhookSecret, ledgerToken} {
		if strings.Contains(out, secret) {
			t.Errorf("the session read one of up's secrets:\n%s", out)
		}
	}
	if log := runGit(t, mine.boot.Dir, "log", "--oneline", "-1"); !strings.Contains(log, "probe") {
		t.Errorf("the session's commit is not on its branch: %s", log)
	}
}

// tryShell is the probes' shell prelude: try NAME CMD… prints "NAME: ok:
// OUTPUT" or "NAME: refused: OUTPUT".
const tryShell = `try() { name=$1; shift; if out=$("$@" 2>&1); then echo "$name: ok: $out"; else echo "$name: refused: $out"; fi; }
`

// probe has the obedient session of work item it run script (after
// tryShell) from a file named file, and returns each attempt's result by
// name and the whole output, each line logged.
func (a *agentUp) probe(it item, file, script string) (map[string]string, string) {
	a.t.Helper()
	path := filepath.Join(a.harness, file)
	if err := os.WriteFile(path, []byte(tryShell+script), 0o700); err != nil {
		a.t.Fatal(err)
	}
	// "#": the rest of the line, as the prompt quotes it, is a comment.
	a.comment(it.n, standin.RunMarker+"sh "+path+" #")
	var out string
	testkit.WaitFor(a.t, "the obedient session's attempts", func() bool {
		runs, _ := standin.ReadRuns(a.standIn)
		for _, r := range runs {
			if r.SessionID == it.boot.SessionID && strings.Contains(r.Command, path) {
				out = r.Output
				return true
			}
		}
		return false
	})
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		name, result, _ := strings.Cut(l, ": ")
		got[name] = result
		a.t.Log(l)
	}
	return got, out
}

// item is a work item whose session booted.
type item struct {
	n    int
	boot standin.Boot
}

// startItem opens an issue, arms and starts its work item, and waits for
// its session's boot.
func (a *agentUp) startItem(title string) (item, standin.Boot) {
	a.t.Helper()
	is := a.gh.AddIssue(agentRepo, alice, title, "Please do the thing.")
	n := is.Number
	a.post("issues", map[string]any{"action": "labeled", "label": map[string]any{"name": "the-loop: auto-execute"},
		"issue": a.issuePayload(n), "repository": a.repository(), "sender": map[string]any{"login": alice}})
	a.comment(n, "the-loop start")
	var boot standin.Boot
	testkit.WaitFor(a.t, fmt.Sprintf("the session of issue %d booting", n), func() bool {
		bs, _ := standin.ReadBoots(a.standIn)
		for _, b := range bs {
			if strings.Contains(b.Dir, fmt.Sprintf("+%d%c", n, filepath.Separator)) {
				boot = b
				return true
			}
		}
		return false
	})
	return item{n: n, boot: boot}, boot
}
