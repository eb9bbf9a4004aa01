package bus

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Credentials is how a connection proves its identity to the NATS server, in
// the NATS-native ways: an NKey seed (what `the-loop up` and `the-loop auth
// init` issue), a creds file of decentralized JWT auth, or a user and
// password; optionally over TLS with a CA and a client certificate. At most one
// of Seed, SeedFile, CredsFile and User is set; none means no credential.
type Credentials struct {
	// Seed is an NKey user seed held in memory ("SU…").
	Seed []byte
	// SeedFile is a file holding an NKey user seed.
	SeedFile string
	// CredsFile is a JWT creds file (user JWT and seed).
	CredsFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// SigningSeedFile is the identity's NKey user seed when it
	// authenticates with a user and password, which carry no key: the key
	// its publications are signed with (docs/decisions/099-signed-events.md).
	// An NKey seed or a creds file signs with its own seed.
	SigningSeedFile string
	// CAFile verifies the server's certificate; CertFile and KeyFile are a
	// client certificate (mutual TLS).
	CAFile, CertFile, KeyFile string
	// Setting names where the credential came from ("LOOP_NATS_NKEY_FILE"),
	// for error messages. Never the secret itself.
	Setting string
}

// Kind names the credential for messages: "nkey", "creds", "user" or "none".
func (c Credentials) Kind() string {
	switch {
	case len(c.Seed) > 0 || c.SeedFile != "":
		return "nkey"
	case c.CredsFile != "":
		return "creds"
	case c.User != "":
		return "user"
	}
	return "none"
}

// Validate checks that the credential is complete and its files readable and
// well-formed, naming the setting at fault, before any connection is tried.
func (c Credentials) Validate() error {
	n := 0
	for _, set := range []bool{len(c.Seed) > 0, c.SeedFile != "", c.CredsFile != "", c.User != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return fmt.Errorf("%s: give one NATS credential: an NKey seed, a creds file, or a user and password", c.where())
	}
	if c.User == "" && c.Password != "" {
		return fmt.Errorf("%s: a NATS password without a user", c.where())
	}
	if c.SigningSeedFile != "" {
		b, err := os.ReadFile(c.SigningSeedFile)
		if err != nil {
			return fmt.Errorf("LOOP_NATS_SIGNING_SEED_FILE: read the NKey seed: %w", err)
		}
		if _, err := userSeed(b); err != nil {
			return fmt.Errorf("LOOP_NATS_SIGNING_SEED_FILE (%s): %w", c.SigningSeedFile, err)
		}
	}
	if c.SeedFile != "" {
		b, err := os.ReadFile(c.SeedFile)
		if err != nil {
			return fmt.Errorf("%s: read the NKey seed: %w", c.where(), err)
		}
		if _, err := userSeed(b); err != nil {
			return fmt.Errorf("%s (%s): %w", c.where(), c.SeedFile, err)
		}
	}
	if len(c.Seed) > 0 {
		if _, err := userSeed(c.Seed); err != nil {
			return fmt.Errorf("%s: %w", c.where(), err)
		}
	}
	for _, f := range []string{c.CredsFile, c.CAFile, c.CertFile, c.KeyFile} {
		if f == "" {
			continue
		}
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s: %w", c.where(), err)
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return fmt.Errorf("%s: a client certificate needs both its certificate and its key file", c.where())
	}
	return nil
}

func (c Credentials) where() string {
	if c.Setting != "" {
		return c.Setting
	}
	return "NATS credential"
}

// userSeed parses an NKey user seed, ignoring surrounding whitespace and
// comment lines (files written by nsc carry both).
func userSeed(b []byte) (nkeys.KeyPair, error) {
	var seed []byte
	for line := range strings.SplitSeq(string(b), "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "SU") {
			seed = []byte(line)
			break
		}
	}
	if seed == nil {
		return nil, errors.New("not an NKey user seed (a line starting with SU)")
	}
	kp, err := nkeys.FromSeed(seed)
	if err != nil {
		return nil, errors.New("not a valid NKey user seed")
	}
	return kp, nil
}

// ErrNoSigningKey: a bus identity authenticates with a user and password,
// which carry no key to sign its publications with.
var ErrNoSigningKey = errors.New("a user and password carry no key to sign this identity's events with: " +
	"set LOOP_NATS_SIGNING_SEED_FILE to the identity's NKey seed file (its public key in the signers bucket)")

// signingKey is the NKey the identity signs with: the seed it connects
// with, the seed inside its creds file, or SigningSeedFile. nil, nil: the
// credential is none, so there is no identity to sign as.
func (c Credentials) signingKey() (nkeys.KeyPair, error) {
	if c.SigningSeedFile != "" {
		b, err := os.ReadFile(c.SigningSeedFile)
		if err != nil {
			return nil, fmt.Errorf("LOOP_NATS_SIGNING_SEED_FILE: read the NKey seed: %w", err)
		}
		kp, err := userSeed(b)
		if err != nil {
			return nil, fmt.Errorf("LOOP_NATS_SIGNING_SEED_FILE (%s): %w", c.SigningSeedFile, err)
		}
		return kp, nil
	}
	switch {
	case len(c.Seed) > 0:
		return userSeed(c.Seed)
	case c.SeedFile != "":
		b, err := os.ReadFile(c.SeedFile)
		if err != nil {
			return nil, fmt.Errorf("%s: read the NKey seed: %w", c.where(), err)
		}
		return userSeed(b)
	case c.CredsFile != "":
		b, err := os.ReadFile(c.CredsFile)
		if err != nil {
			return nil, fmt.Errorf("%s: read the creds file: %w", c.where(), err)
		}
		kp, err := nkeys.ParseDecoratedUserNKey(b)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): no user seed in the creds file", c.where(), c.CredsFile)
		}
		return kp, nil
	case c.User != "":
		return nil, fmt.Errorf("%s: %w", c.where(), ErrNoSigningKey)
	}
	return nil, nil
}

// options turns the credential into nats.go options.
func (c Credentials) options() ([]nats.Option, error) {
	var o []nats.Option
	switch {
	case len(c.Seed) > 0:
		opt, err := seedOption(c.Seed)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.where(), err)
		}
		o = append(o, opt)
	case c.SeedFile != "":
		b, err := os.ReadFile(c.SeedFile)
		if err != nil {
			return nil, fmt.Errorf("%s: read the NKey seed: %w", c.where(), err)
		}
		opt, err := seedOption(b)
		if err != nil {
			return nil, fmt.Errorf("%s (%s): %w", c.where(), c.SeedFile, err)
		}
		o = append(o, opt)
	case c.CredsFile != "":
		o = append(o, nats.UserCredentials(c.CredsFile))
	case c.User != "":
		o = append(o, nats.UserInfo(c.User, c.Password))
	}
	if c.CAFile != "" {
		o = append(o, nats.RootCAs(c.CAFile))
	}
	if c.CertFile != "" {
		o = append(o, nats.ClientCert(c.CertFile, c.KeyFile))
	}
	return o, nil
}

// seedOption signs the server's nonce with the seed, keeping the key pair in
// memory rather than re-reading a file at each reconnect.
func seedOption(seed []byte) (nats.Option, error) {
	kp, err := userSeed(seed)
	if err != nil {
		return nil, err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return nil, fmt.Errorf("NKey public key: %w", err)
	}
	return nats.Nkey(pub, kp.Sign), nil
}

// NewIdentityKey generates an NKey user key pair for a bus identity: the seed
// (secret, given to the identity) and its public key (what the server's
// configuration lists).
func NewIdentityKey() (seed []byte, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("bus: create NKey: %w", err)
	}
	if seed, err = kp.Seed(); err != nil {
		return nil, "", fmt.Errorf("bus: NKey seed: %w", err)
	}
	if public, err = kp.PublicKey(); err != nil {
		return nil, "", fmt.Errorf("bus: NKey public key: %w", err)
	}
	return seed, public, nil
}

// PublicKey returns the public key of an NKey user seed.
func PublicKey(seed []byte) (string, error) {
	kp, err := userSeed(seed)
	if err != nil {
		return "", err
	}
	return kp.PublicKey()
}

// AuthError is a connection the server refused: its credential is missing,
// unknown or wrong. It names the connection and the setting the credential
// came from, never the secret.
type AuthError struct {
	Conn    string
	Setting string
	Kind    string
	Err     error
}

func (e *AuthError) Error() string {
	if e.Kind == "none" {
		return fmt.Sprintf("%s: the NATS server requires a credential and none is set (set %s): %v", e.Conn, e.Setting, e.Err)
	}
	return fmt.Sprintf("%s: the NATS server refused the %s credential from %s: %v", e.Conn, e.Kind, e.Setting, e.Err)
}

func (e *AuthError) Unwrap() error { return e.Err }

// isAuthErr reports whether err is the server refusing a credential.
func isAuthErr(err error) bool {
	return errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) ||
		errors.Is(err, nats.ErrAuthRevoked) || errors.Is(err, nats.ErrAccountAuthExpired) ||
		err != nil && strings.Contains(strings.ToLower(err.Error()), "authorization violation")
}
