//go:build e2e && compose

package e2e

import (
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// The sessions' own container (docs/decisions/101-sessions-in-their-own-container.md):
// what an agent session can reach from there, tried as the session user in
// that container, each attempt refused and logged with what refused it.

// nkeySeed matches an NKey user seed as `the-loop auth init` writes it.
var nkeySeed = regexp.MustCompile(`SU[A-Z2-7]{50,}`)

// containerOf is the first running container of compose service svc.
func (r *composeRun) containerOf(t *testing.T, svc string) string {
	t.Helper()
	out, err := r.composeOut("ps", "--quiet", svc)
	ids := strings.Fields(out)
	if err != nil || len(ids) == 0 {
		t.Fatalf("no running %s container: %v", svc, err)
	}
	return ids[0]
}

// asSession runs script with sh in container id as the session user, and
// returns its combined output and exit code.
func asSession(id, script string, args ...string) (string, int) {
	cmd := dockerCmd(nil, append([]string{"exec", "-u", composeSessionUser, id, "sh", "-c", script, "sh"}, args...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err != nil {
		code = -1
	}
	return string(out), code
}

// containerProc is one process as /proc shows it inside a container.
type containerProc struct {
	pid, uid string
	cmdline  string
}

// procs lists the processes visible in container id, as user.
func procs(t *testing.T, id, user string) []containerProc {
	t.Helper()
	const script = `for p in /proc/[0-9]*; do
	uid=$(sed -n 's/^Uid:[[:space:]]*\([0-9]*\).*/\1/p' "$p/status" 2>/dev/null)
	printf '%s\t%s\t' "${p#/proc/}" "$uid"; tr '\0' ' ' < "$p/cmdline" 2>/dev/null; echo
done`
	out, err := dockerCmd(nil, "exec", "-u", user, id, "sh", "-c", script).Output()
	if err != nil {
		t.Fatalf("processes of %.12s: %v", id, err)
	}
	var ps []containerProc
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.SplitN(line, "\t", 3); len(f) == 3 {
			ps = append(ps, containerProc{pid: f[0], uid: f[1], cmdline: strings.TrimSpace(f[2])})
		}
	}
	return ps
}

// sessionsContainer starts a work item's session and checks where it runs
// — its harness in the sessions' container as the session user, no tmux
// and no harness in any dispatcher container — and then tries, as the
// session user there, what a session that wants the bus would: the seed
// files, seeds anywhere on its filesystem or in its environment, other
// processes' environments, NATS by name and by address, and the session
// host's socket.
func (r *composeRun) sessionsContainer(t *testing.T) {
	c := r.clusterFor(t)
	sess := r.containerOf(t, "sessions")
	out, err := r.composeOut("ps", "--quiet", "dispatcher")
	dispatchers := strings.Fields(out)
	if err != nil || len(dispatchers) == 0 {
		t.Fatalf("no running dispatcher: %v", err)
	}

	// The flow: a session, its harness in the sessions' container.
	n := r.openItem(t, c, "Sessions run in their own container")
	r.comment(t, c, n, fmt.Sprintf("the-loop start\n\nPlease work on this (%s).", tokenFor(n, 0)))
	boot := r.waitBoot(t, n)
	r.waitNode(t, n, "phase-selection")
	r.comment(t, c, n, "the-loop execute")
	r.waitNode(t, n, "requirements")
	var harness *containerProc
	var tmuxServers int
	visible := procs(t, sess, composeSessionUser)
	for i, p := range visible {
		if strings.Contains(p.cmdline, boot.SessionID) && strings.Contains(p.cmdline, "demo agent") {
			harness = &visible[i]
		}
		if strings.HasPrefix(p.cmdline, "tmux") {
			tmuxServers++
		}
		// Only the sessions' own processes: no loop service, no NATS.
		if strings.Contains(p.cmdline, " serve ") || strings.Contains(p.cmdline, "nats-server") {
			t.Errorf("the sessions' container sees a loop process: %s %q", p.pid, p.cmdline)
		}
	}
	if harness == nil || harness.uid != "65533" {
		t.Fatalf("no harness of session %s runs in the sessions' container as uid 65533: %+v\n%v", boot.SessionID, harness, visible)
	}
	t.Logf("flow: %s's harness (session %s) runs in the sessions' container %.12s as uid %s, pid %s there; %d tmux processes beside it; %d processes visible in all, none a loop service",
		ref(n), boot.SessionID, sess, harness.uid, harness.pid, tmuxServers, len(visible))
	for _, d := range dispatchers {
		for _, p := range procs(t, d, composeDispatcherUID) {
			if strings.Contains(p.cmdline, boot.SessionID) || strings.HasPrefix(p.cmdline, "tmux") {
				t.Errorf("dispatcher %.12s runs a session process: %s %q", d, p.pid, p.cmdline)
			}
		}
	}
	// The agent itself, in its session.
	ran := r.agentRuns(t, c, n, "id; cat /run/secrets/nats.nk; echo exit=$?")
	if !strings.Contains(ran.Output, "uid=65533") || nkeySeed.MatchString(ran.Output) || !strings.Contains(ran.Output, "exit=1") {
		t.Errorf("the session's own `id; cat /run/secrets/nats.nk`:\n%s", ran.Output)
	}
	t.Logf("in the session: %s", oneLine(ran.Output))

	// The seed files and any seed on the filesystem or in the environment.
	secrets, code := asSession(sess, `ls -la /run/secrets 2>&1; cat /run/secrets/* 2>&1`)
	if code == 0 || nkeySeed.MatchString(secrets) {
		t.Errorf("/run/secrets in the sessions' container: exit %d\n%s", code, secrets)
	}
	t.Logf("read /run/secrets/*: refused by the container's layout (no secret is mounted here): %s", oneLine(secrets))
	found, _ := asSession(sess, `find / \( -path /proc -o -path /sys \) -prune -o -name '*.nk' -print 2>/dev/null`)
	if strings.TrimSpace(found) != "" {
		t.Errorf("*.nk files in the sessions' container:\n%s", found)
	}
	seeds, _ := asSession(sess, `env | grep -cE 'SU[A-Z2-7]{50,}'; grep -rIlE 'SU[A-Z2-7]{50,}' / --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 2>/dev/null | head -5`)
	if lines := strings.Fields(seeds); len(lines) != 1 || lines[0] != "0" {
		t.Errorf("NKey seeds in the sessions' environment or files:\n%s", seeds)
	}
	t.Logf("find / -name '*.nk': nothing; an NKey seed (SU…) in the environment or any text file: none (the dispatcher's seed is a compose secret of its container only)")

	// Other processes' environments: only this container's processes are
	// there to try, and the session host's is not readable.
	environ, _ := asSession(sess, `for p in /proc/[0-9]*; do
	[ "${p#/proc/}" = "$$" ] && continue
	cmd=$(tr '\0\n' '  ' < "$p/cmdline" 2>/dev/null | cut -c1-60)
	if e=$( (tr '\0' '\n' < "$p/environ") 2>&1); then
		echo "READ ${p#/proc/} [$cmd] $(echo "$e" | grep -E '^LOOP_(NATS|GITHUB|SLACK|ENVELOPE|ADMIN|STATUS)' | cut -d= -f1 | tr '\n' ' ')$(echo "$e" | grep -cE 'SU[A-Z2-7]{50,}') seeds"
	else
		echo "REFUSED ${p#/proc/} [$cmd] $(echo "$e" | tr '\n' ' ')"
	fi
done`)
	for _, line := range strings.Split(strings.TrimSpace(environ), "\n") {
		if strings.HasPrefix(line, "READ") && !strings.HasSuffix(line, "] 0 seeds") {
			t.Errorf("a process environment in the sessions' container holds a loop credential: %s", line)
		}
		if strings.Contains(line, "session-host") && strings.HasPrefix(line, "READ") {
			t.Errorf("the session host's environment is readable: %s", line)
		}
	}
	t.Logf("/proc/<pid>/environ: the dispatcher's processes are not in this container's pid namespace; of those here:\n%s", environ)

	// NATS: its name does not resolve on the sessions network, its
	// address there is not routed, and the host publishes it on loopback.
	natsIPs, err := dockerCmd(nil, "inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", r.containerOf(t, "nats")).Output()
	if err != nil {
		t.Fatal(err)
	}
	targets := []string{"nats:4222", composeGateway + ":4222"}
	for _, ip := range strings.Fields(string(natsIPs)) {
		targets = append(targets, ip+":4222")
	}
	// Connected, a client says CONNECT without a credential, as a session
	// would have to, and prints NATS's answer.
	const natsClient = `perl -MIO::Socket::INET -e '
		$s = IO::Socket::INET->new(PeerAddr => $ARGV[0], Timeout => 3) or die "no connection to $ARGV[0]: $@\n";
		$info = <$s>; print "connected to $ARGV[0]; ";
		print $s "CONNECT {\"verbose\":false}\r\nPING\r\n"; $r = <$s>; print "NATS answers: $r"; exit 3' "$1"`
	for _, target := range targets {
		out, code := asSession(sess, natsClient, target)
		switch {
		case code != 3 && target == "nats:4222":
			t.Logf("connect %s: refused by the network: the name does not resolve on the sessions network (%s)", target, oneLine(out))
		case code != 3 && strings.Contains(out, "refused"):
			t.Logf("connect %s: refused: nothing listens there (compose publishes NATS on the host's loopback only) (%s)", target, oneLine(out))
		case code != 3:
			t.Logf("connect %s: refused by the network: no route from the sessions network (%s)", target, oneLine(out))
		case target == "nats:4222":
			t.Errorf("the name nats resolves on the sessions network: %s", out)
		case strings.Contains(out, "Authorization Violation"):
			// An engine without its iptables rules (dockerd
			// --iptables=false) routes between its bridge networks.
			t.Logf("connect %s: ROUTED — this engine does not isolate its networks (no iptables rules); refused by NATS's authorization, as any client without a credential: %s", target, oneLine(out))
		default:
			t.Errorf("the sessions' container reaches NATS at %s and is not refused: %s", target, out)
		}
	}
	const connect = `perl -MIO::Socket::INET -e '$s = IO::Socket::INET->new(PeerAddr => $ARGV[0], Timeout => 3) or die "$ARGV[0]: $@\n"; print "connected to $ARGV[0]\n"' "$1"`
	// The session endpoint is what the sessions do reach, by the
	// dispatcher's name on the sessions network.
	endpoint := boot.Env["LOOP_SESSION_URL"]
	if host := strings.TrimPrefix(endpoint, "http://"); host == endpoint || strings.HasPrefix(host, "127.") {
		t.Errorf("the session was given the endpoint %q", endpoint)
	} else if out, code := asSession(sess, connect, host); code != 0 {
		t.Errorf("the session endpoint %s is unreachable from the sessions' container: %s", host, out)
	} else {
		t.Logf("the session endpoint %s: reachable, as it must be", host)
	}

	// The session host's socket: the session user may open it, and is
	// refused by its peer credential.
	host, code := asSession(sess, `/usr/local/bin/the-loop session-host tmux -- list-sessions; echo "exit=$?"`)
	if !strings.Contains(host, "exit=125") || strings.Contains(host, "loop-") {
		t.Errorf("the session user asked the session host for list-sessions: %d\n%s", code, host)
	}
	refused := false
	for _, rec := range r.logRecords(t, sess) {
		if rec["msg"] == "session host: refused a connection: not the dispatcher's user" && fmt.Sprint(rec["peer_uid"]) == "65533" {
			refused = true
		}
	}
	if !refused {
		t.Error("the session host did not log the session user's connection as refused")
	}
	t.Logf("the session host's socket as uid 65533: refused by the peer credential check (SO_PEERCRED uid 65533, not %s), and logged: %s", composeDispatcherUID, oneLine(host))

	// Landlock under Docker's default seccomp profile and
	// no-new-privileges: the session sandbox needs it (LOOP_SESSION_SANDBOX
	// stays off in compose: the session host starts no confined server).
	// Confined to execute /usr alone, true runs and reading /etc does not.
	ll, code := asSession(sess, `/usr/local/bin/the-loop sandbox --exec /usr -- /usr/bin/true && echo confined-true=ok;
		/usr/local/bin/the-loop sandbox --exec /usr -- /usr/bin/cat /etc/hostname; echo confined-cat=$?`)
	t.Logf("the-loop sandbox in the sessions' container (Docker's default seccomp, no-new-privileges): exit %d: %s", code, oneLine(ll))
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
