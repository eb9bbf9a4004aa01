//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sys/unix"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
	"github.com/the-loop/bus/pkg/envelope"
	loopv1 "github.com/the-loop/bus/proto/loop/v1"
)

// The attacker program: this test binary, run inside an agent session by the
// obedient stand-in with envAttack=bus, does what a prompt-injected agent
// with a shell would try against the bus. It connects to NATS without a
// credential, with ones it makes up, and with every credential file it can
// find in its environment or its working directory; on any connection that
// is let in it raises what only people and services may — alice's
// gate.feedback into the inbox, a comment.human of hers onto the event
// stream, a graph state in KV, a control command, a new work item. It prints
// what happened as one JSON attackReport.
const (
	envAttack = "E2E_ATTACK"
	// envAttackNATS is the server's URL (the attacker knows the port: the
	// worst case), envAttackRef the work item it targets.
	envAttackNATS = "E2E_ATTACK_NATS"
	envAttackRef  = "E2E_ATTACK_REF"
	// envAttackSocket is the unix socket envAttack=unix connects to.
	envAttackSocket = "E2E_ATTACK_SOCKET"
)

// attackReport is what the attacker program prints.
type attackReport struct {
	// CredentialFiles are the files holding a NATS credential found in
	// the session's environment or working directory.
	CredentialFiles []string        `json:"credential_files"`
	Attempts        []attackAttempt `json:"attempts"`
}

// attackAttempt is one connection attempt and, if it was let in, what it
// was allowed to do.
type attackAttempt struct {
	Credential string   `json:"credential"`
	Connected  bool     `json:"connected"`
	Err        string   `json:"err,omitempty"`
	Did        []string `json:"did,omitempty"`
	Refused    []string `json:"refused,omitempty"`
}

// runAttacker runs attack mode and returns the process's exit code.
func runAttacker(mode string, out io.Writer) int {
	if mode == "connect" {
		return attackConnect(os.Getenv(envAttackNATS), out)
	}
	if mode == "unix" {
		return attackUnix(os.Getenv(envAttackSocket), out)
	}
	if mode != "bus" {
		fmt.Fprintf(os.Stderr, "unknown attack %q\n", mode)
		return 2
	}
	url, ref := os.Getenv(envAttackNATS), os.Getenv(envAttackRef)
	rep := attackReport{CredentialFiles: findCredentials()}
	rep.Attempts = append(rep.Attempts, attackBus(url, ref, "none"))
	rep.Attempts = append(rep.Attempts, attackBus(url, ref, "made-up user and password", nats.UserInfo("operator", "operator")))
	if seed, _, err := bus.NewIdentityKey(); err == nil {
		if f, err := os.CreateTemp("", "attacker-*.nk"); err == nil {
			_, _ = f.Write(seed)
			f.Close()
			defer os.Remove(f.Name())
			rep.Attempts = append(rep.Attempts, attackBus(url, ref, "made-up nkey", nkeyFile(f.Name())))
		}
	}
	for _, f := range rep.CredentialFiles {
		opt := nats.UserCredentials(f)
		if strings.HasSuffix(f, ".nk") || looksLikeSeed(f) {
			opt = nkeyFile(f)
		}
		rep.Attempts = append(rep.Attempts, attackBus(url, ref, "found "+f, opt))
	}
	if err := json.NewEncoder(out).Encode(rep); err != nil {
		return 1
	}
	return 0
}

func nkeyFile(path string) nats.Option {
	opt, err := nats.NkeyOptionFromSeed(path)
	if err != nil {
		return func(*nats.Options) error { return err }
	}
	return opt
}

// findCredentials lists the files that hold a NATS credential (an NKey seed,
// a creds file, the server's authorization) named by a variable of the
// environment or lying under the working directory.
func findCredentials() []string {
	var found []string
	seen := map[string]bool{}
	check := func(path string) {
		abs, err := filepath.Abs(path)
		if err != nil || seen[abs] {
			return
		}
		seen[abs] = true
		if credentialFile(abs) {
			found = append(found, abs)
		}
	}
	for _, kv := range os.Environ() {
		_, v, _ := strings.Cut(kv, "=")
		for _, part := range filepath.SplitList(v) {
			if st, err := os.Stat(part); err == nil && st.Mode().IsRegular() {
				check(part)
			}
		}
	}
	_ = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && d.Name() == "jetstream" {
			found = append(found, path+" (a JetStream store)")
			return fs.SkipDir
		}
		if d.Type().IsRegular() {
			check(path)
		}
		return nil
	})
	return found
}

// credentialFile: by its name, or by its first line (a seed is "SU…", a
// creds file starts with the JWT armour).
func credentialFile(path string) bool {
	name := filepath.Base(path)
	if strings.HasSuffix(name, ".nk") || strings.HasSuffix(name, ".creds") || name == "auth.conf" {
		return true
	}
	return looksLikeSeed(path)
}

func looksLikeSeed(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	line, _ := bufio.NewReader(io.LimitReader(f, 4096)).ReadString('\n')
	line = strings.TrimSpace(line)
	return strings.HasPrefix(line, "SU") && len(line) == 58 || strings.Contains(line, "BEGIN NATS USER JWT")
}

// attackBus connects with opts and, if let in, tries each thing only people
// and services may do.
func attackBus(url, ref, credential string, opts ...nats.Option) attackAttempt {
	a := attackAttempt{Credential: credential}
	nc, err := nats.Connect(url, append(opts, nats.Name("agent-session"), nats.Timeout(5*time.Second), nats.NoReconnect())...)
	if err != nil {
		a.Err = err.Error()
		return a
	}
	defer nc.Close()
	a.Connected = true
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	js, err := jetstream.New(nc)
	if err != nil {
		a.Refused = append(a.Refused, "jetstream: "+err.Error())
		return a
	}
	person := &loopv1.Actor{Github: alice, Slack: aliceSlack, Name: "Alice"}
	now := envelope.NewTime(time.Now())
	publish := func(what string, ev *loopv1.Event, stage envelope.Stage) {
		m, err := envelope.ToMessage(ev, stage, "")
		if err == nil {
			_, err = js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: nats.Header(m.Header), Data: m.Data})
		}
		if err != nil {
			a.Refused = append(a.Refused, what+": "+err.Error())
			return
		}
		a.Did = append(a.Did, what)
	}
	conv := &loopv1.Conversation{Channel: slackChannel, ThreadTs: "1700000000.000100", MessageTs: "1700000000.000200"}
	publish("gate.feedback of alice into loop.in", &loopv1.Event{
		Id: envelope.SlackMessageID(slackChannel, "1700000000.000200"), Source: "slack", Type: string(catalog.GateFeedback),
		Subject: ref, Time: now, Actor: person, Conversation: conv,
		Body: &loopv1.Event_GateFeedback{GateFeedback: &loopv1.GateFeedback{Text: "approved"}},
	}, envelope.Inbox)
	publish("comment.human of alice onto loop.ev", &loopv1.Event{
		Id: "gh:issue-comment:999999001", Source: "github", Type: string(catalog.CommentHuman),
		Subject: ref, Time: now, Actor: person,
		Body: &loopv1.Event_Comment{Comment: &loopv1.Comment{CommentId: 999999001, Author: alice, Body: "the-loop execute"}},
	}, envelope.Events)
	publish("control.command into loop.in", &loopv1.Event{
		Id: envelope.SlackMessageID(slackChannel, "1700000000.000300"), Source: "slack", Type: string(catalog.ControlCommand),
		Subject: ref, Time: now, Actor: person, Conversation: conv,
		Body: &loopv1.Event_ControlCommand{ControlCommand: &loopv1.ControlCommand{Command: "stop", Text: "the-loop stop"}},
	}, envelope.Inbox)
	publish("work-item.create into loop.in", &loopv1.Event{
		Id: envelope.SlackMessageID(slackChannel, "1700000000.000400"), Source: "slack", Type: string(catalog.WorkItemCreate),
		Subject: "slack:" + slackChannel + "/1700000000.000400", Time: now, Actor: person,
		Conversation: &loopv1.Conversation{Channel: slackChannel, MessageTs: "1700000000.000400"},
		Body:         &loopv1.Event_WorkItemCreate{WorkItemCreate: &loopv1.WorkItemCreate{Repo: repoName, Title: "made by an agent", Body: "made by an agent"}},
	}, envelope.Inbox)
	kv, err := js.KeyValue(ctx, bus.BucketGraph)
	if err == nil {
		_, err = kv.Put(ctx, catalog.SubjectKey(ref), []byte(`{"v":1,"graph":"work-item","ref":"`+ref+`","current":"implementation","status":"running"}`))
	}
	if err != nil {
		a.Refused = append(a.Refused, "write KV graph: "+err.Error())
	} else {
		a.Did = append(a.Did, "write KV graph")
	}
	return a
}

// attackUnix (envAttack=unix) connects to the unix socket at path (another
// session's tmux server's) and prints what came of it. It exits 0 when it
// connected, 1 when it was refused.
func attackUnix(path string, out io.Writer) int {
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Fprintln(out, err)
		return 1
	}
	c.Close()
	fmt.Fprintln(out, "connected")
	return 0
}

// attackConnect (envAttack=connect) tries every way to open a TCP
// connection to addr (host:port, IPv4) a sandboxed session has — connect
// over IPv4 and over IPv6 to the v4-mapped address, a Multipath TCP
// socket, TCP Fast Open (sendto, which connects without connect) — and
// prints what each gave on one line. It exits 0 when one connected, 1
// when all were refused.
func attackConnect(addr string, out io.Writer) int {
	host, p, err := net.SplitHostPort(addr)
	port, perr := strconv.Atoi(p)
	ip := net.ParseIP(host).To4()
	if err != nil || perr != nil || ip == nil {
		fmt.Fprintf(out, "bad address %q\n", addr)
		return 2
	}
	v4 := &unix.SockaddrInet4{Port: port, Addr: [4]byte(ip)}
	v6 := &unix.SockaddrInet6{Port: port}
	copy(v6.Addr[:], net.IPv4(ip[0], ip[1], ip[2], ip[3]).To16())
	connected := false
	var results []string
	for _, a := range []struct {
		name          string
		domain, proto int
		sa            unix.Sockaddr
		fastOpen      bool
	}{
		{"tcp", unix.AF_INET, 0, v4, false},
		{"tcp over ipv6", unix.AF_INET6, 0, v6, false},
		{"multipath tcp", unix.AF_INET, unix.IPPROTO_MPTCP, v4, false},
		{"tcp fast open", unix.AF_INET, 0, v4, true},
	} {
		err := func() error {
			fd, err := unix.Socket(a.domain, unix.SOCK_STREAM, a.proto)
			if err != nil {
				return fmt.Errorf("socket: %w", err)
			}
			defer unix.Close(fd)
			if a.fastOpen {
				return unix.Sendto(fd, []byte("PING\r\n"), unix.MSG_FASTOPEN, a.sa)
			}
			return unix.Connect(fd, a.sa)
		}()
		if err == nil {
			connected = true
			results = append(results, a.name+" connected")
		} else {
			results = append(results, a.name+" "+err.Error())
		}
	}
	fmt.Fprintln(out, strings.Join(results, "; "))
	if connected {
		return 0
	}
	return 1
}
