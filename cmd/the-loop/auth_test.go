package main

import (
	"bytes"
	"context"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/the-loop/bus/internal/testsupport/bustest"
	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/config"
)

// serveUntil runs `the-loop serve svc` with env until it exits or ready
// says it is ready (then it is stopped); it returns the exit code (-1 when
// it became ready) and its output.
func serveUntil(t *testing.T, env config.Env, svc string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"serve", svc}, env, &out, &errb) }()
	for deadline := time.Now().Add(60 * time.Second); ; {
		select {
		case code := <-done:
			return code, out.String(), errb.String()
		case <-time.After(20 * time.Millisecond):
		}
		if m := adminRE.FindStringSubmatch(out.String()); m != nil && ready(m[1]) {
			cancel()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("serve %s stopped with %d after it was ready: %s", svc, code, errb.String())
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("serve %s did not stop", svc)
			}
			return -1, out.String(), errb.String()
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve %s neither exited nor became ready:\n%s\n%s", svc, out.String(), errb.String())
		}
	}
}

func ready(admin string) bool {
	var out, errb bytes.Buffer
	return run(context.Background(), []string{"health", "--ready", "--url", admin + "/readyz"}, config.Env{}, &out, &errb) == 0
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestServeAsItsOwnIdentity runs `serve ledger-writer` against a server with
// authorization on: without a credential, with a seed the server does not
// know and with a file that holds no seed it stops (exit 1) naming the
// service and the setting to fix, never printing a seed; with its own seed
// it becomes ready.
func TestServeAsItsOwnIdentity(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	// The operator's provisioning: the signers the service waits for.
	srv.Provision(t, bus.DefaultTopology())
	dir := t.TempDir()
	stranger, _, err := bus.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	own := srv.Seed(bus.IdentityLedgerWriter)
	env := func(extra config.Env) config.Env {
		e := config.Env{
			"LOOP_NATS_URL":     srv.URL(),
			"LOOP_ADMIN_ADDR":   "127.0.0.1:0",
			"LOOP_ENVELOPE_KEY": strings.Repeat("k", 32),
			"LOOP_GITHUB_TOKEN": "ghp_not_a_real_token_0123456789",
		}
		maps.Copy(e, extra)
		return e
	}
	for _, tc := range []struct {
		name  string
		extra config.Env
		want  []string
		// connects: the refusal comes from the server, after the banner.
		connects bool
	}{
		{"no credential", nil,
			[]string{"ledger-writer", "requires a credential", "LOOP_NATS_NKEY_FILE", "LOOP_NATS_NKEY_SEED", "LOOP_NATS_CREDS_FILE", "LOOP_NATS_USER"}, true},
		{"a seed file the server does not know", config.Env{"LOOP_NATS_NKEY_FILE": writeFile(t, dir, "stranger.nk", stranger)},
			[]string{"ledger-writer", "refused the nkey credential from LOOP_NATS_NKEY_FILE"}, true},
		{"a seed the server does not know", config.Env{"LOOP_NATS_NKEY_SEED": string(stranger)},
			[]string{"ledger-writer", "refused the nkey credential from LOOP_NATS_NKEY_SEED"}, true},
		{"another service's seed", config.Env{"LOOP_NATS_NKEY_FILE": writeFile(t, dir, "slack.nk", srv.Seed(bus.IdentityIngressSlack))},
			[]string{"ledger-writer", "LOOP_NATS_NKEY_FILE", "not this identity's"}, true},
		{"a file holding no seed", config.Env{"LOOP_NATS_NKEY_FILE": writeFile(t, dir, "token.nk", []byte("ghp_this_is_not_a_seed_0123456789\n"))},
			[]string{"ledger-writer", "LOOP_NATS_NKEY_FILE", "token.nk", "not an NKey user seed"}, false},
		{"a broken seed", config.Env{"LOOP_NATS_NKEY_SEED": "SUnotreallyaseed"},
			[]string{"ledger-writer", "LOOP_NATS_NKEY_SEED", "not a valid NKey user seed"}, false},
		{"a missing seed file", config.Env{"LOOP_NATS_NKEY_FILE": filepath.Join(dir, "nope.nk")},
			[]string{"ledger-writer", "LOOP_NATS_NKEY_FILE", "nope.nk"}, false},
	} {
		code, stdout, stderr := serveUntil(t, env(tc.extra), "ledger-writer")
		if code != 1 {
			t.Errorf("%s: exit %d, want 1\n%s", tc.name, code, stderr)
			continue
		}
		last := stderr[strings.LastIndex(strings.TrimRight(stderr, "\n"), "\n")+1:]
		for _, w := range tc.want {
			if !strings.Contains(last, w) {
				t.Errorf("%s: the error does not say %q:\n%s", tc.name, w, last)
			}
		}
		// Said once: by the exit, not also by a log line before it.
		if before := stderr[:len(stderr)-len(last)]; strings.Contains(before, `"level":"ERROR"`) || strings.Contains(before, "level=ERROR") {
			t.Errorf("%s: the error is logged before the exit says it:\n%s", tc.name, stderr)
		}
		if connected := strings.Contains(stdout, "the-loop serve ledger-writer: NATS"); connected != tc.connects {
			t.Errorf("%s: connected %v, want %v (a credential that cannot work is refused before connecting)\n%s", tc.name, connected, tc.connects, stdout)
		}
		for _, secret := range []string{string(stranger), string(own), "ghp_this_is_not_a_seed", "ghp_not_a_real_token"} {
			if strings.Contains(stdout+stderr, secret) {
				t.Errorf("%s: the output carries a secret", tc.name)
			}
		}
	}

	// Its own seed: ready, and the service is the ledger-writer as far as
	// the server is concerned (it consumes the inbox).
	code, stdout, stderr := serveUntil(t, env(config.Env{"LOOP_NATS_NKEY_FILE": writeFile(t, dir, "ledger-writer.nk", own)}), "ledger-writer")
	if code != -1 {
		t.Fatalf("serve with its own seed: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "(credential: nkey)") || strings.Contains(stdout+stderr, string(own)) {
		t.Errorf("serve with its own seed:\n%s", stdout)
	}
}

// TestAuthInitKeepsSeeds: `auth init DIR` writes a seed per identity and
// auth.conf; run again it keeps every seed and writes auth.conf anew, which
// nats-server loads with each identity's public key.
func TestAuthInitKeepsSeeds(t *testing.T) {
	dir := t.TempDir()
	seeds := func() map[string][]byte {
		out := map[string][]byte{}
		for _, id := range bus.Identities() {
			b, err := os.ReadFile(filepath.Join(dir, identitiesDir, id+".nk"))
			if err != nil {
				t.Fatal(err)
			}
			out[id] = b
		}
		return out
	}
	code, stdout, stderr := runVerb(t, config.Env{}, "auth", "init", dir)
	if code != 0 || !strings.Contains(stdout, "auth.conf") {
		t.Fatalf("auth init: %d %s %s", code, stdout, stderr)
	}
	first := seeds()
	conf := filepath.Join(dir, "auth.conf")
	written, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	for id, s := range first {
		if strings.Contains(stdout, string(bytes.TrimSpace(s))) || bytes.Contains(written, bytes.TrimSpace(s)) {
			t.Errorf("the seed of %s was printed or put in auth.conf", id)
		}
		// 0600, and the group bits show the ACL's mask: uid 65532's read.
		if st, err := os.Stat(filepath.Join(dir, identitiesDir, id+".nk")); err != nil || st.Mode().Perm()&^0o040 != 0o600 {
			t.Errorf("seed file of %s: %v %v, want mode 0600 (and an ACL)", id, st.Mode(), err)
		}
	}
	if err := os.WriteFile(conf, []byte("# edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = runVerb(t, config.Env{}, "auth", "init", dir)
	if code != 0 {
		t.Fatalf("auth init again: %d %s", code, stderr)
	}
	for _, want := range []string{"already held 7 identities: kept", "--force", "ledger-writer", "(kept)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("auth init again does not say %q:\n%s", want, stdout)
		}
	}
	again := seeds()
	for id := range first {
		if !bytes.Equal(first[id], again[id]) {
			t.Errorf("auth init again replaced the seed of %s", id)
		}
	}
	rewritten, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rewritten, written) {
		t.Errorf("auth init again wrote another auth.conf:\n%s", rewritten)
	}
	main := writeFile(t, dir, "nats.conf", []byte("listen: 127.0.0.1:-1\ninclude ./auth.conf\n"))
	nkeys, err := bustest.ConfigNkeys(main)
	if err != nil {
		t.Fatalf("nats-server refuses auth.conf: %v", err)
	}
	loaded := map[string]bool{}
	for _, k := range nkeys {
		loaded[k] = true
	}
	for _, id := range bus.Identities() {
		pub, err := bus.PublicKey(again[id])
		if err != nil {
			t.Fatal(err)
		}
		if !loaded[pub] {
			t.Errorf("auth.conf lacks the public key of %s", id)
		}
	}
	if len(nkeys) != len(bus.Identities()) {
		t.Errorf("auth.conf holds %d users, want %d", len(nkeys), len(bus.Identities()))
	}
	if code, _, stderr := runVerb(t, config.Env{}, "auth", "init"); code != 2 || !strings.Contains(stderr, "auth init DIR") {
		t.Errorf("auth init without DIR: %d %s", code, stderr)
	}
}

// TestAuthInitReplacesOnlyWithForce: a second `auth init` keeps every
// identity and says so; --force issues new ones and says what to do next.
func TestAuthInitReplacesOnlyWithForce(t *testing.T) {
	dir := t.TempDir()
	seed := func() []byte {
		b, err := os.ReadFile(filepath.Join(dir, identitiesDir, bus.IdentityOperator+".nk"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if code, _, stderr := runVerb(t, config.Env{}, "auth", "init", "--reader", "none", dir); code != 0 {
		t.Fatalf("auth init: %d %s", code, stderr)
	}
	first := seed()
	if code, _, stderr := runVerb(t, config.Env{}, "auth", "init", dir, "--reader=none"); code != 0 || !bytes.Equal(seed(), first) {
		t.Fatalf("auth init again: %d %s; seed kept: %v", code, stderr, bytes.Equal(seed(), first))
	}
	code, stdout, stderr := runVerb(t, config.Env{}, "auth", "init", "--force", "--reader", "none", dir)
	if code != 0 || bytes.Equal(seed(), first) {
		t.Fatalf("auth init --force: %d %s; seed replaced: %v", code, stderr, !bytes.Equal(seed(), first))
	}
	for _, want := range []string{"replaced 7 identities", "reload NATS", "provision again", "(replaced)"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("auth init --force does not say %q:\n%s", want, stdout)
		}
	}
	if code, _, stderr := runVerb(t, config.Env{}, "auth", "init", "--reader", "nobody", dir); code != 2 || !strings.Contains(stderr, "--reader") {
		t.Errorf("auth init --reader nobody: %d %s", code, stderr)
	}
}

// TestAskOutsideASession: `the-loop ask` holds no bus credential; outside an
// agent session, where the dispatcher has set no endpoint, it says where it
// runs.
func TestAskOutsideASession(t *testing.T) {
	for _, env := range []config.Env{{}, {"LOOP_SESSION_URL": "http://127.0.0.1:1"}, {"LOOP_SESSION_TOKEN": "lst1.x"}} {
		code, _, stderr := runVerb(t, env, "ask", "--question", "which parser?")
		if code != 1 || !strings.Contains(stderr, "runs inside an agent session") {
			t.Errorf("ask with %v: %d %s", keysOf(env), code, stderr)
		}
	}
}

func keysOf(env config.Env) []string {
	var out []string
	for k := range env {
		out = append(out, k)
	}
	return out
}

// TestOperatorVerbsIdentities: against a local `up`, a verb that reads
// connects as the observer `up` keeps in its store; one that changes
// something needs the operator's credential named, is refused before
// connecting without it, and acts with it. The observer's seed does not
// let it act.
func TestOperatorVerbsIdentities(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	store := t.TempDir()
	s, err := loadSettings(config.Env{"LOOP_STORE_DIR": store, "LOOP_NATS_LISTEN": "127.0.0.1:0", "LOOP_PARTITIONS": "2"})
	if err != nil {
		t.Fatal(err)
	}
	emb, err := startEmbedded(context.Background(), s, store, newLogger(io.Discard, 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emb.srv.Shutdown)
	cfgPath := writeFile(t, t.TempDir(), "config.yaml", []byte("version: \"0.7.0\"\nrouting:\n  authorizedUsers:\n    - {github: alice, slack: U1, name: Alice}\n"))
	env := config.Env{"LOOP_STORE_DIR": store, "LOOP_NATS_LISTEN": "127.0.0.1:" + strconv.Itoa(emb.srv.Port()), "LOOP_PARTITIONS": "2", "LOOP_CONFIG": cfgPath}
	with := func(extra config.Env) config.Env {
		e := maps.Clone(env)
		maps.Copy(e, extra)
		return e
	}
	operator := filepath.Join(store, identitiesDir, bus.IdentityOperator+".nk")
	observer := filepath.Join(store, identitiesDir, bus.IdentityObserver+".nk")
	pause := []string{"sessions", "pause", "--work-item", "github:octo/repo#15", "--as", "alice"}

	// Provisioning is the operator's act: not the observer's, and not
	// without the operator's credential named.
	if code, _, stderr := runVerb(t, env, "provision"); code != 1 || !strings.Contains(stderr, "operator's credential") {
		t.Errorf("provision with no credential named: %d %s", code, stderr)
	}
	if code, stdout, stderr := runVerb(t, with(config.Env{"LOOP_NATS_NKEY_FILE": observer}), "provision"); code != 1 || strings.Contains(stdout, "in place") {
		t.Errorf("provision with the observer's seed: %d %s %s, want it refused", code, stdout, stderr)
	}
	if code, stdout, stderr := runVerb(t, with(config.Env{"LOOP_NATS_NKEY_FILE": operator}), "provision"); code != 0 || !strings.Contains(stdout, "in place (2 partitions") {
		t.Fatalf("provision as the operator: %d %s %s", code, stdout, stderr)
	}

	if code, stdout, stderr := runVerb(t, env, "sessions", "list"); code != 0 {
		t.Errorf("sessions list as the observer: %d %s %s", code, stdout, stderr)
	}
	if code, stdout, stderr := runVerb(t, env, "partitions"); code != 0 || !strings.Contains(stdout, "ledger-writer on LOOP_INBOX: 2 partitions") {
		t.Errorf("partitions as the observer: %d %s %s", code, stdout, stderr)
	}
	code, _, stderr := runVerb(t, env, pause...)
	if code != 1 || !strings.Contains(stderr, "operator's credential") || !strings.Contains(stderr, "LOOP_NATS_NKEY_FILE="+operator) {
		t.Errorf("pause with no credential named: %d %s", code, stderr)
	}
	code, _, stderr = runVerb(t, with(config.Env{"LOOP_NATS_NKEY_FILE": observer}), pause...)
	if code != 1 || !strings.Contains(stderr, "permission denied") {
		t.Errorf("pause with the observer's seed: %d %s, want the server to deny it", code, stderr)
	}
	if code, stdout, stderr := runVerb(t, with(config.Env{"LOOP_NATS_NKEY_FILE": operator}), pause...); code != 0 || !strings.Contains(stdout, "requested pause") {
		t.Errorf("pause as the operator: %d %s %s", code, stdout, stderr)
	}
	if code, _, stderr := runVerb(t, with(config.Env{"LOOP_STORE_DIR": t.TempDir()}), "sessions", "list"); code != 1 || !strings.Contains(stderr, "no local `the-loop up` store") {
		t.Errorf("sessions list without a store: %d %s", code, stderr)
	}
}

// TestAuthSignersProvisionsTheBucket: `auth init` writes the public signers
// file (no seed in it); `auth signers FILE` as the operator writes it to the
// signers bucket, where the services read it; as a service it is refused.
func TestAuthSignersProvisionsTheBucket(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JetStream server")
	}
	srv := bustest.StartServer(t, bustest.Options{Auth: true})
	dir := t.TempDir()
	file := writeFile(t, dir, "signers.json", bus.SignersFile(srv.Signers(t)))
	env := func(identity string) config.Env {
		return config.Env{"LOOP_NATS_URL": srv.URL(), "LOOP_NATS_NKEY_SEED": string(srv.Seed(identity))}
	}
	if code, stdout, stderr := runVerb(t, env(bus.IdentityOperator), "auth", "signers", file); code != 0 || !strings.Contains(stdout, "7 identities") {
		t.Fatalf("auth signers as the operator: %d %s %s", code, stdout, stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	set, err := srv.ConnectAs(t, bus.IdentityDispatcher, "reader").LoadSigners(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := set.PublicKeys(); !maps.Equal(got, srv.Signers(t)) {
		t.Fatalf("the signers bucket holds %v", got)
	}
	if code, _, _ := runVerb(t, env(bus.IdentityLedgerWriter), "auth", "signers", file); code == 0 {
		t.Fatal("a service wrote the signers bucket")
	}

	out := t.TempDir()
	if code, stdout, stderr := runVerb(t, config.Env{}, "auth", "init", out); code != 0 || !strings.Contains(stdout, "signers.json") {
		t.Fatalf("auth init: %d %s %s", code, stdout, stderr)
	}
	pubs, err := bus.ReadSignersFile(filepath.Join(out, "signers.json"))
	if err != nil || len(pubs) != len(bus.Identities()) {
		t.Fatalf("signers.json: %v %v", pubs, err)
	}
	written, _ := os.ReadFile(filepath.Join(out, "signers.json"))
	for _, id := range bus.Identities() {
		seed, _ := os.ReadFile(filepath.Join(out, identitiesDir, id+".nk"))
		pub, err := bus.PublicKey(seed)
		if err != nil || pubs[id] != pub || bytes.Contains(written, bytes.TrimSpace(seed)) {
			t.Errorf("signers.json for %s: %s (%v)", id, pubs[id], err)
		}
	}
}
