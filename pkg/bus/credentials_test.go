package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/the-loop/bus/pkg/bus"
	"github.com/the-loop/bus/pkg/catalog"
)

// startServer runs a plain nats-server (no JetStream) with opts for one
// test: the credentials a deployment's own server may ask for.
func startServer(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	opts.Host, opts.Port, opts.NoSigs = "127.0.0.1", -1, true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return srv
}

// connectErr connects with c and returns the error of the connection:
// Connect's, WaitConnected's or, once connected, Refused's.
func connectErr(t *testing.T, url, name string, c bus.Credentials) (*bus.Conn, error) {
	t.Helper()
	conn, err := bus.Connect(context.Background(), bus.Options{URL: url, Name: name, ReconnectWait: 20 * time.Millisecond, Credentials: c})
	if err != nil {
		return nil, err
	}
	t.Cleanup(conn.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	return conn, conn.WaitConnected(ctx)
}

// TestUserAndPassword: a server that knows users by name and password
// admits the right pair and refuses a wrong password with an *AuthError
// that names the connection and the setting, never the password.
func TestUserAndPassword(t *testing.T) {
	const password = "correct-horse-battery-7"
	srv := startServer(t, &server.Options{Users: []*server.User{{Username: "loop", Password: password}}})
	url := srv.ClientURL()

	conn, err := connectErr(t, url, "ledger-writer/pod-1", bus.Credentials{User: "loop", Password: password, Setting: "LOOP_NATS_USER"})
	if err != nil {
		t.Fatalf("the right password: %v", err)
	}
	// A request answered over the same credential: the connection works.
	svc, err := conn.AddService(bus.ServiceSpec{Name: "probe", Version: "1.0.0", Endpoints: []bus.Endpoint{{
		Name: "echo", Subject: catalog.ServicePrefix + ".probe.echo",
		Handler: func(_ context.Context, data []byte) ([]byte, error) { return data, nil },
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = svc.Stop(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got, err := conn.Request(ctx, catalog.ServicePrefix+".probe.echo", []byte("hi")); err != nil || string(got) != "hi" {
		t.Fatalf("a request over the password connection: %q %v", got, err)
	}

	_, err = connectErr(t, url, "ledger-writer/pod-2", bus.Credentials{User: "loop", Password: "wrong-password-0", Setting: "LOOP_NATS_USER"})
	var ae *bus.AuthError
	if !errors.As(err, &ae) || ae.Kind != "user" {
		t.Fatalf("a wrong password: %v, want an *AuthError of kind user", err)
	}
	for _, want := range []string{"ledger-writer/pod-2", "LOOP_NATS_USER", "user credential"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "wrong-password-0") || strings.Contains(err.Error(), password) {
		t.Error("the error carries a password")
	}
}

// TestAnotherIdentitysSeed: a service given another identity's seed (two
// secrets swapped in a deployment) is admitted by the server but denied its
// own reply subjects; Refused says so, naming the service and the setting,
// instead of every request of the service timing out.
func TestAnotherIdentitysSeed(t *testing.T) {
	srv := authServer(t)
	conn, err := bus.Connect(context.Background(), bus.Options{
		URL: srv.URL(), Name: "ledger-writer/pod-1", ReconnectWait: 20 * time.Millisecond, Identity: bus.IdentityLedgerWriter,
		Credentials: bus.Credentials{Seed: srv.Seed(bus.IdentityIngressSlack), Setting: "LOOP_NATS_NKEY_FILE"},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := conn.WaitConnected(ctx); err != nil {
		t.Fatalf("the server admits the seed: %v", err)
	}
	refused := make(chan error, 1)
	go func() { refused <- conn.Refused(ctx) }()
	// Its first request subscribes to its reply subjects.
	rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
	_, _ = conn.StreamStats(rctx, bus.StreamInbox)
	rcancel()
	err = <-refused
	var ae *bus.AuthError
	if !errors.As(err, &ae) || !errors.Is(err, bus.ErrOtherIdentity) {
		t.Fatalf("Refused = %v, want an *AuthError for another identity's credential", err)
	}
	for _, want := range []string{"ledger-writer/pod-1", "LOOP_NATS_NKEY_FILE", bus.IdentityLedgerWriter} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}

// selfSigned writes a CA certificate to dir/ca.pem and returns a server
// certificate for 127.0.0.1 signed by it.
func selfSigned(t *testing.T, dir string) (tls.Certificate, string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "the-loop test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caPath := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caPath
}

// handshakes records the TLS handshake failures a server logs.
type handshakes struct {
	mu     sync.Mutex
	failed int
}

func (h *handshakes) Errorf(format string, v ...any) {
	if strings.Contains(strings.ToLower(fmt.Sprintf(format, v...)), "tls handshake error") {
		h.mu.Lock()
		h.failed++
		h.mu.Unlock()
	}
}
func (h *handshakes) count() int             { h.mu.Lock(); defer h.mu.Unlock(); return h.failed }
func (h *handshakes) Noticef(string, ...any) {}
func (h *handshakes) Warnf(string, ...any)   {}
func (h *handshakes) Fatalf(string, ...any)  {}
func (h *handshakes) Debugf(string, ...any)  {}
func (h *handshakes) Tracef(string, ...any)  {}

// TestTLSWithTheDeploymentsCA: a server with a certificate of the
// deployment's own CA is reached with that CA (LOOP_NATS_TLS_CA); without
// it the handshake fails and the connection never comes up.
func TestTLSWithTheDeploymentsCA(t *testing.T) {
	dir := t.TempDir()
	cert, caPath := selfSigned(t, dir)
	srv := startServer(t, &server.Options{TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, TLSTimeout: 5})
	log := &handshakes{}
	srv.SetLogger(log, false, false)
	url := "tls://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(srv.Addr().(*net.TCPAddr).Port))

	if _, err := connectErr(t, url, "tls-with-ca", bus.Credentials{CAFile: caPath, Setting: "LOOP_NATS_TLS_CA"}); err != nil {
		t.Fatalf("with the deployment's CA: %v", err)
	}
	if n := log.count(); n != 0 {
		t.Fatalf("%d handshakes failed with the right CA", n)
	}

	conn, err := bus.Connect(context.Background(), bus.Options{URL: url, Name: "tls-without-ca", ReconnectWait: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	deadline := time.Now().Add(20 * time.Second)
	for log.count() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the server never saw the handshake without the CA fail")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if conn.Connected() {
		t.Error("connected to a server whose certificate the system roots do not vouch for")
	}
}

// TestSeedFilesAsWritten: a seed file is read as `auth init` writes it and
// as nsc does (comment lines around the seed); an identity the grants do
// not know gets no grant.
func TestSeedFilesAsWritten(t *testing.T) {
	seed, pub, err := bus.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{
		"plain":     string(seed),
		"newline":   string(seed) + "\n",
		"nsc-style": "-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n\n*************************************************************\n",
	} {
		path := filepath.Join(dir, name+".nk")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		c := bus.Credentials{SeedFile: path, Setting: "LOOP_NATS_NKEY_FILE"}
		if err := c.Validate(); err != nil || c.Kind() != "nkey" {
			t.Errorf("%s: Validate = %v, kind %s", name, err, c.Kind())
		}
		if got, err := bus.PublicKey([]byte(content)); err != nil || got != pub {
			t.Errorf("%s: public key %q %v, want %s", name, got, err, pub)
		}
	}
	for c, kind := range map[*bus.Credentials]string{
		{}: "none", {Seed: seed}: "nkey", {CredsFile: "x.creds"}: "creds", {User: "u", Password: "p"}: "user",
	} {
		if c.Kind() != kind {
			t.Errorf("Kind() = %s, want %s", c.Kind(), kind)
		}
	}
	if err := (bus.Credentials{CAFile: filepath.Join(dir, "nope.pem"), Setting: "LOOP_NATS_TLS_CA"}).Validate(); err == nil || !strings.Contains(err.Error(), "LOOP_NATS_TLS_CA") {
		t.Errorf("a missing CA file: %v", err)
	}
	if _, err := bus.GrantFor("agent-session", bus.DefaultTopology()); err == nil {
		t.Error("an unknown identity got a grant")
	}
}

// TestUserAndPasswordNeedASigningSeed: a bus identity that authenticates with
// a user and password holds no key to sign its events with, so it does not
// connect without LOOP_NATS_SIGNING_SEED_FILE; with it, it signs as itself.
// An NKey seed signs with its own key. The error never carries a secret.
func TestUserAndPasswordNeedASigningSeed(t *testing.T) {
	const password = "correct-horse-battery-8"
	srv := startServer(t, &server.Options{Users: []*server.User{{Username: "loop", Password: password}}})
	creds := bus.Credentials{User: "loop", Password: password, Setting: "LOOP_NATS_USER"}
	_, err := bus.Connect(context.Background(), bus.Options{URL: srv.ClientURL(), Name: "ingress-slack/pod-1", Credentials: creds,
		Identity: bus.IdentityIngressSlack})
	if !errors.Is(err, bus.ErrNoSigningKey) || !strings.Contains(err.Error(), "LOOP_NATS_SIGNING_SEED_FILE") || strings.Contains(err.Error(), password) {
		t.Fatalf("a user and password without a signing seed: %v", err)
	}
	seed, pub, err := bus.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	creds.SigningSeedFile = filepath.Join(t.TempDir(), "signing.nk")
	if err := os.WriteFile(creds.SigningSeedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	conn, err := bus.Connect(context.Background(), bus.Options{URL: srv.ClientURL(), Name: "ingress-slack/pod-1", Credentials: creds,
		Identity: bus.IdentityIngressSlack})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !conn.Signing() || conn.Identity() != bus.IdentityIngressSlack {
		t.Fatalf("signing %v as %q", conn.Signing(), conn.Identity())
	}
	s, err := bus.NewSigner(bus.IdentityIngressSlack, seed)
	if err != nil || s.PublicKey() != pub {
		t.Fatalf("signer %v", err)
	}
	// Without an identity (a bus without authorization) nothing signs.
	plain, err := bus.Connect(context.Background(), bus.Options{URL: srv.ClientURL(), Name: "plain", Credentials: creds})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if plain.Signing() {
		t.Fatal("a connection without an identity signs")
	}
}

// TestCredsFileSignsWithItsSeed: a JWT creds file carries the identity's
// seed beside its JWT; the connection signs with it.
func TestCredsFileSignsWithItsSeed(t *testing.T) {
	seed, pub, err := bus.NewIdentityKey()
	if err != nil {
		t.Fatal(err)
	}
	creds := filepath.Join(t.TempDir(), "ingress-slack.creds")
	// A creds file as nsc writes it; the JWT is not read for signing.
	body := "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.e30.c2ln\n------END NATS USER JWT------\n\n" +
		"-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"
	if err := os.WriteFile(creds, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServer(t, &server.Options{})
	conn, err := bus.Connect(context.Background(), bus.Options{URL: srv.ClientURL(), Name: "ingress-slack/pod-1",
		Credentials: bus.Credentials{CredsFile: creds, Setting: "LOOP_NATS_CREDS_FILE"}, Identity: bus.IdentityIngressSlack})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !conn.Signing() {
		t.Fatal("a creds file's connection does not sign")
	}
	set, err := bus.NewSigners(map[string]string{bus.IdentityIngressSlack: pub})
	if err != nil {
		t.Fatal(err)
	}
	s, err := bus.NewSigner(bus.IdentityIngressSlack, seed)
	if err != nil {
		t.Fatal(err)
	}
	m := gateMessage()
	if err := s.Sign(&m, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := set.Verify(stored(m.Subject, 0), m.Header, m.Data, m.MsgID, bus.InboxPolicy); err != nil {
		t.Fatal(err)
	}
}
